"""gpuagent probe l2: measure bandwidth against working-set size and find where the cache stops helping.

The probe loads the GPU for a few seconds, so it is a command only (never a
collector) and it refuses a GPU that is already busy.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass

import click

from gpuagent.commands.cli_options import simulate_option
from gpuagent.errors import AgentError, NvmlUnavailable
from gpuagent.gpus.gpu import GpuLost
from gpuagent.probe.backends import (
    NumpyBackend,
    SimulatedBackend,
    cpu_caches,
    cuda_index_for,
    gpu_backend,
    spec_for,
)
from gpuagent.probe.result import ProbeResult, run_probe
from gpuagent.probe.sweep import MIB, working_set_sizes
from gpuagent.units import human_bytes, parse_bytes

log = logging.getLogger("gpuagent.probe")

DEFAULT_MAX_UTIL = 10.0
DEFAULT_STEPS = 24


class ByteSize(click.ParamType):
    name = "SIZE"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_bytes(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@dataclass
class ProbeOptions:
    gpu: int = 0
    min_bytes: int | None = None
    max_bytes: int | None = None
    steps: int = DEFAULT_STEPS
    rounds: int = 7
    max_util: float = DEFAULT_MAX_UTIL
    cpu: bool = False
    simulate: str | None = None
    seed: int = 0


def probe_l2(opts: ProbeOptions) -> tuple[ProbeResult, object | None]:
    """Run the probe the options ask for: (result, NVML session or None; the caller closes it)."""
    if opts.cpu:
        return probe_cpu(opts), None
    from gpuagent.gpus.nvml import open_nvml

    try:
        session = open_nvml(opts.simulate, seed=opts.seed)
    except NvmlUnavailable:
        log.warning("no NVIDIA driver: probing this CPU's caches instead (--cpu)")
        return probe_cpu(opts), None
    try:
        return probe_gpu(opts, session), session
    except BaseException:
        session.close()
        raise


def probe_cpu(opts: ProbeOptions) -> ProbeResult:
    caches = cpu_caches()
    reported = {f"L{c.level}" if c.type == "Unified" or c.level > 1 else "L1d": c.bytes for c in caches}
    # From twice L1d (so the L2 plateau has points) to four times the last-level cache.
    first = 2 * caches[0].bytes if caches else 64 << 10
    last = 4 * caches[-1].bytes if caches else 64 * MIB
    sizes = _sizes(opts, first, last)
    return run_probe(
        NumpyBackend(), sizes, rounds=opts.rounds, seed=opts.seed,
        reported_cache_bytes=reported, reported_source="sysfs" if caches else "",
    )  # fmt: skip


def probe_gpu(opts: ProbeOptions, session) -> ProbeResult:
    import pynvml

    if not session.gpus:
        raise AgentError("NVML reports no GPU on this machine; use --cpu to probe the CPU's caches")
    if not 0 <= opts.gpu < len(session.gpus):
        raise AgentError(
            f"--gpu {opts.gpu}: no such GPU (this machine has {len(session.gpus)}: 0-{len(session.gpus) - 1})"
        )
    gpu = session.gpus[opts.gpu]
    try:
        util = gpu.query(pynvml.nvmlDeviceGetUtilizationRates)
    except GpuLost as exc:
        raise AgentError(f"{exc}: not probing it") from None
    if util is None:
        log.warning(
            "GPU %d: NVML reports no utilisation; cannot tell whether it is busy, probing anyway",
            gpu.index,
        )
    elif util.gpu > opts.max_util:
        raise AgentError(
            f"GPU {gpu.index} ({gpu.name}) is busy: utilisation {util.gpu}% is above --max-util {opts.max_util:g}%; "
            "the probe would disturb the job and measure nonsense (raise --max-util to force it)"
        )
    spec = spec_for(gpu.name)
    if session.simulated:
        profile_l2 = _simulated_l2(session, gpu.index)
        backend = SimulatedBackend(gpu.name, l2_bytes=profile_l2, seed=opts.seed)
        l2_bytes, source = backend.l2_bytes, "simulated profile"
    else:
        cuda_index = cuda_index_for(gpu.pci_bus_id)
        if cuda_index is None:
            log.warning(
                "GPU %d: cannot match its PCI bus id to a CUDA device; assuming CUDA index %d",
                gpu.index,
                gpu.index,
            )
            cuda_index = gpu.index
        backend = gpu_backend(cuda_index)
        if backend.l2_bytes:
            l2_bytes, source = backend.l2_bytes, "CUDA driver"
        elif spec:
            l2_bytes, source = spec[0], "published figure"
        else:
            l2_bytes, source = 64 * MIB, ""
    sizes = _sizes(opts, 1 * MIB, 4 * l2_bytes)
    return run_probe(
        backend, sizes, rounds=opts.rounds, seed=opts.seed, gpu_tags=gpu.tags,
        reported_cache_bytes={"L2": l2_bytes} if source else {}, reported_source=source,
    )  # fmt: skip


def _simulated_l2(session, index: int) -> int | None:
    """The simulated GPU's profile L2 size, where the simulator exposes it."""
    machine = getattr(session, "machine", None)
    for attr in ("gpus", "devices"):
        devices = getattr(machine, attr, None)
        if devices and index < len(devices):
            profile = getattr(devices[index], "profile", None)
            value = getattr(profile, "l2_cache_bytes", None)
            if value is None and isinstance(profile, dict):
                value = profile.get("l2_cache_bytes")
            if value:
                return int(value)
    return None


