"""``gpuagent sim record``: read a GPU's static facts through NVML into a simulator profile.

Works against whatever libnvidia-ml pynvml has loaded (real hardware, or the
simulator itself: recording a simulated device reproduces its profile's
static facts, which is how this is tested). Every call the card answers with
NOT_SUPPORTED is listed under ``unsupported``.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from typing import Any

import pynvml

from gpuagent.errors import AgentError
from gpuagent.gpus.gpu import ARCH_NAMES, as_str
from gpuagent.sim.profile import validate

# A refused optional reading is recorded as unknown, whatever the code: drivers from 590
# answer DEPRECATED for the applications clocks, an unprivileged user gets NO_PERMISSION, an
# older driver FUNCTION_NOT_FOUND. A lost GPU still stops the recording.
_FATAL = (pynvml.NVML_ERROR_GPU_IS_LOST,)
# Fixed answers a replay should give again (the profile's ``errors``); NOT_SUPPORTED goes
# under ``unsupported``.
_RECORDED_ERRORS = {
    pynvml.NVML_ERROR_DEPRECATED: "DEPRECATED",
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: "FUNCTION_NOT_FOUND",
    pynvml.NVML_ERROR_NO_PERMISSION: "NO_PERMISSION",
}

# Per-device readers probed for NOT_SUPPORTED: (C symbol, call).
PROBES: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("nvmlDeviceGetFanSpeed", pynvml.nvmlDeviceGetFanSpeed),
    ("nvmlDeviceGetSerial", pynvml.nvmlDeviceGetSerial),
    ("nvmlDeviceGetBoardPartNumber", pynvml.nvmlDeviceGetBoardPartNumber),
    ("nvmlDeviceGetVbiosVersion", pynvml.nvmlDeviceGetVbiosVersion),
    (
        "nvmlDeviceGetApplicationsClock",
        lambda h: pynvml.nvmlDeviceGetApplicationsClock(h, pynvml.NVML_CLOCK_GRAPHICS),
    ),
    (
        "nvmlDeviceGetDefaultApplicationsClock",
        lambda h: pynvml.nvmlDeviceGetDefaultApplicationsClock(h, pynvml.NVML_CLOCK_GRAPHICS),
    ),
    ("nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates),
    ("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage),
    ("nvmlDeviceGetTotalEnergyConsumption", pynvml.nvmlDeviceGetTotalEnergyConsumption),
    ("nvmlDeviceGetEnforcedPowerLimit", pynvml.nvmlDeviceGetEnforcedPowerLimit),
    (
        "nvmlDeviceGetTemperature",
        lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
    ),
    ("nvmlDeviceGetPerformanceState", pynvml.nvmlDeviceGetPerformanceState),
    ("nvmlDeviceGetCurrentClocksEventReasons", pynvml.nvmlDeviceGetCurrentClocksEventReasons),
    (
        "nvmlDeviceGetPcieThroughput",
        lambda h: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
    ),
    ("nvmlDeviceGetPcieReplayCounter", pynvml.nvmlDeviceGetPcieReplayCounter),
    ("nvmlDeviceGetMemoryBusWidth", pynvml.nvmlDeviceGetMemoryBusWidth),
    ("nvmlDeviceGetBAR1MemoryInfo", pynvml.nvmlDeviceGetBAR1MemoryInfo),
    ("nvmlDeviceGetEccMode", pynvml.nvmlDeviceGetEccMode),
    ("nvmlDeviceGetRemappedRows", pynvml.nvmlDeviceGetRemappedRows),
    ("nvmlDeviceGetRetiredPagesPendingStatus", pynvml.nvmlDeviceGetRetiredPagesPendingStatus),
    ("nvmlDeviceGetComputeRunningProcesses_v3", pynvml.nvmlDeviceGetComputeRunningProcesses_v3),
)


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        if exc.value in _FATAL:
            raise
        return None


def _code(fn: Callable[..., Any], *args: Any) -> int:
    try:
        fn(*args)
        return pynvml.NVML_SUCCESS
    except pynvml.NVMLError as exc:
        return exc.value


def _slug(product: str) -> str:
    s = product.lower().replace("nvidia", "").replace("geforce", "")
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-") or "gpu"


def record_device(index: int = 0) -> dict[str, Any]:
    """A profile of GPU ``index`` as NVML (already initialised) reports it."""
    count = pynvml.nvmlDeviceGetCount()
    if not 0 <= index < count:
        raise AgentError(f"no GPU {index} (this machine has {count})")
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    name = as_str(pynvml.nvmlDeviceGetName(h))
    pci = pynvml.nvmlDeviceGetPciInfo_v3(h)
    arch = _try(pynvml.nvmlDeviceGetArchitecture, h)
    mem = _try(lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2))
    if mem is None:
        raise AgentError(f"GPU {index}: NVML refuses its memory info (nvmlDeviceGetMemoryInfo_v2)")
    bar1 = _try(pynvml.nvmlDeviceGetBAR1MemoryInfo, h)
    answers = {sym: _code(fn, h) for sym, fn in PROBES}
    unsupported = sorted(sym for sym, code in answers.items() if code == pynvml.NVML_ERROR_NOT_SUPPORTED)
    errors = {sym: _RECORDED_ERRORS[code] for sym, code in sorted(answers.items()) if code in _RECORDED_ERRORS}

    def clk(fn, kind):
        return _try(fn, h, kind)

    max_clocks = {
        k: clk(pynvml.nvmlDeviceGetMaxClockInfo, c)
        for k, c in (
            ("graphics", pynvml.NVML_CLOCK_GRAPHICS),
            ("sm", pynvml.NVML_CLOCK_SM),
            ("memory", pynvml.NVML_CLOCK_MEM),
            ("video", pynvml.NVML_CLOCK_VIDEO),
        )
    }
    app_g = clk(pynvml.nvmlDeviceGetApplicationsClock, pynvml.NVML_CLOCK_GRAPHICS)
    app_m = clk(pynvml.nvmlDeviceGetApplicationsClock, pynvml.NVML_CLOCK_MEM)
    limit = _try(pynvml.nvmlDeviceGetPowerManagementLimit, h) or _try(pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
    if limit is None:
        raise AgentError(f"GPU {index}: NVML reports no power limit")
    constraints = _try(pynvml.nvmlDeviceGetPowerManagementLimitConstraints, h) or [None, None]
    default = _try(pynvml.nvmlDeviceGetPowerManagementDefaultLimit, h)
    util = _try(pynvml.nvmlDeviceGetUtilizationRates, h)
    power_now = _try(pynvml.nvmlDeviceGetPowerUsage, h)
    temp = _try(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU)
    thresholds = {
        key: _try(pynvml.nvmlDeviceGetTemperatureThreshold, h, t)
        for key, t in (
            ("slowdown", pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
            ("shutdown", pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
        )
    }
    ecc = _try(pynvml.nvmlDeviceGetEccMode, h)
    fan = _try(pynvml.nvmlDeviceGetFanSpeed, h)
    gpm = _try(pynvml.nvmlGpmQueryDeviceSupport, h)
    profile: dict[str, Any] = {
        "schema": 1,
        "name": _slug(name),
        "source": f"recorded with gpuagent sim record (driver {_try(lambda: as_str(pynvml.nvmlSystemGetDriverVersion()))})",
        "driver_version": _try(lambda: as_str(pynvml.nvmlSystemGetDriverVersion())),
        "product_name": name,
        "brand": "GeForce" if _try(pynvml.nvmlDeviceGetBrand, h) == pynvml.NVML_BRAND_GEFORCE else "NVIDIA",
        "architecture": ARCH_NAMES.get(arch, "unknown") if arch is not None else "unknown",
        "pci_device_id": f"0x{pci.pciDeviceId:08X}",
        "pci_subsystem_id": f"0x{pci.pciSubSystemId:08X}",
        "serial": _opt_str(_try(pynvml.nvmlDeviceGetSerial, h)),
        "board_part_number": _opt_str(_try(pynvml.nvmlDeviceGetBoardPartNumber, h)),
        "vbios_version": _opt_str(_try(pynvml.nvmlDeviceGetVbiosVersion, h)),
        "memory": {
            "total_mib": mem.total >> 20,
            "reserved_mib": mem.reserved >> 20,
            "bar1_total_mib": (bar1.bar1Total >> 20) if bar1 else 256,
            "bus_width_bits": _try(pynvml.nvmlDeviceGetMemoryBusWidth, h),
        },
        "l2_cache_bytes": None,
        "clocks_mhz": {
            "max": max_clocks,
            "idle": {},
            "applications": {"graphics": app_g, "memory": app_m} if app_g else None,
        },
        "power_w": {
            "limit": limit / 1000,
            "default": (default or limit) / 1000,
            "min": (constraints[0] or limit * 0.3) / 1000,
            "max": (constraints[1] or limit) / 1000,
            "idle": round(power_now / 1000)
            if power_now is not None and util is not None and util.gpu < 5
            else round(limit / 10000),
        },
        "pcie": {
            "max_gen": _try(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h) or 4,
            "current_gen": _try(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h) or 4,
            "idle_gen": _try(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h) or 4,
            "max_width": _try(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h) or 16,
            "current_width": _try(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h) or 16,
        },
        "temperature_c": {
            "idle": temp if temp is not None else 30,
            "max": 80,
            **{k: v for k, v in thresholds.items() if v is not None},
        },
        "fan_pct": None if fan is None else {"idle": min(fan, 40), "max": 80},
        "ecc": None if ecc is None else {"enabled": bool(ecc[0])},
        "remapped_rows": _code(pynvml.nvmlDeviceGetRemappedRows, h) == pynvml.NVML_SUCCESS,
        "retired_pages": _code(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, h) == pynvml.NVML_SUCCESS,
        "gpm": bool(gpm and gpm.isSupportedDevice),
        "nvlink": _record_nvlink(h),
        "mig": _record_mig(h),
        "virtualization": _record_virtualization(h),
        "clocks_event_reasons_supported": _try(pynvml.nvmlDeviceGetSupportedClocksEventReasons, h) or 0,
        "unsupported": unsupported,
        "errors": errors,
        "load": {},
        "faults": [],
    }
    return validate(profile, f"recorded GPU {index}")


def _opt_str(value: Any) -> str | None:
    return None if value is None else as_str(value)


def _record_nvlink(h) -> dict[str, Any] | None:
    links = 0
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        if _code(pynvml.nvmlDeviceGetNvLinkState, h, link) != pynvml.NVML_SUCCESS:
            break
        links += 1
    if not links:
        return None
    remote = _try(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, h, 0)
    fields = _try(pynvml.nvmlDeviceGetFieldValues, h, [pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON])
    speed = fields[0].value.uiVal if fields is not None and fields[0].nvmlReturn == pynvml.NVML_SUCCESS else None
    out = {
        "links": links,
        "version": _try(pynvml.nvmlDeviceGetNvLinkVersion, h, 0) or 4,
        "topology": "switch" if remote == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH else "bridge",
    }
    if speed:
        out["speed_mbps"] = speed
    return out


def _record_mig(h) -> dict[str, Any] | None:
    mode = _try(pynvml.nvmlDeviceGetMigMode, h)
    if mode is None:
        return None
    profiles = []
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info = _try(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, h, index)
        if info is None:
            continue
        profiles.append(
            {
                "index": index,  # NVML_GPU_INSTANCE_PROFILE_*; info.id is the profile's own id
                "profile_id": info.id,
                "name": as_str(info.name).replace("MIG ", ""),
                "slices": info.sliceCount,
                "instance_count": info.instanceCount,
                "sm_count": info.multiprocessorCount,
                "memory_mib": info.memorySizeMB,
            }
        )
    instances = []
    if mode[0]:
        for i in range(_try(pynvml.nvmlDeviceGetMaxMigDeviceCount, h) or 0):
            mh = _try(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
            if mh is None:
                continue
            gi_id = _try(pynvml.nvmlDeviceGetGpuInstanceId, mh)
            mem = _try(pynvml.nvmlDeviceGetMemoryInfo, mh)
            if gi_id is None or mem is None:
                continue  # a MIG device NVML will not describe (e.g. without privileges): left out
            attrs = _try(pynvml.nvmlDeviceGetAttributes_v2, mh)
            gi = _try(pynvml.nvmlDeviceGetGpuInstanceById, h, gi_id)
            gi_info = _try(pynvml.nvmlGpuInstanceGetInfo, gi) if gi is not None else None
            bar1 = _try(pynvml.nvmlDeviceGetBAR1MemoryInfo, mh)
            name = as_str(_try(pynvml.nvmlDeviceGetName, mh) or "")
            instances.append(
                {
                    "gi_id": gi_id,
                    "ci_id": _try(pynvml.nvmlDeviceGetComputeInstanceId, mh) or 0,
                    "profile_id": gi_info.profileId if gi_info else 0,
                    "profile": name.rsplit(" MIG ", 1)[-1] if " MIG " in name else "",
                    "slices": gi_info.placement.size if gi_info else (attrs.gpuInstanceSliceCount if attrs else 1),
                    "sm_count": attrs.multiprocessorCount if attrs else 0,
                    "memory_mib": mem.total >> 20,
                    "bar1_mib": (bar1.bar1Total >> 20) if bar1 else 0,
                }
            )
    return {
        "enabled": bool(mode[0]),
        "max_devices": _try(pynvml.nvmlDeviceGetMaxMigDeviceCount, h) or 7,
        "gpu_instance_profiles": profiles,
        "instances": instances,
    }


def _record_virtualization(h) -> dict[str, Any]:
    names = {
        v: k
        for k, v in {
            "none": pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE,
            "passthrough": pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
            "vgpu": pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU,
            "host_vgpu": pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU,
            "host_vsga": pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA,
        }.items()
    }
    mode = names.get(_try(pynvml.nvmlDeviceGetVirtualizationMode, h), "none")
    out: dict[str, Any] = {"mode": mode}
    if mode != "host_vgpu":
        return out
    host = _try(pynvml.nvmlDeviceGetHostVgpuMode, h)
    out["host_vgpu_mode"] = "non_sriov" if host == pynvml.NVML_HOST_VGPU_MODE_NON_SRIOV else "sriov"
    out["vgpu_types"] = [
        {
            "type_id": int(t),
            "name": as_str(_try(pynvml.nvmlVgpuTypeGetName, t) or f"vGPU type {int(t)}"),
            "class": as_str(_try(pynvml.nvmlVgpuTypeGetClass, t) or "Quadro"),
            "fb_mib": (_try(pynvml.nvmlVgpuTypeGetFramebufferSize, t) or 0) >> 20,
            "max_instances": _try(pynvml.nvmlVgpuTypeGetMaxInstances, h, t) or 1,
        }
        for t in (_try(pynvml.nvmlDeviceGetSupportedVgpus, h) or [])
    ]
    instances = []
    for v in _try(pynvml.nvmlDeviceGetActiveVgpus, h) or []:
        vm = _try(pynvml.nvmlVgpuInstanceGetVmID, v)
        type_id = _try(pynvml.nvmlVgpuInstanceGetType, v)
        if type_id is None:
            continue  # an instance NVML will not describe: left out
        lic = _try(pynvml.nvmlVgpuInstanceGetLicenseInfo_v2, v)
        instances.append(
            {
                "instance_id": int(v),
                "type_id": type_id,
                "vm_id": as_str(vm[0]) if vm is not None else "",
                "fb_used_mib": (_try(_vgpu_fb_usage, v) or 0) >> 20,
                "licensed": bool(lic.isLicensed) if lic is not None else True,
            }
        )
    out["vgpu_instances"] = instances
    return out


def _vgpu_fb_usage(instance: int) -> int:
    """nvmlVgpuInstanceGetFbUsage with a 64-bit out value.

    pynvml's wrapper passes a c_uint where the C API writes an unsigned long
    long, so usage of 4 GiB or more comes back truncated; call the symbol
    directly instead.
    """
    fn = pynvml._nvmlGetFunctionPointer("nvmlVgpuInstanceGetFbUsage")
    value = ctypes.c_ulonglong(0)
    ret = fn(ctypes.c_uint(int(instance)), ctypes.byref(value))
    if ret != pynvml.NVML_SUCCESS:
        raise pynvml.NVMLError(ret)
    return value.value


def record(index: int = 0) -> dict[str, Any]:
    """Initialise NVML, record GPU ``index``, shut NVML down."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise AgentError(
            f"cannot record: NVML is not available ({exc}); run this on a machine with an NVIDIA driver"
        ) from None
    try:
        return record_device(index)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
