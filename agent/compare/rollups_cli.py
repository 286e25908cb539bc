"""`gpuagent rollups init|backfill|status`: the downsampled series compare reads at fleet scale.

On InfluxDB 1.x, retention policies and continuous queries (gpuagent.compare.rollups). For
Prometheus and VictoriaMetrics the same rollups are the recording rules of deploy/rollups/, loaded
into vmalert or Prometheus; with `--promql-url`, `backfill` replays them over history with vmalert
(VictoriaMetrics) and `status` says how far they reach (gpuagent.compare.promql_rollups).
"""

from __future__ import annotations

import click

from gpuagent.commands.cli_options import influx_options


def _connection_options(f):
    f = click.option(
        "--timeout",
        default=None,
        metavar="DURATION",
        help="Longest wait for one query's answer (default: the config's, else 30s); a "
        "backfill of a large fleet may need longer, or a shorter --chunk.",
    )(f)
    f = click.option(
        "--promql-url",
        default=None,
        metavar="URL",
        help="VictoriaMetrics (Prometheus query API) whose recording rules to backfill or "
        "report on, instead of InfluxDB.",
    )(f)
    return influx_options()(f)


@click.group("rollups")
def rollups() -> None:
    """Rollups (1-minute and 1-hour) that compare reads where they cover its range: on InfluxDB 1.x,
    or as recording rules on VictoriaMetrics or Prometheus (--promql-url)."""


@rollups.command("init")
@_connection_options
def init(**options) -> None:
    """Create the retention policies and continuous queries (what exists is left as it is)."""
    from gpuagent.compare import rollups_command  # the command boundary: the engines load here

    rollups_command.init(**options)


@rollups.command("backfill")
@click.option(
    "--since",
    default="24h",
    show_default=True,
    metavar="DURATION",
    help="History to roll up, ending at the last whole bucket before now.",
)
@click.option("--chunk", default="1h", show_default=True, metavar="DURATION", help="Time each SELECT ... INTO covers.")
@click.option(
    "--write-url",
    default=None,
    metavar="URL",
    help="With --promql-url: where vmalert writes the rollups (default: the --promql-url; a "
    "cluster's vminsert, http://HOST:8480/insert/0/prometheus).",
)
@click.option(
    "--vmalert",
    default="vmalert",
    show_default=True,
    metavar="PATH",
    help="With --promql-url: the vmalert binary that replays the rules.",
)
@_connection_options
def backfill(**options) -> None:
    """Roll up history already stored (the continuous queries' statements over the past; over PromQL,
    the recording rules replayed by vmalert for the buckets not recorded yet)."""
    from gpuagent.compare import rollups_command  # the command boundary: the engines load here

    rollups_command.backfill(**options)


@rollups.command("status")
@click.option("--json", "as_json", is_flag=True, default=False, help="One JSON document.")
@click.option(
    "--since",
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="With --promql-url: how far back to look for recorded buckets.",
)
@_connection_options
def status(**options) -> None:
    """What exists and how far each level reaches."""
    from gpuagent.compare import rollups_command  # the command boundary: the engines load here

    rollups_command.status(**options)
