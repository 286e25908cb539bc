"""gpuagent health: a node health check (Slurm HealthCheckProgram, LBNL NHC, Kubernetes
node-problem-detector custom plugins). Exit 0 ok, 1 a problem, 2 unknown; one line on stdout.

It reads the running agent's latest state (gpuagent.service.state_file) when that is fresh and its
writer alive, never under --simulate; else it reads NVML itself: the health collector once,
after watching XID events for ``--watch`` (NVML delivers only the events that happen while a
watcher is registered, so a quick read sees an XID only if it comes in that time).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, cast

import click

from gpuagent.service.logsetup import setup_logging
from gpuagent.units import parse_duration

if TYPE_CHECKING:
    from gpuagent.plugins.health import HealthCollector


@click.command()
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="Config file (default: $GPUAGENT_CONFIG or /etc/gpuagent/gpuagent.toml).",
)
@click.option("--simulate", metavar="SPEC", help="Check a simulated fleet (never reads the running agent's state).")
@click.option("--seed", type=int, default=None, help="Seed of the simulated fleet's load model.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout instead of the line.")
@click.option(
    "--watch",
    default="2s",
    show_default=True,
    help="Without a running agent: how long to watch XID events before judging.",
)
@click.option(
    "--max-length",
    type=click.IntRange(20, 4096),
    default=256,
    show_default=True,
    help="Longest line (node-problem-detector's max_output_length).",
)
@click.option(
    "--slurm-drain",
    is_flag=True,
    help="On a problem, drain this Slurm node (unless already drained): for Slurm's HealthCheckProgram, which acts on nothing itself.",
)
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="error", show_default=True
)
def health(config_path, simulate, seed, as_json, watch, max_length, slurm_drain, log_level):
    """Is this node's GPU fleet healthy? Exit 0 ok, 1 problem, 2 unknown (one line on stdout)."""
    from gpuagent.plugins.health.check import PROBLEM, UNKNOWN, unknown

    setup_logging(log_level, "text")
    drainer = None
    try:
        result, cfg = judge(config_path, simulate, seed, parse_duration(watch), max_length)
        if slurm_drain and result.code == PROBLEM:
            drainer = drain_node(cfg, result.line)
    except Exception as exc:  # any failure is "unknown" to a health checker, said in one line
        why = str(exc).strip().splitlines()
        result = unknown(why[0] if why else type(exc).__name__)
    if drainer is not None and drainer.failures_total:
        click.echo(f"gpuagent health: {drainer.last_action}", err=True)
    if as_json:
        from gpuagent.cli import print_json

        print_json(result.document())
    else:
        click.echo(result.line)
    sys.exit(result.code if result.code in (0, 1) else UNKNOWN)


def drain_node(cfg, line: str):
    """The health collector's drain action, once: drains unless the node is already drained."""
    import socket

    from gpuagent.plugins.health.slurm_drain import SlurmDrain

    drainer = SlurmDrain(cfg.slurm_node or socket.gethostname().split(".")[0], cfg.scontrol)
    drainer.update(line)
    return drainer


def judge(config_path, simulate, seed, watch: float, max_length: int):
    from gpuagent.plugins.health.check import evaluate, unknown
    from gpuagent.service.runtime import Options, load
    from gpuagent.service.state_file import read_fresh

    config, host = load(Options(config_path=config_path, simulate=simulate, seed=seed))
    # bound with the health plugin's own model (gpuagent.config.bind)
    cfg = cast("HealthCollector.Config | None", config.collectors.get("health"))
    if cfg is None or "health" not in host.collectors:
        return unknown("the health plugin is not loaded"), None
    if not simulate:
        state, why_not = read_fresh(config.state_dir)
        if state is not None:
            return evaluate(state, cfg.fail_on, f"agent pid {state['pid']}", max_length), cfg
        if not why_not.startswith("no running agent's state"):
            # A state file that is there but not trusted (another user's, a dead or forged pid, a
            # time ahead of now): said on stderr, stdout keeps the one line the checker reads.
            click.echo(f"gpuagent health: {why_not}; reading NVML itself", err=True)
    else:
        why_not = "--simulate"
    try:
        state = quick_read(
            config,
            host,
            cfg,
            simulate or config.agent.simulate or None,
            seed if seed is not None else config.agent.seed,
            watch,
        )
    except Exception as exc:
        if simulate:
            raise
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return unknown(f"{why_not}; reading NVML itself: {why}"), cfg
    return evaluate(state, cfg.fail_on, f"own read of NVML ({why_not})", max_length), cfg


def quick_read(config, host, cfg, simulate, seed, watch: float) -> dict:
    """The health collector once, on an NVML session of its own; the points as a state document."""
    from gpuagent.context import AgentContext
    from gpuagent.gpus.nvml import open_nvml
    from gpuagent.pipeline.accumulator import Accumulator
    from gpuagent.service.state_file import LatestState

    nvml = open_nvml(simulate, seed=seed)
    try:
        context = AgentContext(
            hostname=config.hostname,
            global_tags=dict(config.agent.tags),
            state_dir=config.state_dir,
            config_path=config.path,
        )
        context.nvml, context.gpus = nvml, nvml.gpus
        # The running agent drains the node; a health check never does.
        collector = host.collectors["health"](cfg.model_copy(update={"slurm_drain": False}), context)
        try:
            collector.start_watching()
            time.sleep(watch)
            acc = Accumulator(context.default_tags)
            try:
                collector.collect(acc)
            except Exception:  # GpuLostError: the lost GPU's point is in acc; its verdict says it
                pass
        finally:
            collector.close()
    finally:
        nvml.close()
    latest = LatestState()
    latest.record(acc.points)
    return {"gpus": latest.gpus, "node": latest.node}
