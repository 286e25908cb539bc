"""vgpu: virtualisation mode per GPU and, on a vGPU host, one point per active vGPU instance (gpu_vgpu)."""

from __future__ import annotations

from collections.abc import Callable
from ctypes import byref, c_ulonglong
from typing import Any

import pynvml

import gpuagent
from gpuagent.gpus.gpu import Gpu, as_str
from gpuagent.plugins.vgpu.schema import SCHEMA
from gpuagent.schema.measurements import GPU_VGPU

MEASUREMENT = GPU_VGPU

VIRTUALIZATION_MODES = {
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE: "none",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH: "passthrough",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU: "vgpu",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU: "host_vgpu",
    pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA: "host_vsga",
}

HOST_VGPU_MODES = {
    pynvml.NVML_HOST_VGPU_MODE_NON_SRIOV: "non_sriov",
    pynvml.NVML_HOST_VGPU_MODE_SRIOV: "sriov",
}

LICENSE_STATES = {
    pynvml.NVML_GRID_LICENSE_STATE_UNKNOWN: "unknown",
    pynvml.NVML_GRID_LICENSE_STATE_UNINITIALIZED: "uninitialized",
    pynvml.NVML_GRID_LICENSE_STATE_UNLICENSED_UNRESTRICTED: "unlicensed_unrestricted",
    pynvml.NVML_GRID_LICENSE_STATE_UNLICENSED_RESTRICTED: "unlicensed_restricted",
    pynvml.NVML_GRID_LICENSE_STATE_UNLICENSED: "unlicensed",
    pynvml.NVML_GRID_LICENSE_STATE_LICENSED: "licensed",
}

VM_ID_TYPES = {pynvml.NVML_VGPU_VM_ID_DOMAIN_ID: "domain_id", pynvml.NVML_VGPU_VM_ID_UUID: "uuid"}

# Modes in which the GPU hosts vGPU instances (the per-instance calls only make sense there).
HOST_MODES = {pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU, pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA}


def vgpu_fb_usage(instance: Any) -> int:
    """FB used by a vGPU instance, in bytes.

    nvmlVgpuInstanceGetFbUsage writes an ``unsigned long long``; pynvml's
    wrapper hands it a 4-byte ``c_uint`` (truncating past 4 GiB), so call the
    symbol with the right type.
    """
    used = c_ulonglong(0)
    fn = pynvml._nvmlGetFunctionPointer("nvmlVgpuInstanceGetFbUsage")
    pynvml._nvmlCheckReturn(fn(pynvml._nvmlVgpuInstance_t(instance), byref(used)))
    return int(used.value)


vgpu_fb_usage.__name__ = "nvmlVgpuInstanceGetFbUsage"  # the name gpu.query counts its refusals under


def on_instance(fn):
    """Adapt a per-vGPU-instance NVML call to ``gpu.query`` (which passes the GPU's handle first)."""

    def call(_handle: Any, *args: Any) -> Any:
        return fn(*args)

    call.__name__ = getattr(fn, "__name__", "nvml_call")
    return call


