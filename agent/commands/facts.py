"""A machine's GPU facts as a plain dict (what `gpuagent inspect` shows): the collectors' readings, arranged.

This module reads nothing of its own: each GPU's facts are the per-GPU
readings of the loaded collectors (their optional ``read_gpu(gpu)``: clocks,
power, memory, pcie, health, mig, vgpu, nvlink and any third-party collector
that has one; ``read_pairs`` of p2p), keyed by the measurement they stream as
and with the stream's field names, so a disabled plugin is neither imported
nor shown, so a fact means the same thing
and has the same name in `inspect --json` as in InfluxDB. ``gather`` returns a
JSON-ready dict (numbers as numbers, units in key names, None where the card
does not offer a reading) that `inspect --json` prints as is and the human
view renders. Its shape is written down in ``agent/schemas/inspect.schema.json``.

A one-off read differs from a collector run in what needs time: no GPM
fields (they need an earlier sample), no PCIe throughput (20 ms of link
sampling per direction), no vGPU utilisation. A GPU lost in the middle of the
read becomes an entry with ``lost: true`` and its identity only; the others
are still read.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterable
from importlib import resources
from typing import Any

import pynvml

from gpuagent.gpus.gpu import Gpu, GpuLost
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

log = logging.getLogger("gpuagent.commands.facts")

SCHEMA_VERSION = 2

# Clock-event (throttle) reasons in words, keyed by the clocks collector's field names.
REASON_WORDS = {
    "idle": "idle",
    "applications_setting": "applications clocks setting",
    "sw_power_cap": "software power cap",
    "hw_slowdown": "hardware slowdown",
    "sync_boost": "sync boost",
    "sw_thermal_slowdown": "software thermal slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "hw_power_brake_slowdown": "hardware power brake",
    "display_clock_setting": "display clock setting",
}

# The measurements of one GPU, in the order `inspect --json` gives them.
# Others (third-party collectors') follow under "more". Constants, not plugin imports: agent/ knows no plugin.
MEASUREMENTS = (
    GPU_CLOCKS,
    GPU_POWER,
    GPU_MEMORY,
    GPU_PCIE,
    GPU_HEALTH,
    GPU_MIG,
    GPU_VGPU,
    GPU_NVLINK,
    GPU_PROCESS,
)


def schema() -> dict[str, Any]:
    """The JSON Schema of `inspect --json`, as shipped in the package."""
    return json.loads(resources.files("gpuagent").joinpath("schemas", "inspect.schema.json").read_text())


# -- the whole machine --------------------------------------------------------


def gather(
    session: Any,
    *,
    selected: Iterable[Gpu] | None = None,
    plugins: Any = None,
    hostname: str | None = None,
    l2_probes: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Every fact `inspect` shows, for ``selected`` GPUs (default: all) of an open NvmlSession.

    ``plugins`` is a loaded PluginHost (plugin_host.load_host): its collectors
    read (those with a ``read_gpu``), its plugins are listed, failed ones with
    their error; None reads and lists none. ``l2_probes`` is
    ``gpuagent.probe.readback.latest_l2_probes()``.
    """
    all_gpus = list(session.gpus)
    chosen = list(selected) if selected is not None else all_gpus
    collectors = readers(plugins, session, hostname)
    try:
        gpus = [gpu_facts(gpu, l2_probes or {}, collectors) for gpu in chosen]
        pairs = p2p_facts(chosen, all_gpus, collectors)
    finally:
        for collector in collectors:
            try:
                collector.close()
            except Exception as exc:  # a third-party close() that raises: said, never inspect's failure
                log.warning("collector %s: close failed: %s: %s", collector.name, type(exc).__name__, exc)
    # GPUs NVML lists but that could not be opened: shown with the reason (not with --gpu).
    unavailable = list(getattr(session, "unavailable", None) or ()) if selected is None else []
    gpus = sorted(gpus + [unavailable_facts(g) for g in unavailable], key=lambda g: g["index"])
    _note_not_in_capture(session, gpus)
    return {
        "schema": SCHEMA_VERSION,
        "host": {
            "hostname": hostname or socket.gethostname(),
            "simulated": bool(session.simulated),
            "simulate_spec": session.spec if session.simulated else None,
            "gpu_count": len(all_gpus) + len(getattr(session, "unavailable", None) or ()),
        },
        "driver": driver_facts(session),
        "gpus": gpus,
        "p2p": pairs,
        "plugins": plugin_facts(plugins),
    }


