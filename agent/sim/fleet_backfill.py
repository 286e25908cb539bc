"""The backfill behind `gpuagent sim fleet` (gpuagent.sim.fleet_cli): a simulated fleet's history into InfluxDB.

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
from dataclasses import dataclass

import click
import pynvml

from gpuagent import sim
from gpuagent.compare.query import CannedAnswer, Connection, InfluxQL, NoAnswer, quote_ident
from gpuagent.context import AgentContext
from gpuagent.errors import AgentError
from gpuagent.gpus.gpu import Gpu
from gpuagent.pipeline.accumulator import Accumulator
from gpuagent.pipeline.metric import serialize
from gpuagent.plugin_host import load_host
from gpuagent.sim.clock import ManualClock
from gpuagent.sim.jobs import JobBook, JobHost
from gpuagent.sim.work import WORKLOADS, WorkSim
from gpuagent.sim.workers import worker_pool

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
    if plan.scenario not in WORKLOADS:
        return None
    # plan_hosts gives host i the seed SEED × 1000 + i: its index picks its first workload.
    return WorkSim(machine, plan.scenario, plan.seed, plan.seed % 1000, plan.steps)


def _with_jobs(machine, plan: HostPlan):
    """Give the machine a job book: every GPU runs the book's jobs instead of its own load's
    processes (the load model is unchanged, so power and energy are the same as without)."""
    machine.job_book = JobBook(plan.seed, len(machine.devices))
    return machine.job_book


def _backfill_in_worker(plan: HostPlan, conn: Connection) -> int:
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
    with worker_pool(min(jobs, len(plans))) as pool:
        for p, n in zip(plans, pool.map(_backfill_in_worker, plans, [conn] * len(plans)), strict=True):
            written += n
            if progress is not None:
                progress.advance(p.hostname)
    return written


def check_database(conn: Connection) -> None:
    """Before anything is simulated: the server answers and the database is there. A fresh
    server (a new InfluxDB 1.x: no database but _internal) gets it created, with one line
    saying so; where it cannot be, one line says how (before, 1.x said "database not found"
    at the first write, after seconds of simulating)."""
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
