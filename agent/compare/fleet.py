"""`gpuagent sim fleet`: backfill a simulated fleet's history into InfluxDB.

Each simulated machine is a SimMachine on a ManualClock, read by the real
collectors (the same code `gpuagent run` uses) with an Accumulator whose
timestamp is set per step, so the history is what the agent would have
written, only faster: steps run back to back, from now - duration to now.
Hosts run one after another in a process (pynvml has one libnvidia-ml per
process) and in parallel across processes (`--jobs`); each sends line
protocol to /write in large gzip batches.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import click

from gpuagent.compare.query import Connection, InfluxQL, connection_from
from gpuagent.errors import AgentError
from gpuagent.units import parse_duration

log = logging.getLogger("gpuagent.sim.fleet")

# What `gpuagent compare` reads; `--collectors all` adds every other GPU collector.
DEFAULT_COLLECTORS = ("power", "clocks", "memory", "p2p", "mig", "vgpu", "health", "gpu_info")
BATCH_LINES = 20_000
# Simulated time at the first step: the driver loads as the history starts, so fault times in a
# SPEC (`l40s:2@lost=1:30m`) count from the start of the history.
UPTIME_S = 0.0


@dataclass
class HostPlan:
    hostname: str
    spec: str
    seed: int
    scenario: str | None
    start_ns: int
    step_ns: int
    steps: int
    collectors: tuple[str, ...]
    # Simulated Slurm jobs on the GPUs (gpuagent.sim.jobs), written as gpu_process / gpu_job.
    with_jobs: bool = False


def plan_hosts(
    hosts: int,
    specs: list[str],
    start_ns: int,
    end_ns: int,
    step_s: float,
    seed: int,
    scenario: str | None,
    collectors: tuple[str, ...],
    prefix: str = "sim",
) -> list[HostPlan]:
    """Host i gets spec i mod len(specs), its own seed (distinct UUIDs and load) and name `sim-NN`."""
    step_ns = int(round(step_s * 1e9))
    steps = int((end_ns - start_ns) // step_ns) + 1
    width = max(2, len(str(hosts - 1)))
    return [
        HostPlan(
            f"{prefix}-{i:0{width}d}",
            specs[i % len(specs)],
            seed * 1000 + i,
            scenario,
            start_ns,
            step_ns,
            steps,
            collectors,
        )
        for i in range(hosts)
    ]


def backfill_host(plan: HostPlan, conn: Connection) -> int:
    """Simulate one host over its steps and write its points; returns the number of points written."""
    return simulate_host(plan, conn)


def simulate_host(plan: HostPlan, conn: Connection | None, keep: bool = False):
    """Run the collectors over the plan's steps; write each batch to `conn` (when given) and return
    the points written, or with `keep` return the batches (line-protocol text, BATCH_LINES lines each)."""
    import pynvml

    from gpuagent import sim
    from gpuagent.context import AgentContext
    from gpuagent.gpus.gpu import Gpu
    from gpuagent.pipeline.accumulator import Accumulator
    from gpuagent.pipeline.metric import serialize
    from gpuagent.plugin_host import load_host
    from gpuagent.sim.clock import ManualClock

    plugins = load_host()
    clock = ManualClock(UPTIME_S)
    machine = sim.install(plan.spec, seed=plan.seed, clock=clock, scenario=plan.scenario)
    book = _with_jobs(machine, plan) if plan.with_jobs else None
    client = InfluxQL(conn) if conn is not None else None
    kept: list[str] = []
    written = 0
    runners: list[list] = []
    failed: set[str] = set()
    try:
        pynvml.nvmlInit()
        gpus = [Gpu(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
        context = AgentContext(hostname=plan.hostname, gpus=gpus)
        work = _work_sim(machine, plan)
        work_tags = [{**context.default_tags, **g.tags} for g in gpus]
        for name in plan.collectors:
            cls = plugins.collectors.get(name)
            if cls is None:
                raise AgentError(
                    f"--collectors: no collector {name!r} (known: {', '.join(sorted(plugins.collectors))})"
                )
            collector = cls(cls.Config(), context)
            if book is not None and name == "processes":
                from gpuagent.sim.jobs import JobHost

                # host and Owner are the processes collector's own (name == "processes"), hence the ignore
                collector.host = JobHost(book, cls.Owner)  # type: ignore[attr-defined]  # their pids are not in /proc
            interval_ns = int((collector.default_interval or 0) * 1e9) or plan.step_ns
            runners.append([collector, interval_ns, None])
        lines: list[str] = []
        tags = context.default_tags
        for k in range(plan.steps):
            t_ns = plan.start_ns + k * plan.step_ns
            clock.set(UPTIME_S + k * plan.step_ns / 1e9)
            acc = Accumulator(tags, time_ns=t_ns)
            for runner in runners:
                collector, interval_ns, last = runner
                if last is None or t_ns - last >= interval_ns:
                    runner[2] = t_ns
                    try:
                        collector.collect(acc)
                    except Exception as exc:  # as the scheduler does: one collector never stops the rest
                        if collector.name not in failed:
                            log.warning("%s: collector %s failed: %s", plan.hostname, collector.name, exc)
                        failed.add(collector.name)
            lines.extend(serialize(p.measurement, p.tags, p.fields, p.time_ns) for p in acc.points)
            if work is not None:
                lines.extend(work.lines(k, plan.step_ns / 1e9, t_ns, work_tags))
            if len(lines) >= BATCH_LINES:
                _emit(client, kept, lines)
                written += len(lines)
                lines = []
        if lines:
            _emit(client, kept, lines)
            written += len(lines)
    finally:
        for runner in runners:
            runner[0].close()
        if client is not None:
            client.close()
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
        sim.uninstall()
    return kept if keep else written


def _emit(client, kept: list[str], lines: list[str]) -> None:
    body = "\n".join(lines) + "\n"
    if client is not None:
        client.write(body.encode())
    else:
        kept.append(body)


def _work_sim(machine, plan: HostPlan):
    """The host's simulated work (gpuagent.sim.work) under the inference and training scenarios."""
    from gpuagent.sim.work import WORKLOADS, WorkSim

    if plan.scenario not in WORKLOADS:
        return None
    # plan_hosts gives host i the seed SEED × 1000 + i: its index picks its first workload.
    return WorkSim(machine, plan.scenario, plan.seed, plan.seed % 1000, plan.steps)