def _note_not_in_capture(session: Any, gpus: list[dict[str, Any]]) -> None:
    """A simulated GPU from an imported capture: what the capture did not state (its profile's
    not_in_capture), so a null or modelled fact says why."""
    machine = getattr(session, "machine", None) if session.simulated else None
    devices = getattr(machine, "devices", None) or []
    for gpu in gpus:
        if gpu.get("available") is False or not 0 <= gpu["index"] < len(devices):
            continue
        lacking = devices[gpu["index"]].profile.get("not_in_capture")
        if lacking:
            gpu["not_in_capture"] = list(lacking)


def driver_facts(session: Any) -> dict[str, Any]:
    return {
        "driver_version": session.driver_version,
        "nvml_version": session.nvml_version,
        "cuda_driver_version": cuda_version_string(session.cuda_driver_version),
    }


def cuda_version_string(version: int | None) -> str | None:
    """NVML's 12040 as "12.4", the way nvidia-smi prints it."""
    if not version:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


def plugin_facts(host: Any) -> list[dict[str, Any]]:
    if host is None:
        return []
    return [
        {
            "name": info.name,
            "module": info.module,
            "source": info.source,
            "version": info.version,
            "status": info.status,
            "error": info.error,
        }
        for info in host.plugins.values()
    ]


# -- one GPU ------------------------------------------------------------------


def identity(gpu: Gpu) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "name": gpu.name,
        "arch": gpu.arch,
        "uuid": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "lost": gpu.lost,
        "lost_reason": gpu.lost_reason or None,
        "available": True,
    }


def unavailable_facts(gpu: Any) -> dict[str, Any]:
    """A GPU NVML lists but that could not be opened (gpuagent.gpus.gpu.UnavailableGpu): what is known, and why."""
    return {
        "index": gpu.index,
        "name": gpu.name,
        "arch": "unknown",
        "uuid": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "lost": False,
        "lost_reason": None,
        "available": False,
        "unavailable_reason": gpu.reason,
    }


def readers(plugins: Any, session: Any, hostname: str | None = None) -> list[Any]:
    """The loaded collectors that read for `inspect` (a ``read_gpu`` or ``read_pairs`` of their
    own), each with its default config on ``session``; one that cannot be built is left out, said once."""
    from gpuagent.collector import Collector
    from gpuagent.context import AgentContext

    if plugins is None:
        return []
    context = AgentContext(hostname=hostname or socket.gethostname(), gpus=list(session.gpus), nvml=session)
    out = []
    for name, cls in plugins.collectors.items():
        if cls.read_gpu is Collector.read_gpu and not hasattr(cls, "read_pairs"):
            continue
        try:
            out.append(cls(cls.Config(), context))
        except Exception as exc:  # a third-party collector's bad constructor: not inspect's failure
            log.warning("collector %s: cannot read for inspect: %s: %s", name, type(exc).__name__, exc)
    return out


