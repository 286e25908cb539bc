"""power collector -> gpu_power: draw, limits, energy, temperatures, fan.

Static facts (default limit, limit range, temperature thresholds) are read
once per GPU. Per cycle: power draw, the management and enforced limits (an
operator or a policy can change them at run time), GPU temperature, fan speed
where the card has a fan, and one field-values call for total energy and
memory temperature.
"""

from __future__ import annotations

import pynvml

import gpuagent
from gpuagent.nvml_read import Field, FieldReader, poll, poll_first, valid

MEASUREMENT = "gpu_power"

FIELDS = FieldReader(
    {
        # mJ since the driver loaded; the same counter nvmlDeviceGetTotalEnergyConsumption reads.
        "energy_mj": Field(
            pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, pynvml.nvmlDeviceGetTotalEnergyConsumption
        ),
        "memory_temperature_c": Field(pynvml.NVML_FI_DEV_MEMORY_TEMP),
    }
)

THRESHOLDS = (
    (pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN, "temperature_shutdown_c"),
    (pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, "temperature_slowdown_c"),
    (pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX, "temperature_gpu_max_c"),
    (pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX, "temperature_memory_max_c"),
)


def watts(milliwatts: int | None) -> float | None:
    milliwatts = valid(milliwatts)
    return None if milliwatts is None else milliwatts / 1000.0


# Newest spelling first: nvmlDeviceGetTemperature leaves pynvml with CUDA 14.
TEMPERATURE_CALLS = ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature")


def static_fields(gpu: gpuagent.Gpu) -> dict[str, float | int | None]:
    """Facts that do not change while the driver is loaded, read once per GPU."""

    def read() -> dict[str, float | int | None]:
        fields: dict[str, float | int | None] = {
            "default_power_limit_w": watts(
                gpu.query(pynvml.nvmlDeviceGetPowerManagementDefaultLimit)
            ),
        }
        constraints = gpu.query(pynvml.nvmlDeviceGetPowerManagementLimitConstraints)
        if constraints is not None:
            fields["min_power_limit_w"] = watts(constraints[0])
            fields["max_power_limit_w"] = watts(constraints[1])
        for threshold, name in THRESHOLDS:
            # 0 degC is NVML's "no such threshold on this card", not a threshold.
            fields[name] = valid(
                gpu.query(pynvml.nvmlDeviceGetTemperatureThreshold, threshold), zero=False
            )
        return fields

    return gpu.remember("power.static", read)


def read_gpu(gpu: gpuagent.Gpu) -> dict[str, float | int | None]:
    """One GPU's gpu_power fields (what the collector emits and `inspect` shows)."""
    fields: dict[str, float | int | None] = {
        "power_w": watts(poll(gpu, pynvml.nvmlDeviceGetPowerUsage)),
        "power_limit_w": watts(poll(gpu, pynvml.nvmlDeviceGetPowerManagementLimit)),
        "enforced_power_limit_w": watts(poll(gpu, pynvml.nvmlDeviceGetEnforcedPowerLimit)),
        "temperature_c": valid(poll_first(gpu, TEMPERATURE_CALLS, pynvml.NVML_TEMPERATURE_GPU)),
        "fan_speed_pct": valid(poll(gpu, pynvml.nvmlDeviceGetFanSpeed)),
    }
    fields.update(static_fields(gpu))
    readings = FIELDS.read(gpu)
    if "energy_mj" in readings:
        fields["energy_j"] = readings["energy_mj"] / 1000.0
    # A memory sensor reading 0 degC is "no sensor" (GDDR cards), not a temperature.
    fields["memory_temperature_c"] = valid(readings.get("memory_temperature_c"), zero=False)
    return fields


class PowerCollector(gpuagent.Collector):
    name = "power"
    requires_gpus = True

    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: gpuagent.Gpu) -> None:
        acc.add_fields(MEASUREMENT, read_gpu(gpu), tags=gpu.tags)


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(PowerCollector)
