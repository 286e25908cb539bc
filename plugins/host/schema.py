"""What the host plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, counter, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.HOST,
        (
            gauge("cpu_count", int, unit="CPUs", help="logical CPUs", source="psutil `cpu_count()`"),
            gauge(
                "cpu_usage_pct",
                float,
                unit="%",
                help="all CPUs, since the previous run; absent on a run within 0.2 s of start (`run --once`)",
                source="psutil `cpu_percent()`",
            ),
            counter("cpu_user_seconds_total", float, unit="s", help="counter", source="psutil `cpu_times()`"),
            counter("cpu_system_seconds_total", float, unit="s", help="counter", source="psutil `cpu_times()`"),
            counter(
                "cpu_iowait_seconds_total",
                float,
                unit="s",
                help="counter (0 where the OS has none)",
                source="psutil `cpu_times()`",
            ),
            gauge(
                "load1",
                float,
                unit="runnable tasks",
                help="load averages over 1, 5, 15 min",
                source="`os.getloadavg()`",
            ),
            gauge(
                "load5",
                float,
                unit="runnable tasks",
                help="load averages over 1, 5, 15 min",
                source="`os.getloadavg()`",
            ),
            gauge(
                "load15",
                float,
                unit="runnable tasks",
                help="load averages over 1, 5, 15 min",
                source="`os.getloadavg()`",
            ),
            gauge("mem_total_bytes", int, unit="bytes", source="psutil `virtual_memory()`"),
            gauge("mem_used_bytes", int, unit="bytes", source="psutil `virtual_memory()`"),
            gauge(
                "mem_available_bytes",
                int,
                unit="bytes",
                help="what can be given to processes without swapping",
                source="psutil `virtual_memory()`",
            ),
            gauge("swap_used_bytes", int, unit="bytes", source="psutil `swap_memory()`"),
            gauge("uptime_s", float, unit="s", help="since boot", source="psutil `boot_time()`"),
            gauge("processes", int, unit="count", source="psutil `pids()`"),
        ),
    ),
    Measurement(
        measurements.HOST_CPU,
        (
            gauge(
                "usage_pct", float, unit="%", help="since the previous run", source="psutil `cpu_percent(percpu=True)`"
            ),
        ),
        tags=("cpu",),
    ),
)
