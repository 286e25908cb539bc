"""What the power plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, counter, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPU_POWER,
        (
            gauge(
                "power_w",
                float,
                unit="W",
                help="board power draw (`nvmlDeviceGetPowerUsage`; on Ampere and newer a 1 s average)",
                source="`NVML_FI_DEV_POWER_AVERAGE` (`POWER_INSTANT` before Ampere and on GA100; else `nvmlDeviceGetPowerUsage`) (mW)",
            ),
            gauge(
                "power_limit_w",
                float,
                unit="W",
                help="management limit (what `nvidia-smi -pl` sets)",
                source="`NVML_FI_DEV_POWER_REQUESTED_LIMIT` (else `nvmlDeviceGetPowerManagementLimit`) (mW)",
            ),
            gauge(
                "enforced_power_limit_w",
                float,
                unit="W",
                help="the limit in force (the lowest of all limiters)",
                source="`NVML_FI_DEV_POWER_CURRENT_LIMIT` (else `nvmlDeviceGetEnforcedPowerLimit`) (mW)",
            ),
            gauge(
                "default_power_limit_w",
                float,
                unit="W",
                help="static",
                source="`nvmlDeviceGetPowerManagementDefaultLimit` (mW)",
            ),
            gauge(
                "min_power_limit_w",
                float,
                unit="W",
                help="static: lowest settable limit",
                source="`nvmlDeviceGetPowerManagementLimitConstraints` (mW)",
            ),
            gauge(
                "max_power_limit_w",
                float,
                unit="W",
                help="static: highest settable limit",
                source="`nvmlDeviceGetPowerManagementLimitConstraints` (mW)",
            ),
            counter(
                "energy_j",
                float,
                unit="J",
                help="**counter**: energy since the driver loaded (NVML reports mJ); resets only on driver reload",
                source="`NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, else `nvmlDeviceGetTotalEnergyConsumption` (mJ)",
            ),
            gauge(
                "temperature_c",
                int,
                unit="°C",
                help="GPU core temperature",
                source="`nvmlDeviceGetTemperatureV`, else `nvmlDeviceGetTemperature` (GPU)",
            ),
            gauge(
                "memory_temperature_c",
                int,
                unit="°C",
                help="memory (HBM) temperature, `NVML_FI_DEV_MEMORY_TEMP`; absent on cards without a memory sensor (GDDR)",
                source="`NVML_FI_DEV_MEMORY_TEMP`",
            ),
            gauge(
                "fan_speed_pct",
                int,
                unit="%",
                help="intended fan speed; absent on passively cooled cards (L40S, H100, A100)",
                source="`nvmlDeviceGetFanSpeed`",
            ),
            gauge(
                "temperature_shutdown_c",
                int,
                unit="°C",
                help="static threshold",
                source="`nvmlDeviceGetTemperatureThreshold` (SHUTDOWN)",
            ),
            gauge(
                "temperature_slowdown_c",
                int,
                unit="°C",
                help="static threshold",
                source="`nvmlDeviceGetTemperatureThreshold` (SLOWDOWN)",
            ),
            gauge(
                "temperature_gpu_max_c",
                int,
                unit="°C",
                help="static threshold",
                source="`nvmlDeviceGetTemperatureThreshold` (GPU_MAX)",
            ),
            gauge(
                "temperature_memory_max_c",
                int,
                unit="°C",
                help="static threshold",
                source="`nvmlDeviceGetTemperatureThreshold` (MEM_MAX)",
            ),
            gauge(
                "temperature_target_c",
                int,
                unit="°C",
                help='static: the target temperature set (nvidia-smi\'s "GPU Target Temperature"); absent where the card has none',
                source="`nvmlDeviceGetTemperatureThreshold` (ACOUSTIC_CURR)",
            ),
            gauge(
                "thermal_margin_c",
                int,
                unit="°C",
                help='**the thermal margin**: degrees left before the GPU reaches its max operating temperature (T.Limit 0; nvidia-smi\'s "GPU T.Limit Temp"); negative past it. Ada, Hopper, Blackwell only (nvml.h); one call per GPU every 30 s (on the ticks between, the field is left out). Alert on it falling to a few degrees',
                source="`nvmlDeviceGetMarginTemperature`",
            ),
            gauge(
                "temperature_shutdown_tlimit_c",
                int,
                unit="°C (T.Limit scale)",
                help="static: shutdown threshold relative to T.Limit 0 (H100 driver 590: -8, i.e. 8 °C past max operating). Ada and newer",
                source="`NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT`",
            ),
            gauge(
                "temperature_slowdown_tlimit_c",
                int,
                unit="°C (T.Limit scale)",
                help="static: HW slowdown threshold on the T.Limit scale (H100: -2). Ada and newer",
                source="`NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT`",
            ),
            gauge(
                "temperature_gpu_max_tlimit_c",
                int,
                unit="°C (T.Limit scale)",
                help="static: max operating on the T.Limit scale (0). Ada and newer",
                source="`NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT`",
            ),
            gauge(
                "temperature_memory_max_tlimit_c",
                int,
                unit="°C (T.Limit scale)",
                help="static: memory max operating on the T.Limit scale; HBM cards only (H100: 0)",
                source="`NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT`",
            ),
        ),
    ),
)
