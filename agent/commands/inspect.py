"""gpuagent inspect: a one-off view of this machine's GPUs (human, --json, or --line-protocol).

The facts are read by gpuagent.commands.facts into a plain dict; this module only
narrows the GPUs, picks the output and renders. The human view is rich
text laid out to fit 100 columns, plain (no colour) when stdout is not a
terminal or NO_COLOR is set.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from typing import Any

import click
import pynvml
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from gpuagent.commands.cli_options import simulate_option
from gpuagent.commands.facts import REASON_WORDS
from gpuagent.errors import AgentError
from gpuagent.gpus.gpu import Gpu
from gpuagent.schema.measurements import (
    GPU_CLOCKS,
    GPU_HEALTH,
    GPU_MEMORY,
    GPU_MIG,
    GPU_NVLINK,
    GPU_PCIE,
    GPU_POWER,
    GPU_PROCESS,
    GPU_VGPU,
)

NA = "n/a"
WIDTH = 100
MIB = 1 << 20
GIB = 1 << 30

VIRTUALIZATION_WORDS = {
    "none": "none",
    "passthrough": "passthrough",
    "vgpu": "vGPU guest",
    "host_vgpu": "vGPU host",
    "host_vsga": "vSGA host",
}

P2P_LEGEND = (
    "X = self; NV# = # NVLinks; PIX/PXB = through one/several PCIe switches; PHB = through a host "
    "bridge; NODE = across host bridges in a NUMA node; SYS = across NUMA nodes (SMP link).",
    "P2P that works: R = read, W = write (over PCIe unless N), N = over NVLink; - = no P2P.",
)


# -- the command --------------------------------------------------------------


@click.command()
@simulate_option("Inspect a simulated fleet, e.g. l40s:2,h100-sxm:4.")
@click.option("--seed", type=int, default=None, help="Seed of the simulated fleet's load model.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON document on stdout (schema: gpuagent/schemas/inspect.schema.json).",
)
@click.option(
    "--line-protocol",
    is_flag=True,
    help="One snapshot of every enabled collector as line protocol (= run --once --test).",
)
@click.option("--gpu", "gpu_args", metavar="N|UUID", multiple=True, help="Only this GPU (index or UUID); repeatable.")
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="Config file (default: as `run`): --line-protocol's collectors, and the [sinks.influxdb] that `probe l2 --send` results are read back from.",
)
@click.option(
    "--plugins-dir", type=click.Path(file_okay=False, exists=True), help="Also load every .py plugin file in DIR."
)
def inspect(simulate, seed, as_json, line_protocol, gpu_args, config_path, plugins_dir):
    """Show this machine's GPUs: identity, memory, L2, clocks, power, throttling, MIG/vGPU, PCIe, processes, P2P."""
    from gpuagent.service.logsetup import setup_logging

    if as_json and line_protocol:
        raise click.UsageError("--json and --line-protocol are exclusive")
    setup_logging("warning")
    if line_protocol:
        print_line_protocol(simulate, seed, gpu_args, config_path, plugins_dir)
        return
    facts = read_facts(simulate, seed, gpu_args, plugins_dir, config_path)
    cost = agent_cost(config_path)
    if cost is not None:
        facts["agent_cost"] = cost
    if as_json:
        click.echo(json.dumps(facts, indent=2))
    else:
        render(facts, make_console())


def read_facts(
    simulate: str | None,
    seed: int | None,
    gpu_args: tuple[str, ...] = (),
    plugins_dir: str | None = None,
    config_path: str | None = None,
) -> dict[str, Any]:
    from gpuagent.commands.facts import gather
    from gpuagent.config import read_config
    from gpuagent.gpus.nvml import open_nvml
    from gpuagent.plugin_host import load_host
    from gpuagent.probe.readback import latest_l2_probes

    # The config's [plugins] (disabled, dir) as every command applies them: a disabled plugin is
    # neither imported nor shown.
    plugins = load_host(read_config(config_path), plugins_dir=plugins_dir)
    try:
        session = open_nvml(simulate, seed=seed or 0)
    except pynvml.NVMLError as exc:
        # E.g. a GPU that fell off the bus before it could be enumerated.
        raise AgentError(f"NVML failed while listing the GPUs: {exc}") from None
    try:
        chosen = select_gpus(session.gpus, gpu_args) if gpu_args else None
        return gather(
            session,
            selected=chosen,
            plugins=plugins,
            l2_probes=latest_l2_probes(config_path),
        )
    finally:
        session.close()


