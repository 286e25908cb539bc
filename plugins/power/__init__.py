"""power collector -> gpu_power: draw, limits, energy, temperatures, fan.

Static facts (default limit, limit range, temperature thresholds) are read
once per GPU. Per cycle: GPU temperature, fan speed where the card has a fan,
and, in the cycle's one field-values call per GPU (shared with clocks), power
draw, the management and enforced limits (an operator or a policy can change
them at run time), total energy and memory temperature.
"""

from __future__ import annotations

import pynvml

import gpuagent
from gpuagent.gpus.nvml_read import (
    CYCLE,
    TLIMIT_ARCHS,
    Field,
    FieldReader,
    poll_first,
    thermal_margin,
    valid,
)
from gpuagent.plugins.power.schema import SCHEMA
from gpuagent.schema.measurements import GPU_POWER

MEASUREMENT = GPU_POWER


def _fields(power_field: int) -> FieldReader:
    """The per-cycle readings that have field ids, in the cycle's one field-values call (shared
    with clocks); each falls back to its own call on a driver without the field."""
    return FieldReader(
        {
            # nvmlDeviceGetPowerUsage's number: averaged over 1 s on Ampere (but GA100) and newer,
            # instantaneous before (nvml.h); the matching field is chosen per GPU (power_reader).
            "power_mw": Field(power_field, pynvml.nvmlDeviceGetPowerUsage),
            # nvml.h: REQUESTED is the limit set through NVML (nvmlDeviceGetPowerManagementLimit),
            # CURRENT the one enforced, other limits included (nvmlDeviceGetEnforcedPowerLimit).
            "power_limit_mw": Field(pynvml.NVML_FI_DEV_POWER_REQUESTED_LIMIT, pynvml.nvmlDeviceGetPowerManagementLimit),
            "enforced_power_limit_mw": Field(
                pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT, pynvml.nvmlDeviceGetEnforcedPowerLimit
            ),
            # mJ since the driver loaded; the same counter nvmlDeviceGetTotalEnergyConsumption reads.
            "energy_mj": Field(pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, pynvml.nvmlDeviceGetTotalEnergyConsumption),
            "memory_temperature_c": Field(pynvml.NVML_FI_DEV_MEMORY_TEMP),
        },
        group=CYCLE,
    )


AVERAGED_FIELDS = _fields(pynvml.NVML_FI_DEV_POWER_AVERAGE)
INSTANT_FIELDS = _fields(pynvml.NVML_FI_DEV_POWER_INSTANT)
INSTANT_POWER_ARCHS = frozenset({"Kepler", "Maxwell", "Pascal", "Volta", "Turing", "unknown"})


def is_ga100(gpu: gpuagent.Gpu) -> bool:
    """GA100 (A100, A30, A800): PCI device ids 0x2080-0x20FF."""
    pci = gpu.static("pci_info", pynvml.nvmlDeviceGetPciInfo_v3)
    return pci is not None and 0x2080 <= (pci.pciDeviceId >> 16) <= 0x20FF


def power_reader(gpu: gpuagent.Gpu) -> FieldReader:
    """The field set whose power field is the number nvmlDeviceGetPowerUsage gives on this GPU."""
    return gpu.remember(
        "power.fields",
        lambda: INSTANT_FIELDS if gpu.arch in INSTANT_POWER_ARCHS or is_ga100(gpu) else AVERAGED_FIELDS,
    )


THRESHOLDS = (
    (pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, "temperature_shutdown_c"),
    (pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, "temperature_slowdown_c"),
    (pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX, "temperature_gpu_max_c"),
    (pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX, "temperature_memory_max_c"),
    # nvidia-smi's "GPU Target Temperature": the acoustic threshold currently set (nvml.h).
    (pynvml.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR, "temperature_target_c"),
)


def watts(milliwatts: float | None) -> float | None:
    milliwatts = valid(milliwatts)
    return None if milliwatts is None else milliwatts / 1000.0


# Newest spelling first: nvmlDeviceGetTemperature leaves pynvml with CUDA 14.
TEMPERATURE_CALLS = ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature")


