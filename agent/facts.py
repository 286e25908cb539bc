"""A machine's GPU facts, read once through NVML into a plain dict (what `gpuagent inspect` shows).

Reading is kept apart from rendering: ``gather`` returns a JSON-ready dict
(numbers as numbers, units in key names, None where the card does not offer a
reading) that `inspect --json` prints as is and the human view renders. Its
shape is written down in ``gpuagent/schemas/inspect.schema.json``.

NVML reads reuse the collectors' helpers (clocks, memory, pcie, p2p, mig, vgpu) so a reading
means the same thing in `inspect` as in the stream. A GPU lost in the middle
of the read becomes an entry with ``lost: true`` and its identity only; the
others are still read.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any

import pynvml

from gpuagent.gpu import Gpu, GpuLost, as_str
from gpuagent.nvml_read import valid
from gpuagent.plugins.clocks import REASONS, current_reasons, max_clock_mhz, supported_reasons
from gpuagent.plugins.memory import static_fields as memory_static_fields
from gpuagent.plugins.mig import on_handle, profile_name_from_attributes
from gpuagent.plugins.p2p import P2P_CAPS, TOPOLOGY_NAMES, map_nvlinks, status_name
from gpuagent.plugins.pcie import link_value
from gpuagent.plugins.vgpu import (
    HOST_MODES,
    HOST_VGPU_MODES,
    VIRTUALIZATION_MODES,
    on_instance,
    vgpu_fb_usage,
)

log = logging.getLogger("gpuagent.facts")

SCHEMA_VERSION = 1

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
    with their error); None lists none. ``l2_probes`` is ``latest_l2_probes()``.
    """
    all_gpus = list(session.gpus)
    chosen = list(selected) if selected is not None else all_gpus
    gpus = [gpu_facts(gpu, l2_probes or {}) for gpu in chosen]
    return {
        "schema": SCHEMA_VERSION,
        "host": {
            "hostname": hostname or socket.gethostname(),
            "simulated": bool(session.simulated),
            "simulate_spec": session.spec if session.simulated else None,
            "gpu_count": len(all_gpus),
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


def _read(gpu: Gpu, fn: Callable[..., Any], *args: Any) -> Any:
    """``gpu.query`` for a one-off view: any NVML error other than a lost GPU is "n/a", not a crash."""
    try:
        return gpu.query(fn, *args)
    except GpuLost:
        raise
    except pynvml.NVMLError as exc:
        log.warning("GPU %d: %s failed: %s; shown as n/a", gpu.index, getattr(fn, "__name__", fn), exc)
        return None


def identity(gpu: Gpu) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "name": gpu.name,
        "arch": gpu.arch,
        "uuid": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "lost": gpu.lost,
        "lost_reason": gpu.lost_reason or None,
    }


def gpu_facts(gpu: Gpu, l2_probes: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """One GPU's facts; a GPU lost before or while being read comes back as its identity, lost."""
    if gpu.lost:
        return {**identity(gpu), "health": health_facts(gpu)}
    try:
        facts = identity(gpu)
        pci = _read(gpu, pynvml.nvmlDeviceGetPciInfo_v3)
        facts["pci_device_id"] = f"0x{int(pci.pciDeviceId):08X}" if pci is not None else None
        facts["memory"] = memory_facts(gpu)
        facts["clocks"] = clock_facts(gpu)
        facts["power"] = power_facts(gpu)
        facts["pstate"] = pstate(gpu)
        facts["throttle_reasons"] = throttle_reasons(gpu)
        facts["ecc"] = ecc_facts(gpu)
        facts["mig"] = mig_facts(gpu)
        facts["virtualization"] = virtualization_facts(gpu)
        facts["pcie"] = pcie_facts(gpu)
        facts["l2_probe"] = (l2_probes or {}).get(gpu.uuid)
        facts["health"] = health_facts(gpu)
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


def memory_facts(gpu: Gpu) -> dict[str, Any]:
    info = _read(gpu, pynvml.nvmlDeviceGetMemoryInfo)
    try:
        # Bus width, peak DRAM bandwidth and L2 size exactly as the memory collector reports them.
        static = memory_static_fields(gpu, use_cuda=True)
    except GpuLost:
        raise
    except pynvml.NVMLError as exc:
        log.warning("GPU %d: memory facts failed: %s; shown as n/a", gpu.index, exc)
        static = {}
    return {
        "total_bytes": int(info.total) if info is not None else None,
        "used_bytes": int(info.used) if info is not None else None,
        "free_bytes": int(info.free) if info is not None else None,
        "bus_width_bits": static.get("bus_width_bits"),
        "l2_cache_bytes": static.get("l2_cache_bytes"),
        "l2_cache_source": static.get("l2_cache_source"),
        "peak_dram_bw_gbps": static.get("dram_peak_gbps"),
        "peak_dram_bw_source": static.get("dram_peak_source"),
    }


def clock_facts(gpu: Gpu) -> dict[str, Any]:
    def current(clock_type: int) -> int | None:
        # 0 MHz is NVML's "not available" (a MIG-enabled GPU), not a reading.
        return valid(_read(gpu, pynvml.nvmlDeviceGetClockInfo, clock_type), zero=False)

    def maximum(clock_type: int) -> int | None:
        try:
            return max_clock_mhz(gpu, clock_type)
        except pynvml.NVMLError:
            return None

    return {
        "sm_clock_mhz": current(pynvml.NVML_CLOCK_SM),
        "max_sm_clock_mhz": maximum(pynvml.NVML_CLOCK_SM),
        "memory_clock_mhz": current(pynvml.NVML_CLOCK_MEM),
        "max_memory_clock_mhz": maximum(pynvml.NVML_CLOCK_MEM),
    }


def _watts(milliwatts: int | None) -> float | None:
    milliwatts = valid(milliwatts)
    return None if milliwatts is None else round(milliwatts / 1000.0, 3)


def power_facts(gpu: Gpu) -> dict[str, Any]:
    limit = _read(gpu, pynvml.nvmlDeviceGetEnforcedPowerLimit)
    if limit is None:
        limit = _read(gpu, pynvml.nvmlDeviceGetPowerManagementLimit)
    return {
        "power_draw_w": _watts(_read(gpu, pynvml.nvmlDeviceGetPowerUsage)),
        "power_limit_w": _watts(limit),
        "temperature_c": valid(_read(gpu, pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)),
    }


def pstate(gpu: Gpu) -> int | None:
    value = _read(gpu, pynvml.nvmlDeviceGetPerformanceState)
    if value is None or value == pynvml.NVML_PSTATE_UNKNOWN:
        return None
    return valid(value)


def throttle_reasons(gpu: Gpu) -> list[str] | None:
    """Active clock-event reasons as the clocks collector names them; None when the card reports none."""
    try:
        supported = supported_reasons(gpu)
        current = current_reasons(gpu) if supported is not None else None
    except GpuLost:
        raise
    except pynvml.NVMLError:
        return None
    if current is None:
        return None
    return [name for bit, name in REASONS.items() if supported & bit and current & bit]


def ecc_facts(gpu: Gpu) -> dict[str, Any]:
    modes = _read(gpu, pynvml.nvmlDeviceGetEccMode)
    if modes is None:
        return {"current": None, "pending": None}
    return {"current": bool(modes[0]), "pending": bool(modes[1])}


def mig_facts(gpu: Gpu) -> dict[str, Any]:
    modes = _read(gpu, pynvml.nvmlDeviceGetMigMode)
    if modes is None:  # not MIG-capable
        return {"current": None, "pending": None, "max_instances": None, "instances": []}
    current, pending = (int(m) == pynvml.NVML_DEVICE_MIG_ENABLE for m in modes)
    max_devices = valid(_read(gpu, pynvml.nvmlDeviceGetMaxMigDeviceCount))
    instances = []
    if current:
        for slot in range(max_devices or 0):
            handle = _read(gpu, pynvml.nvmlDeviceGetMigDeviceHandleByIndex, slot)
            if handle is not None:
                instances.append(mig_instance(gpu, slot, handle))
    return {"current": current, "pending": pending, "max_instances": max_devices, "instances": instances}


def mig_instance(gpu: Gpu, slot: int, handle: Any) -> dict[str, Any]:
    q = lambda fn: _read(gpu, on_handle(fn), handle)  # noqa: E731
    uuid = q(pynvml.nvmlDeviceGetUUID)
    memory = q(pynvml.nvmlDeviceGetMemoryInfo)
    attrs = q(pynvml.nvmlDeviceGetAttributes_v2)
    return {
        "index": slot,
        "gi_id": q(pynvml.nvmlDeviceGetGpuInstanceId),
        "ci_id": q(pynvml.nvmlDeviceGetComputeInstanceId),
        "uuid": as_str(uuid) if uuid is not None else None,
        "profile": profile_name_from_attributes(attrs) if attrs is not None else None,
        "sm_count": int(attrs.multiprocessorCount) if attrs is not None else None,
        "memory_total_bytes": int(memory.total) if memory is not None else None,
        "memory_used_bytes": int(memory.used) if memory is not None else None,
    }


def virtualization_facts(gpu: Gpu) -> dict[str, Any]:
    mode = _read(gpu, pynvml.nvmlDeviceGetVirtualizationMode)
    host_mode = _read(gpu, pynvml.nvmlDeviceGetHostVgpuMode)
    vgpus = []
    if mode in HOST_MODES:
        for instance in _read(gpu, pynvml.nvmlDeviceGetActiveVgpus) or []:
            vgpus.append(vgpu_instance(gpu, int(instance)))
    return {
        "mode": VIRTUALIZATION_MODES.get(mode, "unknown") if mode is not None else None,
        "host_vgpu_mode": HOST_VGPU_MODES.get(host_mode, "unknown") if host_mode is not None else None,
        "vgpus": vgpus,
    }


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return as_str(value).strip("\x00").strip() or None


def vgpu_instance(gpu: Gpu, instance: int) -> dict[str, Any]:
    q = lambda fn, *args: _read(gpu, on_instance(fn), *args)  # noqa: E731
    type_id = q(pynvml.nvmlVgpuInstanceGetType, instance)
    vm = q(pynvml.nvmlVgpuInstanceGetVmID, instance)
    return {
        "instance": instance,
        "type_id": type_id,
        "type_name": _text(q(pynvml.nvmlVgpuTypeGetName, type_id)) if type_id is not None else None,
        "uuid": _text(q(pynvml.nvmlVgpuInstanceGetUUID, instance)),
        "vm_id": _text(vm[0]) if vm is not None else None,
        "fb_used_bytes": q(vgpu_fb_usage, instance),
        "fb_total_bytes": q(pynvml.nvmlVgpuTypeGetFramebufferSize, type_id) if type_id is not None else None,
    }


def pcie_facts(gpu: Gpu) -> dict[str, Any]:
    r = lambda fn: link_value(_read(gpu, fn))  # noqa: E731
    return {
        "link_gen_current": r(pynvml.nvmlDeviceGetCurrPcieLinkGeneration),
        "link_gen_max": r(pynvml.nvmlDeviceGetMaxPcieLinkGeneration),
        "link_width_current": r(pynvml.nvmlDeviceGetCurrPcieLinkWidth),
        "link_width_max": r(pynvml.nvmlDeviceGetMaxPcieLinkWidth),
    }


# -- `gpuagent probe l2` results -----------------------------------------------

L2_PROBE_MEASUREMENT = "gpu_l2_probe"
L2_PROBE_FIELDS = ("l2_effective_bytes", "l2_bw_gbps", "dram_bw_gbps", "l2_dram_ratio", "knee_found", "method")
L2_PROBE_MAX_AGE = "30d"  # older results are not "recent" and are not shown
L2_PROBE_TIMEOUT_S = 2.0  # a one-off view must not hang on a slow database


def latest_l2_probes(config_path: str | None = None, timeout: float = L2_PROBE_TIMEOUT_S) -> dict[str, dict[str, Any]]:
    """GPU UUID -> its newest `gpuagent probe l2` summary from the last 30 days.

    The probe keeps no local store: `probe l2 --send` writes gpu_l2_probe
    points through the sinks (docs/probe.md), so the results are read back
    from the InfluxDB of the config's ``[sinks.influxdb]`` table. No such
    table, or a database that cannot be read: ``{}`` (inspect then shows no
    probe line), never an error.
    """
    from gpuagent.config import read_config, resolve_path
    from gpuagent.errors import AgentError

    try:
        if resolve_path(config_path) is None:
            return {}
        if "influxdb" not in read_config(config_path).raw.get("sinks", {}):
            return {}
        from gpuagent.compare.query import InfluxQL, connection_from

        conn = connection_from(config_path)
        conn.timeout = timeout
        client = InfluxQL(conn)
        try:
            # Only summary points carry these fields, so curve points are not returned.
            selected = ", ".join(f'"{f}"' for f in L2_PROBE_FIELDS)
            rows = client.rows(
                f'SELECT {selected} FROM "{L2_PROBE_MEASUREMENT}" WHERE time > now() - {L2_PROBE_MAX_AGE} '
                'GROUP BY "uuid" ORDER BY time DESC LIMIT 1'
            )
        finally:
            client.close()
    except (AgentError, OSError, ValueError) as exc:
        log.debug("no L2 probe results read: %s", exc)
        return {}
    return {row["uuid"]: l2_probe_facts(row) for row in rows if row.get("uuid")}


def l2_probe_facts(row: dict[str, Any]) -> dict[str, Any]:
    """One summary row (InfluxQL, epoch ns) as the ``l2_probe`` object of a GPU's facts."""
    import time

    stamp = row.get("time")
    out: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp / 1e9)) if isinstance(stamp, int) else None
    }
    for name in L2_PROBE_FIELDS:
        value = row.get(name)
        if name == "l2_effective_bytes" and value is not None:
            value = int(value)
        out[name] = value
    return out