def select_gpus(gpus: list[Gpu], wanted: tuple[str, ...] | list[str]) -> list[Gpu]:
    """The GPUs named by index or UUID, in machine order; a name that matches none is a one-line error."""
    if not wanted:
        return list(gpus)
    chosen: list[Gpu] = []
    for value in wanted:
        text = value.strip()
        match = next(
            (g for g in gpus if (text.isdigit() and int(text) == g.index) or text.casefold() == g.uuid.casefold()),
            None,
        )
        if match is None:
            valid = ", ".join(f"{g.index} ({g.uuid})" for g in gpus) or "none: this machine has no GPU"
            raise AgentError(f"--gpu {value!r} matches no GPU; valid: {valid}")
        if match not in chosen:
            chosen.append(match)
    return sorted(chosen, key=lambda g: g.index)


def print_line_protocol(simulate, seed, gpu_args, config_path, plugins_dir=None) -> None:
    """Exactly `run --once --test` (optionally on fewer GPUs): the runtime does the work."""
    from gpuagent.gpus.nvml import open_nvml
    from gpuagent.service.runtime import Options, build, load

    options = Options(config_path=config_path, simulate=simulate, seed=seed, test=True, plugins_dir=plugins_dir)
    config, host = load(options)
    nvml = None
    if gpu_args:
        # Narrowing needs the session before the collectors see it; same SPEC and seed as build() picks.
        spec = options.simulate or config.agent.simulate or None
        nvml = open_nvml(spec, seed=seed if seed is not None else config.agent.seed)
        try:
            nvml.gpus[:] = select_gpus(nvml.gpus, gpu_args)
        except BaseException:
            nvml.close()
            raise
    agent = build(options, config, host, nvml=nvml)
    try:
        agent.scheduler.run_once()
    finally:
        agent.close()


# -- rendering ----------------------------------------------------------------


def make_console(file=None) -> Console:
    """A console for stdout: colour only on a terminal without NO_COLOR; 100 columns when not a terminal."""
    out = file or sys.stdout
    is_tty = hasattr(out, "isatty") and out.isatty()
    return Console(
        file=out,
        width=None if is_tty else WIDTH,
        no_color=bool(os.environ.get("NO_COLOR")),
        highlight=False,
        emoji=False,
        soft_wrap=False,
    )


def render(facts: dict[str, Any], console: Console) -> None:
    """The human view on ``console`` (rich; plain when the console has no colour)."""
    # Grid cells are padded to their column: strip the blanks at line ends so a
    # pasted view (or a snapshot) has none.
    with console.capture() as captured:
        _render(facts, console)
    console.file.write(without_trailing_blanks(captured.get()))
    console.file.flush()


# Blanks (and the style codes around them) at the end of a line.
_TRAILING_BLANKS = re.compile(r"(?:\x1b\[[0-9;]*m| )+$", re.MULTILINE)


def without_trailing_blanks(text: str) -> str:
    """`text` (a captured console's) without the blanks that pad grid cells at line ends; a style
    that ended there is still reset."""
    return _TRAILING_BLANKS.sub(_keep_reset, text)


def _keep_reset(match: re.Match) -> str:
    return "\x1b[0m" if "\x1b" in match.group(0) else ""


def _render(facts: dict[str, Any], console: Console) -> None:
    console.print(header(facts))
    for gpu in facts["gpus"]:
        console.print()
        console.print(gpu_block(gpu, wide=console.width >= WIDTH))
    matrix = p2p_matrix(facts)
    if matrix is not None:
        console.print()
        console.print(matrix)
    failed = failed_plugins(facts)
    if failed is not None:
        console.print()
        console.print(failed)
    cost = cost_table(facts.get("agent_cost"))
    if cost is not None:
        console.print()
        console.print(cost)


