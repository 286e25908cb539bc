"""A machine's GPU facts as a plain dict (what `gpuagent inspect` shows): the collectors' readings, arranged.

This module reads nothing of its own: each GPU's facts are the per-GPU
readings of the collectors (``read_gpu`` of clocks, power, memory, pcie,
mig, vgpu, nvlink; ``read_points`` of p2p), keyed by the measurement they
stream as and with the stream's field names, so a fact means the same thing
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

from gpuagent.gpu import Gpu, GpuLost
from gpuagent.plugins import clocks, memory, mig, nvlink, p2p, pcie, power, vgpu

log = logging.getLogger("gpuagent.facts")

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
MEASUREMENTS = (
    clocks.MEASUREMENT,
    power.MEASUREMENT,
    memory.MEASUREMENT,
    pcie.MEASUREMENT,
    "gpu_health",
    mig.MEASUREMENT,
    vgpu.MEASUREMENT,
    nvlink.MEASUREMENT,
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

    ``plugins`` is a loaded PluginHost (its plugins are listed, failed ones
    with their error); None lists none. ``l2_probes`` is
    ``gpuagent.probe.readback.latest_l2_probes()``.
    """
    all_gpus = list(session.gpus)
    chosen = list(selected) if selected is not None else all_gpus
    # As the memory collector: a simulated GPU's bus id may equal a real one here, never ask real CUDA.
    use_cuda = not session.simulated
    gpus = [gpu_facts(gpu, l2_probes or {}, use_cuda=use_cuda) for gpu in chosen]
    # GPUs NVML lists but that could not be opened: shown with the reason (not with --gpu).
    unavailable = list(getattr(session, "unavailable", None) or ()) if selected is None else []
    gpus = sorted(gpus + [unavailable_facts(g) for g in unavailable], key=lambda g: g["index"])
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
        "p2p": p2p_facts(chosen, all_gpus),
        "plugins": plugin_facts(plugins),
    }


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
    """A GPU NVML lists but that could not be opened (gpuagent.gpu.UnavailableGpu): what is known, and why."""
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


def gpu_facts(gpu: Gpu, l2_probes: dict[str, dict[str, Any]] | None = None, use_cuda: bool = True) -> dict[str, Any]:
    """One GPU's facts; a GPU lost before or while being read comes back as its identity, lost."""
    if gpu.lost:
        return {**identity(gpu), "health": health_facts(gpu)}
    try:
        facts = identity(gpu)
        pci = gpu.static("pci_info", pynvml.nvmlDeviceGetPciInfo_v3)
        facts["pci_device_id"] = f"0x{int(pci.pciDeviceId):08X}" if pci is not None else None
        facts[clocks.MEASUREMENT] = clocks.read_gpu(gpu)
        facts[power.MEASUREMENT] = power.read_gpu(gpu)
        facts[memory.MEASUREMENT] = memory.read_gpu(gpu, use_cuda=use_cuda)
        facts[pcie.MEASUREMENT] = pcie.read_gpu(gpu, throughput=False)
        facts["gpu_health"] = ecc_fields(gpu)
        facts[mig.MEASUREMENT] = arrange(gpu, mig.read_gpu(gpu))
        facts[vgpu.MEASUREMENT] = arrange(gpu, vgpu.read_gpu(gpu))
        facts[nvlink.MEASUREMENT] = arrange(gpu, nvlink.read_gpu(gpu), summary_last=True)
        facts["l2_probe"] = (l2_probes or {}).get(gpu.uuid)
        facts["health"] = health_facts(gpu)
        if gpu.lost:  # refused mid-read without raising: what was read may be partial
            return {**identity(gpu), "health": health_facts(gpu)}
        return facts
    except GpuLost:
        return {**identity(gpu), "health": health_facts(gpu)}


def health_facts(gpu: Gpu) -> dict[str, Any]:
    """The health collector's verdict and reason from one read (its rules, its README's table)."""
    from gpuagent.accumulator import Accumulator
    from gpuagent.context import AgentContext
    from gpuagent.plugins.health import HealthCollector

    lost = {"verdict": "lost", "reason": "The GPU answers GPU_IS_LOST."}
    if gpu.lost:
        return lost
    collector = HealthCollector(HealthCollector.Config(xid_events=False), AgentContext("inspect", gpus=[gpu]))
    acc = Accumulator()
    try:
        collector.collect_gpu(acc, gpu)  # not collect(): a one-off view never takes a lost GPU back
    except GpuLost:
        return lost
    except pynvml.NVMLError as exc:
        log.warning("GPU %d: health read failed: %s; shown as degraded", gpu.index, exc)
        return {"verdict": "degraded", "reason": f"Health could not be read ({exc})."}
    fields = acc.points[-1].fields
    return {"verdict": fields["verdict"], "reason": fields["verdict_reason"]}


def ecc_fields(gpu: Gpu) -> dict[str, bool | None]:
    """ECC mode under the health collector's field names (one call; health reads many more per cycle)."""
    modes = gpu.query(pynvml.nvmlDeviceGetEccMode)
    if modes is None:
        return {"ecc_enabled": None, "ecc_pending_enabled": None}
    return {"ecc_enabled": bool(modes[0]), "ecc_pending_enabled": bool(modes[1])}


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


def p2p_facts(rows: list[Gpu], all_gpus: list[Gpu]) -> list[dict[str, Any]]:
    """One entry per ordered pair (row GPU -> any other GPU): the gpu_p2p fields, and how P2P works."""
    live = [g for g in all_gpus if not g.lost]
    pairs = []
    for tags, fields in p2p.read_points(live, rows=[g for g in rows if not g.lost]):
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