def read_gpu(
    gpu: Gpu, utilisation: Callable[[Gpu], dict[int, Any]] | None = None
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(tags, fields) of one GPU's gpu_vgpu points: its virtualisation mode, then one per vGPU instance.

    ``utilisation(gpu)``: instance -> newest utilisation sample (the collector
    keeps where it left off); None: no utilisation fields.
    """
    # Set when the driver loads (passthrough, vGPU host, ...): read once per GPU.
    mode = gpu.static("vgpu.virtualization_mode", pynvml.nvmlDeviceGetVirtualizationMode)
    host_mode = gpu.static("vgpu.host_mode", pynvml.nvmlDeviceGetHostVgpuMode)
    is_host = mode in HOST_MODES
    supported = gpu.static("vgpu_supported_types", pynvml.nvmlDeviceGetSupportedVgpus) if is_host else None
    creatable = gpu.query(pynvml.nvmlDeviceGetCreatableVgpus) if is_host else None
    instances = gpu.query(pynvml.nvmlDeviceGetActiveVgpus) if is_host else None
    out: list[tuple[dict[str, Any], dict[str, Any]]] = [
        (
            gpu.tags,
            {
                "virtualization_mode": VIRTUALIZATION_MODES.get(mode, "unknown") if mode is not None else None,
                "host_vgpu_mode": HOST_VGPU_MODES.get(host_mode, "unknown") if host_mode is not None else None,
                "supported_types": len(supported) if supported is not None else None,
                "creatable_types": len(creatable) if creatable is not None else None,
                "active_instances": len(instances) if instances is not None else None,
            },
        )
    ]
    if not instances:
        return out
    samples = utilisation(gpu) if utilisation is not None else {}
    for instance in instances:
        out.append(read_instance(gpu, int(instance), samples.get(int(instance))))
    return out


def read_instance(gpu: Gpu, instance: int, util: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    q = gpu.query
    type_id = q(on_instance(pynvml.nvmlVgpuInstanceGetType), instance)
    type_name = None
    fb_total = None
    if type_id is not None:
        type_name = gpu.remember(
            f"vgpu_type_name:{type_id}",
            lambda: _str_or_none(q(on_instance(pynvml.nvmlVgpuTypeGetName), type_id)),
        )
        fb_total = gpu.remember(
            f"vgpu_type_fb:{type_id}",
            lambda: q(on_instance(pynvml.nvmlVgpuTypeGetFramebufferSize), type_id),
        )
    vm = q(on_instance(pynvml.nvmlVgpuInstanceGetVmID), instance)
    uuid = q(on_instance(pynvml.nvmlVgpuInstanceGetUUID), instance)
    fields: dict[str, Any] = {
        "vgpu_type_id": type_id,
        "vgpu_type_name": type_name,
        "vgpu_uuid": _str_or_none(uuid),
        "vm_id": _str_or_none(vm[0]) if vm is not None else None,
        "vm_id_type": VM_ID_TYPES.get(vm[1], "unknown") if vm is not None else None,
        "fb_used_bytes": q(on_instance(vgpu_fb_usage), instance),
        "fb_total_bytes": fb_total,
    }
    fields.update(license_fields(gpu, instance))
    if util is not None:
        fields["sm_util_pct"] = int(util.smUtil.uiVal)
        fields["mem_util_pct"] = int(util.memUtil.uiVal)
        fields["enc_util_pct"] = int(util.encUtil.uiVal)
        fields["dec_util_pct"] = int(util.decUtil.uiVal)
    return {**gpu.tags, "vgpu_instance": str(instance), "vgpu_type": type_name}, fields


def license_fields(gpu: Gpu, instance: int) -> dict[str, Any]:
    info = gpu.query(on_instance(pynvml.nvmlVgpuInstanceGetLicenseInfo_v2), instance)
    if info is not None:
        return {
            "licensed": bool(info.isLicensed),
            "license_state": LICENSE_STATES.get(int(info.currentState), "unknown"),
        }
    status = gpu.query(on_instance(pynvml.nvmlVgpuInstanceGetLicenseStatus), instance)
    return {"licensed": bool(status) if status is not None else None}


class VgpuCollector(gpuagent.Collector):
    """Virtualisation mode of every GPU; type, VM, FB, utilisation and licence of each vGPU instance."""

    name = "vgpu"
    schema = SCHEMA
    requires_gpus = True

    def read_gpu(self, gpu: Gpu) -> dict:
        from gpuagent.commands.facts import arrange

        return {MEASUREMENT: arrange(gpu, read_gpu(gpu))}  # no utilisation: no earlier sample

    def __init__(self, config, context):
        super().__init__(config, context)
        # Per GPU, the newest utilisation sample seen: NVML returns samples after it.
        self._last_sample_us: dict[str, int] = {}

    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: Gpu) -> None:
        for tags, fields in read_gpu(gpu, self._utilisation):
            acc.add_fields(MEASUREMENT, fields, tags=tags)

    def _utilisation(self, gpu: Gpu) -> dict[int, Any]:
        """The newest utilisation sample per vGPU instance since the last read."""
        since = self._last_sample_us.get(gpu.uuid, 0)
        samples = gpu.query(pynvml.nvmlDeviceGetVgpuUtilization, since) or []
        newest: dict[int, Any] = {}
        for sample in samples:
            instance = int(sample.vgpuInstance)
            if instance not in newest or sample.timeStamp > newest[instance].timeStamp:
                newest[instance] = sample
        if newest:
            self._last_sample_us[gpu.uuid] = max(int(s.timeStamp) for s in newest.values())
        return newest


def _str_or_none(value: Any) -> str | None:
    if value is None:
        return None
    text = as_str(value).strip("\x00").strip()
    return text or None


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(VgpuCollector)
