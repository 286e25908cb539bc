"""The fleet side by side (`gpuagent compare`, `gpuagent rollups`), from InfluxDB (InfluxQL) or a
Prometheus-compatible server (PromQL: Prometheus, VictoriaMetrics).

The modules are in layers; a module imports only from its own layer or those below it, at module
level (tests/compare/test_layers.py checks there is no cycle and few imports inside functions):

1. core: core (range, groups, buckets, the document every report fills, NoData), figures (the
   figure registry: each figure's key, unit, definition, aggregates and derivation, which the
   backends answer and the renderers read), where (the --where rule), health, limits, sharing,
   placement, prices, progress, tables (terminal tables).
2. clients: query (InfluxQL, connection_from), promql (PromQL).
3. backends, per engine and shape: report (InfluxQL raw), work (the work figures: InfluxWork,
   PromWork, build_work), promql_report, rollups (rollups administration: levels, init, backfill,
   coverage), rollup_report, rollup_work, rollup_rules, promql_rollups, jobs, drivers.
4. renderers: render (table, JSON, CSV), work_render, html_report, jobs_render.
5. commands: command (what `compare` does), rollups_command (`rollups init|backfill|status`).
6. options: cli and rollups_cli, the click commands; each imports its command module when it runs
   (`gpuagent --help` lists them without the engines: the start-up imports a test checks).

Besides those command boundaries, one edge goes back up, imported inside the function that needs
it: a RollupReport's work section is a RollupWork, which reads RollupReports (rollup_report ->
rollup_work). (PromWork and top --fleet name their series through promql.PromNames.) The simulated
fleet's backfill that writes what compare reads is gpuagent.sim's (`gpuagent sim fleet`); compare
never imports it.
"""