def render_text(facts: dict[str, Any], width: int = WIDTH) -> str:
    """The human view as plain text (what a pipe or a ticket gets)."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, no_color=True, force_terminal=False, highlight=False, emoji=False)
    render(facts, console)
    return buffer.getvalue()


def header(facts: dict[str, Any]) -> Text:
    host, driver = facts["host"], facts["driver"]
    shown = len(facts["gpus"])
    count = f"{host['gpu_count']} GPU" + ("s" if host["gpu_count"] != 1 else "")
    if shown != host["gpu_count"]:
        count += f", {shown} shown"
    text = Text()
    text.append(host["hostname"], style="bold")
    text.append(f"  {count}")
    if host["simulated"]:
        text.append(f"  (simulated: {host['simulate_spec']})", style="yellow")
    text.append("\n")
    text.append(
        f"Driver {na(driver['driver_version'])}   CUDA {na(driver['cuda_driver_version'])}   "
        f"NVML {na(driver['nvml_version'])}"
    )
    return text


def gpu_block(gpu: dict[str, Any], wide: bool = True) -> Group:
    title = Text()
    title.append(f"GPU {gpu['index']}", style="bold cyan")
    title.append(f"  {gpu['name']}", style="bold")
    title.append(f"  {gpu['arch']}")
    if gpu.get("available") is False:
        # NVML lists it but its handle or identity was refused: the others are read, this says why.
        title.append("  UNAVAILABLE", style="bold red")
        lines = Text(f"  UUID {gpu['uuid']}   PCI {gpu['pci_bus_id']}\n  {gpu.get('unavailable_reason') or NA}")
        return Group(title, lines)
    if gpu["lost"]:
        title.append("  LOST", style="bold red")
        reason = gpu.get("lost_reason") or "the GPU stopped answering (GPU_IS_LOST)"
        lines = Text(f"  UUID {gpu['uuid']}   PCI {gpu['pci_bus_id']}\n  {reason}")
        if gpu.get("health"):
            lines.append(f"\n  Health: {health_text(gpu['health'])}")
        return Group(title, lines)

    # A measurement is null where its plugin is not loaded: its cells stay blank, a row of two
    # blank ones goes (the others keep their places). MIG and vGPU are null on cards without them too: n/a.
    mem, clocks, power = gpu.get(GPU_MEMORY), gpu.get(GPU_CLOCKS), gpu.get(GPU_POWER)
    pcie, ecc = gpu.get(GPU_PCIE), gpu.get(GPU_HEALTH)
    pstate = clocks.get("pstate") if clocks else None
    cells = [
        (("UUID", gpu["uuid"]), ("PCI bus id", gpu["pci_bus_id"])),
        (mem and ("Memory", memory_text(mem)), mem and ("L2 cache", l2_text(mem))),
        (
            mem and ("Bus width", unit(mem.get("bus_width_bits"), "-bit", sep="")),
            mem and ("Peak DRAM", bandwidth_text(mem.get("dram_peak_gbps"))),
        ),
        (
            clocks and ("SM clock", clock_text(clocks["sm_clock_mhz"], clocks["max_sm_clock_mhz"])),
            clocks and ("Mem clock", clock_text(clocks["memory_clock_mhz"], clocks["max_memory_clock_mhz"])),
        ),
        (
            power
            and ("Power", power_text(power["power_w"], power["power_limit_w"], power.get("enforced_power_limit_w"))),
            power and ("Temperature", unit(power["temperature_c"], "C")),
        ),
        (
            clocks and ("Throttling", throttle_text(active_reasons(clocks))),
            clocks and ("P-state", f"P{pstate}" if pstate is not None else NA),
        ),
        (pcie and ("PCIe link", pcie_text(pcie)), ecc and ("ECC", ecc_text(ecc))),
        (("Virtualisation", virtualization_text(gpu.get(GPU_VGPU))), ("MIG", mig_text(gpu.get(GPU_MIG)))),
    ]
    rows = [(*(left or ("", "")), *(right or ("", ""))) for left, right in cells if left or right]
    grid = Table.grid(padding=(0, 2))
    if wide:
        # Two facts a row at fixed widths: every block lines up, and the whole fits in 100 columns.
        grid.add_column(style="dim", no_wrap=True, width=14)
        grid.add_column(width=42)
        grid.add_column(style="dim", no_wrap=True, width=11)
        grid.add_column(width=WIDTH - 14 - 42 - 11 - 3 * 2)
        for row in rows:
            grid.add_row(*(cell(v) for v in row))
    else:
        # A narrow terminal: one fact a row, so no label is cut short.
        grid.add_column(style="dim", no_wrap=True, width=14)
        grid.add_column()
        for label1, value1, label2, value2 in rows:
            grid.add_row(label1, cell(value1))
            grid.add_row(label2, cell(value2))
    parts: list[Any] = [title, grid]
    if gpu.get("health"):  # absent in documents from before the verdict
        parts.append(
            Text("  Health: " + health_text(gpu["health"]), style=HEALTH_STYLES.get(gpu["health"]["verdict"], "red"))
        )
    for instance in points(gpu.get(GPU_MIG)):
        parts.append(Text("  " + mig_instance_text(instance)))
    for vgpu in points(gpu.get(GPU_VGPU)):
        parts.append(Text("  " + vgpu_text(vgpu)))
    if gpu.get(GPU_NVLINK):
        parts.append(Text("  " + nvlink_text(gpu[GPU_NVLINK])))
    for process in points(gpu.get(GPU_PROCESS)):
        parts.append(Text("  " + process_text(process)))
    for measurement, reading in (gpu.get("more") or {}).items():
        parts.extend(Text("  " + line) for line in more_lines(measurement, reading))
    if gpu.get("not_in_capture"):
        text = "Not in the capture (simulated from the profile's model, or n/a): " + "; ".join(gpu["not_in_capture"])
        parts.append(Text("  " + text, style="dim"))
    probe = gpu.get("l2_probe")
    if probe:
        parts.append(Text("  " + l2_probe_text(probe)))
    return Group(*parts)


HEALTH_STYLES = {"ok": "", "degraded": "yellow"}  # "": the console's own; anything worse: red


def health_text(health: dict[str, Any]) -> str:
    """The verdict and its reason, e.g. "reset_required: NVML recovery action: GPU reset."."""
    return f"{health['verdict']}: {health['reason']}"


def cell(value: str) -> Text:
    return Text(value, style="dim") if value == NA else Text(value)


# -- value formatting (None -> "n/a") -------------------------------------------


def na(value: Any) -> str:
    return NA if value is None else str(value)


def number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def unit(value: Any, suffix: str, sep: str = " ") -> str:
    return NA if value is None else f"{number(value)}{sep}{suffix}"


def gib(value: int) -> str:
    return f"{value / GIB:.1f}"


def points(measurement: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The sub-points of a multi-point measurement (MIG devices, vGPUs, NVLinks); none when it is absent."""
    return measurement["points"] if measurement else []


