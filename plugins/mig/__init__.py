"""mig: MIG mode per GPU and, per MIG device, memory and (Hopper) GPM utilisation (gpu_mig)."""

from __future__ import annotations

from typing import Any

import pynvml

import gpuagent
from gpuagent.gpus.gpm import GPM_WARMUP_S, GpmSamplers, gpm_supported
from gpuagent.gpus.gpu import Gpu, GpuLost, as_str
from gpuagent.plugins.mig.names import mig_profile_name
from gpuagent.plugins.mig.schema import SCHEMA
from gpuagent.schema.measurements import GPU_MIG

MEASUREMENT = GPU_MIG
# Published each cycle on the agent's shared board (gpuagent.service.shared) for the work collector:
# (GPU uuid, gi_id) -> {"tags": the MIG device's tags, "share": its compute slices / the GPU's}.
SHARED_NAME = "mig"

# GPM metrics read per GPU instance: field name -> metric id (all percentages).
GPM_FIELDS = {
    "graphics_util_pct": pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
    "sm_util_pct": pynvml.NVML_GPM_METRIC_SM_UTIL,
    "sm_occupancy_pct": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    "tensor_util_pct": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "dram_bw_util_pct": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
}


def on_handle(fn):
    """Adapt an NVML call on another handle (a MIG device, a GPU instance) to ``gpu.query``.

    ``gpu.query`` passes the parent's handle first; this drops it, so the call
    still gets the parent's guard: NOT_SUPPORTED becomes None, GPU_IS_LOST
    marks the parent lost.
    """

    def call(_parent_handle: Any, handle: Any, *args: Any) -> Any:
        return fn(handle, *args)

    call.__name__ = getattr(fn, "__name__", "nvml_call")
    return call


def read_state(gpu: Gpu, gpm: bool = False) -> dict[str, Any] | None:
    """MIG mode and MIG devices of one GPU; None for a GPU that is not MIG-capable.

    ``gpm``: list the GPU instances to read GPM utilisation for (Hopper and newer).
    """
    modes = gpu.query(pynvml.nvmlDeviceGetMigMode)
    if modes is None:
        return None  # not MIG-capable
    current, pending = (int(m) == pynvml.NVML_DEVICE_MIG_ENABLE for m in modes)
    max_devices = gpu.static("max_mig_device_count", pynvml.nvmlDeviceGetMaxMigDeviceCount)
    devices = mig_devices(gpu, max_devices or 0) if current else []
    gpm = bool(devices) and gpm and gpm_supported(gpu)
    return {
        "fields": {
            "mig_mode_current": current,
            "mig_mode_pending": pending,
            "max_mig_devices": max_devices,
            "mig_devices": len(devices),
        },
        "devices": devices,
        "gpm_instances": sorted({d["gi_id"] for d in devices if d["gi_id"] is not None}) if gpm else [],
    }