def static_fields(gpu: gpuagent.Gpu) -> dict[str, float | int | None]:
    """Facts that do not change while the driver is loaded, read once per GPU."""

    def read() -> dict[str, float | int | None]:
        fields: dict[str, float | int | None] = {
            "default_power_limit_w": watts(gpu.query(pynvml.nvmlDeviceGetPowerManagementDefaultLimit)),
        }
        constraints = gpu.query(pynvml.nvmlDeviceGetPowerManagementLimitConstraints)
        if constraints is not None:
            fields["min_power_limit_w"] = watts(constraints[0])
            fields["max_power_limit_w"] = watts(constraints[1])
        for threshold, name in THRESHOLDS:
            # 0 degC is NVML's "no such threshold on this card", not a threshold.
            fields[name] = valid(gpu.query(pynvml.nvmlDeviceGetTemperatureThreshold, threshold), zero=False)
        fields.update(tlimit_thresholds(gpu))
        return fields

    return gpu.remember("power.static", read)


# nvml.h: "GPU T.Limit temperature thresholds ... supported on Ada and later architectures and
# supersedes nvmlDeviceGetTemperatureThreshold". On the T.Limit scale 0 is max operating; the
# H100 capture prints shutdown -8, slowdown -2 (degrees past it). Signed: valid() is not used.
TLIMIT_FIELDS = (
    (pynvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT, "temperature_shutdown_tlimit_c"),
    (pynvml.NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT, "temperature_slowdown_tlimit_c"),
    (pynvml.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT, "temperature_gpu_max_tlimit_c"),
    (pynvml.NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT, "temperature_memory_max_tlimit_c"),
)


def _signed(fv) -> int | None:
    if fv.nvmlReturn != pynvml.NVML_SUCCESS:
        return None
    if fv.valueType == pynvml.NVML_VALUE_TYPE_SIGNED_INT:
        return int(fv.value.siVal)
    if fv.valueType == pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return int(fv.value.sllVal)
    return valid(int(fv.value.uiVal)) if fv.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT else None


def tlimit_thresholds(gpu: gpuagent.Gpu) -> dict[str, int | None]:
    """The T.Limit thresholds (Ada and newer), one field-values call per GPU, once."""
    if gpu.arch not in TLIMIT_ARCHS:
        return {}
    values = gpu.query(pynvml.nvmlDeviceGetFieldValues, [f for f, _ in TLIMIT_FIELDS])
    if values is None:
        return {name: None for _, name in TLIMIT_FIELDS}
    return {name: _signed(fv) for (_, name), fv in zip(TLIMIT_FIELDS, values, strict=False)}


def read_gpu(gpu: gpuagent.Gpu) -> dict[str, float | int | None]:
    """One GPU's gpu_power fields (what the collector emits and `inspect` shows)."""
    readings = power_reader(gpu).read(gpu)
    fields: dict[str, float | int | None] = {
        "power_w": watts(readings.get("power_mw")),
        "power_limit_w": watts(readings.get("power_limit_mw")),
        "enforced_power_limit_w": watts(readings.get("enforced_power_limit_mw")),
        "temperature_c": valid(poll_first(gpu, TEMPERATURE_CALLS, pynvml.NVML_TEMPERATURE_GPU)),
        "fan_speed_pct": valid(gpu.query(pynvml.nvmlDeviceGetFanSpeed)),
    }
    if gpu.arch in TLIMIT_ARCHS:
        fields["thermal_margin_c"] = thermal_margin(gpu)
    fields.update(static_fields(gpu))
    if "energy_mj" in readings:
        fields["energy_j"] = readings["energy_mj"] / 1000.0
    # A memory sensor reading 0 degC is "no sensor" (GDDR cards), not a temperature.
    fields["memory_temperature_c"] = valid(readings.get("memory_temperature_c"), zero=False)
    return fields


class PowerCollector(gpuagent.Collector):
    name = "power"
    schema = SCHEMA
    requires_gpus = True

    def read_gpu(self, gpu: gpuagent.Gpu) -> dict:
        return {MEASUREMENT: read_gpu(gpu)}

    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: gpuagent.Gpu) -> None:
        acc.add_fields(MEASUREMENT, read_gpu(gpu), tags=gpu.tags)


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(PowerCollector)