def memory_text(mem: dict[str, Any]) -> str:
    total, used = mem.get("fb_total_bytes"), mem.get("fb_used_bytes")
    if total is None:
        return NA
    if used is None:
        return f"{gib(total)} GiB total"
    pct = f" ({100 * used / total:.0f}%)" if total else ""
    return f"{gib(used)} / {gib(total)} GiB used{pct}"


def l2_text(mem: dict[str, Any]) -> str:
    size = mem.get("l2_cache_bytes")
    if size is None:
        return NA
    # MiB, as probe and compare write it: NVIDIA's datasheets' "96 MB" L2 is 100663296 bytes.
    text = f"{number(round(size / MIB, 1))} MiB"
    source = {"cuda": "CUDA", "spec": "spec"}.get(mem.get("l2_cache_source") or "")
    return f"{text} ({source})" if source else text


def bandwidth_text(gbps: float | None) -> str:
    return NA if gbps is None else f"{gbps:.0f} GB/s"


def clock_text(current: int | None, maximum: int | None) -> str:
    if current is None and maximum is None:
        return NA
    return f"{na(current)} / {na(maximum)} MHz (max)"


def power_text(draw: float | None, limit: float | None, enforced: float | None = None) -> str:
    """Draw / management limit; the enforced limit too where something else (a policy) holds it lower."""
    if draw is None and limit is None:
        return NA
    draw_text = NA if draw is None else f"{draw:.1f}"
    limit_text = NA if limit is None else number(round(limit, 1))
    if enforced is not None and limit is not None and round(enforced, 1) != round(limit, 1):
        return f"{draw_text} / {limit_text} W (limit, {number(round(enforced, 1))} enforced)"
    return f"{draw_text} / {limit_text} W (limit)"


def active_reasons(clocks: dict[str, Any]) -> list[str] | None:
    """The active clock-event reasons by their field names; None when the card reports none."""
    if clocks.get("clock_event_reasons") is None:
        return None
    return [name for name in REASON_WORDS if clocks.get(name)]


def throttle_text(reasons: list[str] | None) -> str:
    if reasons is None:
        return NA
    if not reasons:
        return "none"
    return ", ".join(REASON_WORDS.get(r, r.replace("_", " ")) for r in reasons)


def on_off(value: bool | None) -> str:
    return NA if value is None else ("on" if value else "off")


def ecc_text(health: dict[str, Any]) -> str:
    current, pending = health["ecc_enabled"], health["ecc_pending_enabled"]
    text = on_off(current)
    if pending is not None and current is not None and pending != current:
        text += f" ({on_off(pending)} after reset)"
    return text


