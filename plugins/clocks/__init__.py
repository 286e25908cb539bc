"""clocks collector -> gpu_clocks: current, max and applications clocks, P-state, clock-event reasons.

Static facts (max clocks, the reasons the card supports) are read once per
GPU. Per cycle: four current clocks, two applications clocks, the P-state,
the current reasons mask and the per-reason time counters the card supports,
in the cycle's one field-values call per GPU (shared with power).
"""

from __future__ import annotations

import pynvml

import gpuagent
from gpuagent.gpus.nvml_read import CYCLE, Field, FieldReader, poll_first, valid
from gpuagent.plugins.clocks.schema import SCHEMA
from gpuagent.schema.measurements import GPU_CLOCKS

# (clock type, field stem) for nvmlDeviceGetClockInfo / nvmlDeviceGetMaxClockInfo.
CLOCKS = (
    (pynvml.NVML_CLOCK_GRAPHICS, "graphics"),
    (pynvml.NVML_CLOCK_SM, "sm"),
    (pynvml.NVML_CLOCK_MEM, "memory"),
    (pynvml.NVML_CLOCK_VIDEO, "video"),
)
APPLICATIONS_CLOCKS = ((pynvml.NVML_CLOCK_GRAPHICS, "graphics"), (pynvml.NVML_CLOCK_MEM, "memory"))
# The field names, spelled once (not an f-string a field a GPU a cycle).
_CURRENT = tuple((clock_type, f"{stem}_clock_mhz") for clock_type, stem in CLOCKS)
_MAX = tuple((clock_type, f"max_{stem}_clock_mhz") for clock_type, stem in CLOCKS)
_APPLICATIONS = tuple((clock_type, f"applications_{stem}_clock_mhz") for clock_type, stem in APPLICATIONS_CLOCKS)

# Clock-event (throttle) reason bit -> boolean field name.
REASONS = {
    pynvml.nvmlClocksEventReasonGpuIdle: "idle",
    pynvml.nvmlClocksEventReasonApplicationsClocksSetting: "applications_setting",
    pynvml.nvmlClocksEventReasonSwPowerCap: "sw_power_cap",
    pynvml.nvmlClocksEventReasonHwSlowdown: "hw_slowdown",
    pynvml.nvmlClocksEventReasonSyncBoost: "sync_boost",
    pynvml.nvmlClocksEventReasonSwThermalSlowdown: "sw_thermal_slowdown",
    pynvml.nvmlClocksEventReasonHwThermalSlowdown: "hw_thermal_slowdown",
    pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown: "hw_power_brake_slowdown",
    pynvml.nvmlClocksEventReasonDisplayClockSetting: "display_clock_setting",
}

# Time spent clock-limited for each reason, in ns since the driver loaded (counters).
REASON_TIME_FIELDS = FieldReader(
    {
        "sw_power_cap_time_ns": Field(pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP),
        "sync_boost_time_ns": Field(pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST),
        "sw_thermal_slowdown_time_ns": Field(pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN),
        "hw_thermal_slowdown_time_ns": Field(pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN),
        "hw_power_brake_slowdown_time_ns": Field(pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN),
        # The violation counters DCGM reads (DCGM_FI_DEV_BOARD_LIMIT_VIOLATION, LOW_UTIL_,
        # RELIABILITY_): nvml.h's perf-policy fields, the family the reason fields above alias
        # (NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP = NVML_FI_DEV_PERF_POLICY_POWER).
        "board_limit_violation_time_ns": Field(pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT),
        "low_util_violation_time_ns": Field(pynvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION),
        "reliability_violation_time_ns": Field(pynvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY),
    },
    group=CYCLE,  # one field-values call per GPU per cycle with power's readings
)

MEASUREMENT = GPU_CLOCKS

PSTATE_UNKNOWN = pynvml.NVML_PSTATE_UNKNOWN

# Newest spelling first; the deprecated ones leave pynvml with CUDA 14.
SUPPORTED_REASONS_CALLS = (
    "nvmlDeviceGetSupportedClocksEventReasons",
    "nvmlDeviceGetSupportedClocksThrottleReasons",
)
CURRENT_REASONS_CALLS = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)
APPLICATIONS_CLOCK_CALLS = ("nvmlDeviceGetApplicationsClock",)


def max_clock_mhz(gpu: gpuagent.Gpu, clock_type: int) -> int | None:
    """The card's max clock (static; shared with the memory collector's peak bandwidth)."""
    return valid(
        gpu.static(f"max_clock.{clock_type}", pynvml.nvmlDeviceGetMaxClockInfo, clock_type),
        zero=False,
    )


def supported_reasons(gpu: gpuagent.Gpu) -> int | None:
    """The reasons mask the card can report (static). None: the card reports no reasons."""
    # Drivers before r535 only have the "throttle" spelling.
    return gpu.remember(
        "clock_event_reasons.supported",
        lambda: valid(poll_first(gpu, SUPPORTED_REASONS_CALLS)),
    )


def current_reasons(gpu: gpuagent.Gpu) -> int | None:
    return valid(poll_first(gpu, CURRENT_REASONS_CALLS))


def read_gpu(gpu: gpuagent.Gpu) -> dict[str, int | float | bool | None]:
    """One GPU's gpu_clocks fields (what the collector emits and `inspect` shows)."""
    fields: dict[str, int | float | bool | None] = {}
    for clock_type, name in _CURRENT:
        # 0 MHz is a reading: a card at P8 may park its graphics and SM clocks at 0 (NVML says
        # "not available" with an error code, which gpu.query turns into None).
        fields[name] = valid(gpu.query(pynvml.nvmlDeviceGetClockInfo, clock_type))
    for clock_type, name in _MAX:
        fields[name] = max_clock_mhz(gpu, clock_type)
    for clock_type, name in _APPLICATIONS:
        fields[name] = valid(poll_first(gpu, APPLICATIONS_CLOCK_CALLS, clock_type), zero=False)
    pstate = gpu.query(pynvml.nvmlDeviceGetPerformanceState)
    fields["pstate"] = None if pstate is None or pstate == PSTATE_UNKNOWN else valid(pstate)

    supported = supported_reasons(gpu)
    if supported is not None:
        fields["clock_event_reasons_supported"] = supported
        current = current_reasons(gpu)
        if current is not None:
            fields["clock_event_reasons"] = current
            for bit, name in REASONS.items():
                if supported & bit:
                    fields[name] = bool(current & bit)
    fields.update(REASON_TIME_FIELDS.read(gpu))
    return fields


class ClocksCollector(gpuagent.Collector):
    name = "clocks"
    schema = SCHEMA
    requires_gpus = True

    def read_gpu(self, gpu: gpuagent.Gpu) -> dict:
        return {MEASUREMENT: read_gpu(gpu)}

    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: gpuagent.Gpu) -> None:
        acc.add_fields(MEASUREMENT, read_gpu(gpu), tags=gpu.tags)


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(ClocksCollector)
