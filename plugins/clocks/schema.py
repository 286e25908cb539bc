"""What the clocks plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, counter, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPU_CLOCKS,
        (
            gauge(
                "graphics_clock_mhz",
                int,
                unit="MHz",
                help='current graphics clock; 0 is a reading (a card at P8 may park graphics and SM at 0 MHz), not "unknown"',
                source="`nvmlDeviceGetClockInfo` (GRAPHICS)",
            ),
            gauge("sm_clock_mhz", int, unit="MHz", help="current SM clock", source="`nvmlDeviceGetClockInfo` (SM)"),
            gauge(
                "memory_clock_mhz",
                int,
                unit="MHz",
                help="current memory clock",
                source="`nvmlDeviceGetClockInfo` (MEM)",
            ),
            gauge(
                "video_clock_mhz",
                int,
                unit="MHz",
                help="current video (encoder/decoder) clock",
                source="`nvmlDeviceGetClockInfo` (VIDEO)",
            ),
            gauge(
                "max_graphics_clock_mhz",
                int,
                unit="MHz",
                help="static",
                source="`nvmlDeviceGetMaxClockInfo` (GRAPHICS)",
            ),
            gauge("max_sm_clock_mhz", int, unit="MHz", help="static", source="`nvmlDeviceGetMaxClockInfo` (SM)"),
            gauge("max_memory_clock_mhz", int, unit="MHz", help="static", source="`nvmlDeviceGetMaxClockInfo` (MEM)"),
            gauge("max_video_clock_mhz", int, unit="MHz", help="static", source="`nvmlDeviceGetMaxClockInfo` (VIDEO)"),
            gauge(
                "applications_graphics_clock_mhz",
                int,
                unit="MHz",
                help="applications clock target; absent where the card has none (GeForce, L40S)",
                source="`nvmlDeviceGetApplicationsClock` (GRAPHICS)",
            ),
            gauge(
                "applications_memory_clock_mhz",
                int,
                unit="MHz",
                help="same",
                source="`nvmlDeviceGetApplicationsClock` (MEM)",
            ),
            gauge(
                "pstate",
                int,
                unit="0-15",
                help="performance state (0 = fastest); absent when NVML says unknown",
                source="`nvmlDeviceGetPerformanceState`",
            ),
            gauge(
                "clock_event_reasons",
                int,
                unit="bitmask",
                help="current reasons, NVML's `nvmlClocksEventReason*` bits",
                source="`nvmlDeviceGetCurrentClocksEventReasons`",
            ),
            gauge(
                "clock_event_reasons_supported",
                int,
                unit="bitmask",
                help="static: the reasons this card can report",
                source="`nvmlDeviceGetSupportedClocksEventReasons`",
            ),
            gauge(
                "idle", bool, help="0x1: nothing running, clocks idle", source="derived: a bit of `clock_event_reasons`"
            ),
            gauge(
                "applications_setting",
                bool,
                help="0x2: held by the applications clocks setting",
                source="derived: a bit of `clock_event_reasons`",
            ),
            gauge(
                "sw_power_cap",
                bool,
                help="0x4: the power limit holds clocks down",
                source="derived: a bit of `clock_event_reasons`",
            ),
            gauge(
                "hw_slowdown",
                bool,
                help="0x8: hardware slowdown (thermal or power brake, either)",
                source="derived: a bit of `clock_event_reasons`",
            ),
            gauge(
                "sync_boost",
                bool,
                help="0x10: held to match other GPUs in a sync-boost group",
                source="derived: a bit of `clock_event_reasons`",
            ),
            gauge(
                "sw_thermal_slowdown",
                bool,
                help="0x20: driver keeps temperature under its target",
                source="derived: a bit of `clock_event_reasons`",
            ),
            gauge(
                "hw_thermal_slowdown",
                bool,
                help="0x40: hardware thermal slowdown",
                source="derived: a bit of `clock_event_reasons`",
            ),
            gauge(
                "hw_power_brake_slowdown",
                bool,
                help="0x80: external power brake (e.g. the PSU)",
                source="derived: a bit of `clock_event_reasons`",
            ),
            gauge(
                "display_clock_setting",
                bool,
                help="0x100: held by the display clock setting",
                source="derived: a bit of `clock_event_reasons`",
            ),
            counter(
                "sw_power_cap_time_ns",
                int,
                unit="ns",
                help="**counter**: time held by the power cap since the driver loaded",
                source="`NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP`",
            ),
            counter(
                "sync_boost_time_ns",
                int,
                unit="ns",
                help="**counter**",
                source="`NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST`",
            ),
            counter(
                "sw_thermal_slowdown_time_ns",
                int,
                unit="ns",
                help="**counter**",
                source="`NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN`",
            ),
            counter(
                "hw_thermal_slowdown_time_ns",
                int,
                unit="ns",
                help="**counter**",
                source="`NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN`",
            ),
            counter(
                "hw_power_brake_slowdown_time_ns",
                int,
                unit="ns",
                help="**counter**",
                source="`NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN`",
            ),
            counter(
                "board_limit_violation_time_ns",
                int,
                unit="ns",
                help="**counter**: time held below application clocks by the board limit (DCGM's `BOARD_LIMIT_VIOLATION`); where the reason counters answer (Turing and newer), in the cycle batch",
                source="`NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT`",
            ),
            counter(
                "low_util_violation_time_ns",
                int,
                unit="ns",
                help="**counter**: time held below application clocks by low utilisation (DCGM's `LOW_UTIL_VIOLATION`)",
                source="`NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION`",
            ),
            counter(
                "reliability_violation_time_ns",
                int,
                unit="ns",
                help="**counter**: time held below application clocks by the board's reliability limit (DCGM's `RELIABILITY_VIOLATION`)",
                source="`NVML_FI_DEV_PERF_POLICY_RELIABILITY`",
            ),
        ),
    ),
)