def mig_text(mig: dict[str, Any] | None) -> str:
    if mig is None:  # not MIG-capable
        return NA
    current, pending = mig["mig_mode_current"], mig["mig_mode_pending"]
    text = on_off(current)
    if current:
        n = len(mig["points"])
        text += f", {n} instance{'s' if n != 1 else ''}"
    if pending != current:
        text += f" ({on_off(pending)} after reset)"
    return text


def virtualization_text(virt: dict[str, Any] | None) -> str:
    mode = virt["virtualization_mode"] if virt else None
    if virt is None or mode is None:
        return NA
    text = VIRTUALIZATION_WORDS.get(mode, mode)
    if virt.get("host_vgpu_mode") and mode in ("host_vgpu", "host_vsga"):
        text += " (SR-IOV)" if virt["host_vgpu_mode"] == "sriov" else " (non-SR-IOV)"
    if mode in ("host_vgpu", "host_vsga"):
        n = len(virt["points"])
        text += f", {n} vGPU{'s' if n != 1 else ''}"
    return text


def pcie_text(pcie: dict[str, Any]) -> str:
    def link(gen, width):
        return f"Gen{na(gen)} x{na(width)}" if gen is not None or width is not None else NA

    current = link(pcie["link_gen"], pcie["link_width"])
    maximum = link(pcie["max_link_gen"], pcie["max_link_width"])
    if current == NA and maximum == NA:
        return NA
    return f"{current} (max {maximum})"


def mig_instance_text(instance: dict[str, Any]) -> str:
    total = instance.get("fb_total_bytes")
    memory = NA if total is None else f"{gib(total)} GiB"
    return (
        f"MIG {instance['mig_index']}: {na(instance['mig_profile'])}  GI {na(instance['gi_id'])} CI {na(instance['ci_id'])}  "
        f"{na(instance.get('sm_count'))} SMs  {memory}  {na(instance['mig_uuid'])}"
    )


def process_text(process: dict[str, Any]) -> str:
    """One process as nvidia-smi lists it: pid, type, name, GPU memory (MiB), its MIG instance."""
    used = process.get("used_memory_bytes")
    memory = NA if used is None else f"{used // MIB} MiB"
    where = f"  GI {process['gi_id']} CI {na(process.get('ci_id'))}" if process.get("gi_id") is not None else ""
    name = process.get("name") or NA
    if len(name) > 48:  # a long path: its end says which program (the line fits 100 columns)
        name = "..." + name[-45:]
    return f"Process {process['pid']}  {process['type']}  {name}  {memory}{where}"


def vgpu_text(vgpu: dict[str, Any]) -> str:
    used = vgpu["fb_used_bytes"]
    total = vgpu["fb_total_bytes"]
    fb = NA if used is None else f"{gib(used)}" + (f" / {gib(total)} GiB" if total else " GiB")
    # The vGPU's UUID is in --json; with it the line would not fit 100 columns.
    return f"vGPU {vgpu['vgpu_instance']}: {na(vgpu['vgpu_type_name'])}  FB {fb}  VM {na(vgpu['vm_id'])}"


def nvlink_text(summary: dict[str, Any]) -> str:
    """NVLink count, how many are up, and their version(s)."""
    versions = sorted({p["version_name"] for p in summary["points"] if p.get("version_name")})
    text = f"NVLink: {summary['links']} links, {summary['links_active']} active"
    return text + (f" (NVLink {', '.join(versions)})" if versions else "")


def more_lines(measurement: str, reading: dict[str, Any] | None) -> list[str]:
    """A third-party collector's facts: its fields, then one line per sub-point."""
    if not reading:
        return []

    def fields(values: dict[str, Any]) -> str:
        return ", ".join(f"{k}={na(v)}" for k, v in values.items() if k != "points") or NA

    lines = [f"{measurement}: {fields(reading)}"]
    lines += [f"  {fields(point)}" for point in reading.get("points") or () if isinstance(point, dict)]
    return lines