def _sizes(opts: ProbeOptions, default_min: int, default_max: int) -> list[int]:
    lo = opts.min_bytes or default_min
    hi = opts.max_bytes or max(default_max, 2 * lo)
    try:
        return working_set_sizes(lo, hi, opts.steps)
    except ValueError as exc:
        raise AgentError(f"probe sizes: {exc} (--min-bytes {lo}, --max-bytes {hi}, --steps {opts.steps})") from None


# --- output ------------------------------------------------------------------------------------


def render_table(result: ProbeResult, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    # Each knee is marked on the first size at or above it.
    knee_rows = {next((i for i, s in enumerate(result.sweep.sizes) if s >= k.bytes), -1): k for k in result.knees}
    table = Table(
        title=f"{result.device}: bandwidth against working set ({result.method})",
        title_justify="left",
    )
    table.add_column("working set", justify="right")
    table.add_column("GB/s", justify="right")
    table.add_column("spread", justify="right")
    table.add_column("", justify="left")
    top = max(result.sweep.bandwidth_gbps)
    for i, (size, bw) in enumerate(zip(result.sweep.sizes, result.sweep.bandwidth_gbps, strict=True)):
        bar = "█" * max(1, round(30 * bw / top))
        mark = f"  ← knee {human_bytes(knee_rows[i].bytes)}" if i in knee_rows else ""
        table.add_row(human_bytes(size), f"{bw:,.1f}", f"{result.sweep.spread[i]:.0%}", bar + mark)
    console.print(table)
    reported = ", ".join(f"{k} {human_bytes(v)}" for k, v in result.reported_cache_bytes.items())
    if reported:
        console.print(f"reported ({result.reported_source}): {reported}")
    if not result.knees:
        console.print("no knee found: the whole sweep fits in one level (widen --min-bytes/--max-bytes)")
    for k in result.knees:
        console.print(
            f"knee at {human_bytes(k.bytes)}: {k.bw_below_gbps:,.1f} GB/s below, "
            f"{k.bw_above_gbps:,.1f} GB/s above (×{k.ratio:.2f})"
        )
    knee = result.knee
    if knee and result.gpu_tags:
        console.print(
            f"effective L2 {human_bytes(knee.bytes)}; L2 {knee.bw_below_gbps:,.0f} GB/s, "
            f"DRAM {knee.bw_above_gbps:,.0f} GB/s, ratio {knee.ratio:.2f}"
        )


def send_points(result: ProbeResult, config_path: str | None, simulate: str | None, session, as_json: bool) -> int:
    """Write the gpu_l2_probe points through the configured sinks; returns how many."""
    from gpuagent.context import AgentContext
    from gpuagent.service.runtime import Options, load, make_sinks

    options = Options(config_path=config_path, simulate=simulate)
    config, host = load(options)
    if as_json and not any(c.enabled for c in config.sinks.values()):
        raise AgentError(
            "--json --send: no sink is configured, so the points would go to stdout and break the JSON; configure a sink (--config) or drop --json"
        )
    context = AgentContext(
        hostname=config.hostname,
        global_tags=dict(config.agent.tags),
        state_dir=config.state_dir,
        config_path=config.path,
        nvml=session,
    )
    points = result.to_points(context.default_tags)
    # The sinks alone (not runtime.build): a probe needs no collector, and one that fails to start must not stop it.
    sinks = make_sinks(config, host, context, options)
    try:
        for sink in sinks:
            sink.write(points)
    finally:
        for sink in sinks:
            try:
                sink.flush(config.agent.shutdown_timeout)
            finally:
                sink.close()
    return len(points)


# --- commands ----------------------------------------------------------------------------------


@click.group("probe")
def probe() -> None:
    """Active measurements. They load the GPU, so they run only when asked, never in the collection."""


@probe.command("l2")
@click.option(
    "--gpu",
    "gpu_index",
    type=int,
    default=0,
    show_default=True,
    help="NVML index of the GPU to probe.",
)
@click.option(
    "--min-bytes",
    type=ByteSize(),
    default=None,
    help="Smallest working set (default 1MiB; CPU: 2 × L1d).",
)
@click.option(
    "--max-bytes",
    type=ByteSize(),
    default=None,
    help="Largest working set (default 4 × L2; CPU: 4 × last-level cache).",
)
@click.option(
    "--steps",
    type=click.IntRange(4, 200),
    default=DEFAULT_STEPS,
    show_default=True,
    help="Sizes, log-spaced.",
)
@click.option(
    "--rounds",
    type=click.IntRange(1, 100),
    default=7,
    show_default=True,
    help="Samples per size (median of the faster half kept).",
)
@click.option(
    "--max-util",
    type=click.FloatRange(0, 100),
    default=DEFAULT_MAX_UTIL,
    show_default=True,
    help="Refuse a GPU busier than this (NVML utilisation, %).",
)
@click.option("--cpu", is_flag=True, help="Probe this CPU's caches with NumPy instead of a GPU.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.option(
    "--send",
    is_flag=True,
    help="Write the result as gpu_l2_probe points through the configured sinks.",
)
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="Config file whose sinks --send uses.",
)
@simulate_option("Use a simulated fleet (a modelled curve, not a measurement).")
@click.option(
    "--seed",
    type=int,
    default=0,
    help="Seed of the simulated curve's noise and of the sweep order.",
)
def l2(
    gpu_index,
    min_bytes,
    max_bytes,
    steps,
    rounds,
    max_util,
    cpu,
    as_json,
    send,
    config_path,
    simulate,
    seed,
):
    """Bandwidth against working-set size, from 1 MiB to 4 × L2: where the L2 stops helping."""
    if cpu and simulate:
        raise click.UsageError("--cpu and --simulate exclude each other")
    opts = ProbeOptions(gpu_index, min_bytes, max_bytes, steps, rounds, max_util, cpu, simulate, seed)
    if cpu and send:
        raise AgentError("--send writes GPU results only; --cpu measures the CPU")
    result, session = probe_l2(opts)
    try:
        if send and not result.gpu_tags:
            raise AgentError("--send writes GPU results only; this run measured the CPU (no GPU, or --cpu)")
        if as_json:
            doc = result.as_json()
            if send:
                doc["points_sent"] = send_points(result, config_path, simulate, session, as_json)
            click.echo(json.dumps(doc, indent=2))
        else:
            render_table(result)  # first: the operator sees the result even if sending fails
            if send:
                sent = send_points(result, config_path, simulate, session, as_json)
                click.echo(f"sent {sent} gpu_l2_probe points", err=True)
    finally:
        if session is not None:
            session.close()


def main(argv: list[str] | None = None) -> None:
    """`python -m gpuagent.probe [l2 options]`: the l2 probe without the rest of the CLI."""
    try:
        l2.main(args=argv, prog_name="python -m gpuagent.probe", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(1)
    except AgentError as exc:
        click.echo(f"gpuagent: error: {exc}", err=True)
        sys.exit(exc.exit_code)