def gpu_facts(
    gpu: Gpu, l2_probes: dict[str, dict[str, Any]] | None = None, collectors: Iterable[Any] = ()
) -> dict[str, Any]:
    """One GPU's facts: each collector's ``read_gpu``, in MEASUREMENTS order, then the others'
    under ``more``; a GPU lost before or while being read comes back as its identity (and verdict), lost."""
    collectors = list(collectors)
    if gpu.lost:
        return lost_facts(gpu, collectors)
    try:
        facts = identity(gpu)
        pci = gpu.static("pci_info", pynvml.nvmlDeviceGetPciInfo_v3)
        # 0: no PCI function has vendor 0 (a simulated card whose capture redacted it): unknown.
        facts["pci_device_id"] = f"0x{int(pci.pciDeviceId):08X}" if pci is not None and pci.pciDeviceId else None
        readings = read_all(gpu, collectors)
        for key in MEASUREMENTS:
            # null where its plugin is not loaded: the document keeps its keys, without the plugin's facts.
            facts[key] = readings.pop(key, None)
        facts["l2_probe"] = (l2_probes or {}).get(gpu.uuid)
        if "health" in readings:
            facts["health"] = readings.pop("health")
        if readings:
            facts["more"] = readings
        if gpu.lost:  # refused mid-read without raising: what was read may be partial
            return lost_facts(gpu, collectors)
        return facts
    except GpuLost:
        return lost_facts(gpu, collectors)


def read_all(gpu: Gpu, collectors: Iterable[Any]) -> dict[str, Any]:
    """Every collector's ``read_gpu`` of one GPU, merged; a third-party one that fails is left out
    (one warning line); GpuLost goes to the caller."""
    readings: dict[str, Any] = {}
    for collector in collectors:
        try:
            reading = collector.read_gpu(gpu)
        except GpuLost:
            raise
        except Exception as exc:
            log.warning(
                "GPU %d: collector %s failed to read: %s: %s", gpu.index, collector.name, type(exc).__name__, exc
            )
            continue
        readings.update(reading or {})
    return readings


def lost_facts(gpu: Gpu, collectors: Iterable[Any]) -> dict[str, Any]:
    """A lost GPU's entry: its identity and, where the health collector is loaded, its verdict."""
    facts = identity(gpu)
    for collector in collectors:
        if collector.name == "health":
            facts["health"] = collector.read_gpu(gpu)["health"]
    return facts


def arrange(
    gpu: Gpu, points: list[tuple[dict[str, Any], dict[str, Any]]], summary_last: bool = False
) -> dict[str, Any] | None:
    """A multi-point measurement as one object: the GPU's own point, with the others under ``points``.

    Each entry of ``points`` is that point's own tags (those beyond the GPU's)
    and fields, merged. No points (e.g. a GPU that is not MIG-capable): None.
    """
    if not points:
        return None
    own, rest = (points[-1], points[:-1]) if summary_last else (points[0], points[1:])
    gpu_tags = set(gpu.tags)
    return {
        **own[1],
        "points": [{**{k: v for k, v in tags.items() if k not in gpu_tags}, **fields} for tags, fields in rest],
    }


# -- between GPUs -------------------------------------------------------------


def p2p_facts(rows: list[Gpu], all_gpus: list[Gpu], collectors: Iterable[Any] = ()) -> list[dict[str, Any]]:
    """One entry per ordered pair (row GPU -> any other GPU): the gpu_p2p fields (the p2p collector's
    ``read_pairs``; none where it is not loaded), and how P2P works."""
    live = [g for g in all_gpus if not g.lost]
    pairs = []
    for collector in collectors:
        read_pairs = getattr(collector, "read_pairs", None)
        if read_pairs is None:
            continue
        for tags, fields in read_pairs(live, rows=[g for g in rows if not g.lost]):
            pairs.append(
                {
                    "gpu": int(tags["gpu"]),
                    "peer_gpu": int(tags["peer_gpu"]),
                    "peer_uuid": tags["peer_uuid"],
                    "p2p": p2p_kind(fields),
                    **fields,
                }
            )
    return pairs


def p2p_kind(fields: dict[str, Any]) -> str:
    """How P2P works between a pair, if at all: nvlink, pcie or none."""
    if fields["nvlink_ok"]:
        return "nvlink"
    if fields["read_ok"] or fields["write_ok"]:
        return "pcie"
    return "none"