def l2_probe_text(probe: dict[str, Any]) -> str:
    """One line for the newest `gpuagent probe l2` result: where the L2 stops helping, and by how much."""
    head = f"L2 probe {probe.get('time') or NA}" + (f" ({probe['method']})" if probe.get("method") else "")
    if not probe.get("l2_effective_bytes"):
        return f"{head}: no knee found"
    text = f"{head}: {number(round(probe['l2_effective_bytes'] / MIB, 1))} MiB effective"
    l2_bw, dram_bw, ratio = probe.get("l2_bw_gbps"), probe.get("dram_bw_gbps"), probe.get("l2_dram_ratio")
    if l2_bw is not None and dram_bw is not None:
        text += f"; L2 {l2_bw:.0f} GB/s, DRAM {dram_bw:.0f} GB/s"
    if ratio is not None:
        text += f" ({ratio:.1f}x)"
    return text


# -- P2P matrix and plugins ---------------------------------------------------


def p2p_cell(pair: dict[str, Any] | None) -> str:
    if pair is None:
        return NA
    flags = ("R" if pair["read_ok"] else "") + ("W" if pair["write_ok"] else "") + ("N" if pair["nvlink_ok"] else "")
    return f"{na(pair['topology'])} {flags or '-'}"


def p2p_matrix(facts: dict[str, Any]) -> Group | None:
    pairs = facts["p2p"]
    if not pairs:
        return None
    by_pair = {(p["gpu"], p["peer_gpu"]): p for p in pairs}
    rows = sorted({p["gpu"] for p in pairs})
    columns = sorted({p["gpu"] for p in pairs} | {p["peer_gpu"] for p in pairs})
    table = Table(box=None, padding=(0, 1), show_edge=False, pad_edge=False, header_style="bold")
    table.add_column("P2P", no_wrap=True, style="bold")
    for index in columns:
        table.add_column(f"GPU{index}", no_wrap=True)
    for row in rows:
        cells = []
        for col in columns:
            if col == row:
                cells.append(Text("X", style="dim"))
            else:
                text = p2p_cell(by_pair.get((row, col)))
                cells.append(Text(text, style="dim" if text.endswith(" -") or text == NA else ""))
        table.add_row(f"GPU{row}", *cells)
    legend = Text("\n".join(P2P_LEGEND), style="dim")
    return Group(Text("P2P matrix (topology, working P2P)", style="bold"), table, legend)


def failed_plugins(facts: dict[str, Any]) -> Text | None:
    failed = [p for p in facts["plugins"] if p["status"] == "failed"]
    if not failed:
        return None
    text = Text("Plugins that failed to load\n", style="bold red")
    for plugin in failed:
        text.append(f"  {plugin['name']} ({plugin['module']}): {plugin['error']}\n")
    text.rstrip()
    return text


# -- the running agent's own cost ---------------------------------------------


def agent_cost(config_path: str | None = None) -> dict[str, Any] | None:
    """The running agent's cost per collector over the last minute (NVML calls, CPU ms), from the
    ``cost.json`` its scheduler keeps in the state directory; None when no agent wrote one lately."""
    import time

    from gpuagent.config import read_config
    from gpuagent.service.safe_files import read_bounded
    from gpuagent.service.scheduler import COST_FILE, COST_WINDOW_S
    from gpuagent.service.state_file import trusted_writers

    try:
        state_dir = read_config(config_path).state_dir
        doc = json.loads(read_bounded(state_dir / COST_FILE, 1 << 20, trusted_writers(state_dir))[0])
        age = time.time() - float(doc["written"])
        if age > 2 * COST_WINDOW_S:  # no agent running: an old figure is not "the last minute"
            return None
        return {"window_s": doc["window_s"], "age_s": round(max(age, 0.0), 1), "collectors": doc["collectors"]}
    except (OSError, ValueError, KeyError, TypeError, AgentError):
        return None


def cost_table(cost: dict[str, Any] | None) -> Table | None:
    if not cost or not cost.get("collectors"):
        return None
    title = f"Agent cost, last {cost['window_s']:g} s"
    if cost.get("age_s", 0) >= 1:  # the agent rewrites the file every 10 s
        title += f" (as of {cost['age_s']:g} s ago)"
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for name in ("collector", "runs", "NVML calls", "CPU ms"):
        table.add_column(name, justify="left" if name == "collector" else "right")
    rows = cost["collectors"]
    for name, c in sorted(rows.items()):
        table.add_row(name, str(c["runs"]), str(c["nvml_calls"]), f"{c['cpu_ms']:.1f}")
    table.add_row(
        "total",
        str(sum(c["runs"] for c in rows.values())),
        str(sum(c["nvml_calls"] for c in rows.values())),
        f"{sum(c['cpu_ms'] for c in rows.values()):.1f}",
    )
    return table