def points(
    gpu: Gpu, state: dict[str, Any], utilisation: dict[int, dict[str, float | None]] | None = None
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(tags, fields) of one GPU's gpu_mig points: the GPU's MIG mode, then one per MIG device.

    ``utilisation``: GPU instance id -> GPM fields (the collector's samplers).
    """
    utilisation = utilisation or {}
    out: list[tuple[dict[str, Any], dict[str, Any]]] = [(gpu.tags, state["fields"])]
    for device in state["devices"]:
        fields = {**device["fields"], **utilisation.get(device["gi_id"], {})}
        out.append(({**gpu.tags, **device["tags"]}, fields))
    return out


def read_gpu(gpu: Gpu) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """One GPU's gpu_mig points without GPM (a one-off read has no earlier sample); [] if not MIG-capable."""
    state = read_state(gpu)
    return points(gpu, state) if state is not None else []


def mig_devices(gpu: Gpu, max_devices: int) -> list[dict[str, Any]]:
    devices = []
    for index in range(max_devices):
        handle = gpu.query(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, index)
        if handle is None:
            continue  # an empty slot (NOT_FOUND)
        devices.append(mig_device(gpu, index, handle))
    return devices


def mig_device(gpu: Gpu, index: int, handle: Any) -> dict[str, Any]:
    q = gpu.query
    gi_id = q(on_handle(pynvml.nvmlDeviceGetGpuInstanceId), handle)
    ci_id = q(on_handle(pynvml.nvmlDeviceGetComputeInstanceId), handle)
    uuid = q(on_handle(pynvml.nvmlDeviceGetUUID), handle)
    memory = q(on_handle(pynvml.nvmlDeviceGetMemoryInfo), handle)
    attrs = q(on_handle(pynvml.nvmlDeviceGetAttributes_v2), handle)
    tags = {
        "gi_id": gi_id,
        "ci_id": ci_id,
        "mig_uuid": as_str(uuid) if uuid is not None else None,
        "mig_profile": mig_profile_name(gpu, handle, attrs, gi_id, ci_id),
    }
    fields: dict[str, Any] = {"mig_index": index}
    if memory is not None:
        fields["fb_total_bytes"] = int(memory.total)
        fields["fb_used_bytes"] = int(memory.used)
        fields["fb_free_bytes"] = int(memory.free)
        if memory.total:
            fields["fb_used_pct"] = round(100.0 * memory.used / memory.total, 2)
    if attrs is not None:
        fields["sm_count"] = int(attrs.multiprocessorCount)
        fields["gi_slices"] = int(attrs.gpuInstanceSliceCount)
        fields["ci_slices"] = int(attrs.computeInstanceSliceCount)
    return {"gi_id": gi_id, "tags": tags, "fields": fields}


def shared_devices(states: list[tuple[Gpu, dict[str, Any]]]) -> dict[tuple[str, int], dict[str, Any]]:
    """The MIG devices as the work collector charges them: a GPU instance's share of the GPU is
    its compute slices over the GPU's (max_mig_devices: 7 on A100, H100 and H200)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for gpu, state in states:
        total = state["fields"].get("max_mig_devices")
        for device in state["devices"]:
            if device["gi_id"] is None:
                continue
            slices = device["fields"].get("gi_slices")
            out[(gpu.uuid, device["gi_id"])] = {
                "tags": {k: str(v) for k, v in device["tags"].items() if v is not None},
                "share": round(slices / total, 6) if slices and total else None,
            }
    return out


class MigCollector(gpuagent.Collector):
    """MIG mode of each MIG-capable GPU and one point per MIG device.

    Whole-GPU readings NVML refuses while MIG is on are simply absent; a GPU
    without MIG yields no gpu_mig point at all.
    """

    name = "mig"
    schema = SCHEMA
    requires_gpus = True

    class Config(gpuagent.CollectorConfig):
        # GPM utilisation per GPU instance (Hopper and newer).
        gpm: bool = True
        # GPM reports between two samples: the first run takes one, waits this long, takes the next.
        gpm_warmup: gpuagent.Duration = GPM_WARMUP_S

    def read_gpu(self, gpu: Gpu) -> dict:
        from gpuagent.commands.facts import arrange

        return {MEASUREMENT: arrange(gpu, read_gpu(gpu))}

    def __init__(self, config, context):
        super().__init__(config, context)
        self._gpm = GpmSamplers()

    def collect(self, acc: gpuagent.Accumulator) -> None:
        states = []
        for gpu in self.gpus:
            try:
                state = read_state(gpu, self.config.gpm)
            except GpuLost:
                continue
            if state is not None:
                states.append((gpu, state))
        self.context.shared.publish(SHARED_NAME, shared_devices(states))
        # A new GPU instance's earlier GPM sample first (one wait for all), a destroyed one's freed.
        sources = [(gpu, gi_id) for gpu, state in states for gi_id in state["gpm_instances"]]
        self._gpm.start_run(sources, self.config.gpm_warmup)
        for gpu, state in states:
            try:
                self._emit(acc, gpu, state)
            except GpuLost:
                continue

    def _emit(self, acc: gpuagent.Accumulator, gpu: Gpu, state: dict[str, Any]) -> None:
        utilisation: dict[int, dict[str, float | None]] = {}
        for gi_id in state["gpm_instances"]:
            values = self._gpm.read(gpu, GPM_FIELDS.values(), gpu_instance_id=gi_id)
            utilisation[gi_id] = {name: values.get(metric) for name, metric in GPM_FIELDS.items()}
        for tags, fields in points(gpu, state, utilisation):
            acc.add_fields(MEASUREMENT, fields, tags=tags)

    def close(self) -> None:
        self._gpm.close()


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(MigCollector)