def _with_jobs(machine, plan: HostPlan):
    """Give the machine a job book: every GPU runs the book's jobs instead of its own load's
    processes (the load model is unchanged, so power and energy are the same as without)."""
    from gpuagent.sim.jobs import JobBook

    machine.job_book = JobBook(plan.seed, len(machine.devices))
    return machine.job_book


def _backfill_in_worker(plan: HostPlan, conn: Connection) -> int:
    import logging

    logging.getLogger("gpuagent").setLevel(logging.ERROR)
    return backfill_host(plan, conn)


def backfill(plans: list[HostPlan], conn: Connection, jobs: int = 1, progress=None) -> int:
    """Every host's history; in `jobs` processes when more than one. Returns points written; each host
    done advances `progress` (gpuagent.compare.progress), when given."""
    written = 0
    if jobs <= 1 or len(plans) <= 1:
        for p in plans:
            written += backfill_host(p, conn)
            if progress is not None:
                progress.advance(p.hostname)
        return written
    from gpuagent.compare.workers import worker_pool

    with worker_pool(min(jobs, len(plans))) as pool:
        for p, n in zip(plans, pool.map(_backfill_in_worker, plans, [conn] * len(plans)), strict=True):
            written += n
            if progress is not None:
                progress.advance(p.hostname)
    return written


def total_steps(n_hosts: int, n_specs: int, distinct: int) -> int:
    """The progress steps of `sim fleet`: a host each, and each host simulated in full to be replayed."""
    period = max(1, distinct * n_specs)
    return n_hosts + (period if n_hosts > period else 0)


def _steps_text(n_hosts: int, n_specs: int, distinct: int) -> str:
    period = max(1, distinct * n_specs)
    if n_hosts > period:
        return f"{period} hosts simulated, then {n_hosts} written"
    return f"a step per host, {n_hosts} in all"


def check_database(conn: Connection) -> None:
    """Before anything is simulated: the server answers and the database is there. A fresh
    server (a new InfluxDB 1.x: no database but _internal) gets it created, with one line
    saying so; where it cannot be, one line says how (before, 1.x said "database not found"
    at the first write, after seconds of simulating)."""
    from gpuagent.compare.query import CannedAnswer, NoAnswer, quote_ident

    client = InfluxQL(conn)
    try:
        try:
            listed = client.query("SHOW DATABASES")
        except NoAnswer:
            raise  # asking again would wait as long
        except AgentError:
            client.query("SHOW MEASUREMENTS LIMIT 1")  # a server without SHOW DATABASES: the old check
            return
        names = {row[0] for series in listed for row in series.get("values") or []}
        if conn.database in names:
            return
        try:
            client.query(f"CREATE DATABASE {quote_ident(conn.database)}", post=True)
        except CannedAnswer:
            return  # VictoriaMetrics: nothing to create (the database is a `db` label of each write)
        except AgentError as exc:
            raise AgentError(
                f"{exc}; the database {conn.database!r} is not on {conn.url} and could not be created: create it "
                f"(InfluxDB 1.x: influx -execute 'CREATE DATABASE \"{conn.database}\"'; 2.x: influx bucket create "
                f"-n {conn.database}) or pass another --database"
            ) from None
        click.echo(f"created database {conn.database!r} on {conn.url}", err=True)
    finally:
        client.close()


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
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Read url, database/bucket and credentials from its [sinks.influxdb].",
)
@click.option("--url", default=None, help="InfluxDB URL (overrides the config).")
@click.option("--database", default=None, help="Database (1.x) or bucket (2.x/3.x) to write to.")
@click.option("--token", default=None, envvar="INFLUX_TOKEN", help="API token (or $INFLUX_TOKEN).")
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
    "GPU UUIDs (gpuagent.compare.fleet_replay): large fleets are then write-bound.",
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
    seed,
    scenario,
    collector_names,
    prefix,
    with_jobs,
    jobs,
    distinct=8,
) -> None:
    """Backfill a simulated fleet's history into InfluxDB (one `host` tag per simulated machine)."""
    from gpuagent.compare.cli import parse_time
    from gpuagent.sim.fleet import parse_spec
    from gpuagent.sim.load import check_scenario

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
    from gpuagent.plugin_host import load_host

    known = {n: c for n, c in load_host().collectors.items() if c.requires_gpus}
    names = tuple(n.strip() for n in collector_names.split(",") if n.strip())
    if names == ("all",):
        names = tuple(sorted(known))
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise AgentError(
            f"--collectors: unknown GPU collector {', '.join(unknown) or '(none given)'}; known: {', '.join(sorted(known))}"
        )
    conn = connection_from(config_path, url, database, token)
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
    from gpuagent.compare.fleet_replay import backfill_replayed
    from gpuagent.compare.progress import Progress

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
