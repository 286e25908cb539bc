"""`gpuagent sim fleet`: the command that backfills a simulated fleet's history into InfluxDB
(gpuagent.sim.fleet_backfill simulates and writes; gpuagent.sim.fleet_replay replays at fleet scale).
gpuagent.sim.cli registers it, imported when the command is asked for."""

from __future__ import annotations

import os
import time

import click

from gpuagent.commands.cli_options import influx_options
from gpuagent.compare.core import parse_time
from gpuagent.compare.progress import Progress
from gpuagent.compare.query import connection_from
from gpuagent.errors import AgentError
from gpuagent.plugin_host import load_host
from gpuagent.sim.fleet import parse_spec
from gpuagent.sim.fleet_backfill import DEFAULT_COLLECTORS, check_database, plan_hosts
from gpuagent.sim.fleet_replay import backfill_replayed
from gpuagent.sim.load import check_scenario
from gpuagent.units import parse_duration


def total_steps(n_hosts: int, n_specs: int, distinct: int) -> int:
    """The progress steps of `sim fleet`: a host each, and each host simulated in full to be replayed."""
    period = max(1, distinct * n_specs)
    return n_hosts + (period if n_hosts > period else 0)


def _steps_text(n_hosts: int, n_specs: int, distinct: int) -> str:
    period = max(1, distinct * n_specs)
    if n_hosts > period:
        return f"{period} hosts simulated, then {n_hosts} written"
    return f"a step per host, {n_hosts} in all"


@click.command("fleet")
@click.option(
    "--hosts",
    type=click.IntRange(1, 10_000),
    default=None,
    help="Simulated machines (default: one per --spec).",
)
@click.option(
    "--spec",
    "specs",
    multiple=True,
    metavar="SPEC",
    help="Fleet SPEC of one machine (l40s:4); repeat it, or separate with ';', for a mix: host i gets spec i mod n.",
)
@click.option(
    "--duration",
    default="6h",
    show_default=True,
    help="History to write, ending now (10m, 6h, 2d).",
)
@click.option("--step", default="10s", show_default=True, help="Collection interval of the simulated agents.")
@click.option(
    "--end",
    "end",
    default=None,
    metavar="TIME",
    help="End of the history (RFC 3339 or epoch s; default: now).",
)
@influx_options(config_help="Read url, database/bucket and credentials from its [sinks.influxdb].")
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the load model (deterministic history).",
)
@click.option(
    "--scenario",
    default=None,
    help="Load scenario: idle, training, inference, mixed (default); training and "
    "inference also write gpu_work points, every workload on every model (compare --by model,workload).",
)
@click.option(
    "--collectors",
    "collector_names",
    default=",".join(DEFAULT_COLLECTORS),
    show_default=True,
    help="Comma-separated collectors to run, or 'all' for every GPU collector.",
)
@click.option("--prefix", default="sim", show_default=True, help="Host names are PREFIX-00, PREFIX-01, ...")
@click.option(
    "--with-jobs",
    is_flag=True,
    default=False,
    help="Simulated Slurm jobs on the GPUs (gpu_job / gpu_process points, for compare --by job).",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 256),
    default=None,
    help="Processes (default: CPUs, at most one per host).",
)
@click.option(
    "--distinct",
    type=click.IntRange(1, 10_000),
    default=8,
    show_default=True,
    help="Hosts simulated in full per --spec; the others replay one of them under their own name and "
    "GPU UUIDs (gpuagent.sim.fleet_replay): large fleets are then write-bound.",
)
def fleet(
    hosts,
    specs,
    duration,
    step,
    end,
    config_path,
    url,
    database,
    token,
    username,
    password,
    seed,
    scenario,
    collector_names,
    prefix,
    with_jobs,
    jobs,
    distinct=8,
) -> None:
    """Backfill a simulated fleet's history into InfluxDB (one `host` tag per simulated machine)."""
    spec_list = [s.strip() for raw in specs for s in raw.split(";") if s.strip()]
    if not spec_list:
        raise click.UsageError("give at least one --spec (e.g. --spec l40s:4 --spec h100-sxm:8)")
    for s in spec_list:
        parse_spec(s)  # a bad SPEC fails here, with its one-line reason, before anything is written
    if scenario is not None:
        check_scenario(scenario)
    try:
        duration_s = parse_duration(duration)
    except ValueError as exc:
        raise AgentError(f"--duration: {exc}") from None
    try:
        step_s = parse_duration(step)
    except ValueError as exc:
        raise AgentError(f"--step: {exc}") from None
    if step_s > duration_s:
        raise AgentError("--step is longer than --duration")
    known = {n: c for n, c in load_host().collectors.items() if c.requires_gpus}
    names = tuple(n.strip() for n in collector_names.split(",") if n.strip())
    if names == ("all",):
        names = tuple(sorted(known))
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise AgentError(
            f"--collectors: unknown GPU collector {', '.join(unknown) or '(none given)'}; known: {', '.join(sorted(known))}"
        )
    conn = connection_from(config_path, url, database, token, username, password)
    check_database(conn)
    step_ns = int(round(step_s * 1e9))
    end_ns = parse_time(end) if end else time.time_ns()
    end_ns -= end_ns % step_ns
    start_ns = end_ns - int(duration_s * 1e9)
    n_hosts = hosts or len(spec_list)
    if with_jobs and "processes" not in names:
        names = (*names, "processes")
    plans = plan_hosts(n_hosts, spec_list, start_ns, end_ns, step_s, seed, scenario, names, prefix)
    for plan in plans:
        plan.with_jobs = with_jobs
    jobs = jobs or max(1, min(os.cpu_count() or 1, n_hosts))
    t0 = time.perf_counter()

    def partial(done: int, total: int) -> str:
        return (
            f"sim fleet stopped after {done} of {total} ({_steps_text(n_hosts, len(spec_list), distinct)}): "
            f"{conn.label} now holds a partial history; run the same command again (same --end and --seed) "
            "to write it whole"
        )

    total = total_steps(n_hosts, len(spec_list), distinct)
    unit = "hosts" if total == n_hosts else "host runs"  # replayed: each simulated, then each written
    with Progress("sim fleet", total, unit, partial) as progress:
        points = backfill_replayed(plans, conn, jobs, distinct, len(spec_list), progress)
    elapsed = time.perf_counter() - t0
    click.echo(
        f"wrote {points} points for {n_hosts} host(s) x {plans[0].steps} steps of {step} "
        f"to {conn.label} in {elapsed:.1f}s ({points / elapsed:,.0f} points/s)",
        err=True,
    )