# -- between GPUs -------------------------------------------------------------


def p2p_facts(rows: list[Gpu], all_gpus: list[Gpu]) -> list[dict[str, Any]]:
    """One entry per ordered pair (row GPU -> any other GPU): topology level and P2P status by kind."""
    live = [g for g in all_gpus if not g.lost]
    if len(live) < 2:
        return []
    nvlinks = map_nvlinks(live)
    pairs = []
    for gpu in rows:
        for peer in all_gpus:
            if peer is gpu or gpu.lost or peer.lost:
                continue
            try:
                pairs.append(p2p_pair(gpu, peer, nvlinks))
            except GpuLost:
                continue
    return pairs


def p2p_pair(gpu: Gpu, peer: Gpu, nvlinks: Any) -> dict[str, Any]:
    status = {cap: status_name(_read(gpu, pynvml.nvmlDeviceGetP2PStatus, peer.handle, index)) for cap, index in P2P_CAPS.items()}
    level = _read(gpu, pynvml.nvmlDeviceGetTopologyCommonAncestor, peer.handle)
    pcie_topology = TOPOLOGY_NAMES.get(level) if level is not None else None
    links = nvlinks.links_between(gpu, peer)
    if status["nvlink"] == "ok":
        kind = "nvlink"
    elif status["read"] == "ok" or status["write"] == "ok":
        kind = "pcie"
    else:
        kind = "none"
    return {
        "gpu": gpu.index,
        "peer": peer.index,
        "topology": f"NV{links}" if links else pcie_topology,
        "pcie_topology": pcie_topology,
        "nvlink_links": links,
        "p2p": kind,
        "read_ok": status["read"] == "ok",
        "write_ok": status["write"] == "ok",
        "nvlink_ok": status["nvlink"] == "ok",
        "atomics_ok": status["atomics"] == "ok",
        "status": status,
    }
