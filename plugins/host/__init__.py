"""host collector: the machine around the GPUs (CPU, memory, load, uptime) through psutil."""

from __future__ import annotations

import os
import time

import psutil

import gpuagent
from gpuagent.plugins.host.schema import SCHEMA
from gpuagent.schema.measurements import HOST, HOST_CPU


class HostConfig(gpuagent.CollectorConfig):
    per_cpu: bool = False


class HostCollector(gpuagent.Collector):
    name = "host"
    schema = SCHEMA
    Config = HostConfig

    def __init__(self, config, context):
        super().__init__(config, context)
        # cpu_percent(None) measures since the previous call; prime it so the first run is meaningful.
        psutil.cpu_percent(interval=None, percpu=config.per_cpu)
        self._boot = psutil.boot_time()
        self._primed = time.monotonic()

    def collect(self, acc: gpuagent.Accumulator) -> None:
        mem = psutil.virtual_memory()
        swap = psutil.swap_memory()
        load1, load5, load15 = os.getloadavg()
        cpu = psutil.cpu_times()
        # Too soon after priming (run --once) the percentage means nothing: leave it out.
        usage = psutil.cpu_percent(interval=None)
        if time.monotonic() - self._primed < 0.2:
            usage = None
        self._primed = 0.0
        acc.add_fields(
            HOST,
            {
                "cpu_count": psutil.cpu_count() or 0,
                "cpu_usage_pct": None if usage is None else float(usage),
                "cpu_user_seconds_total": float(cpu.user),
                "cpu_system_seconds_total": float(cpu.system),
                "cpu_iowait_seconds_total": float(getattr(cpu, "iowait", 0.0)),
                "load1": float(load1),
                "load5": float(load5),
                "load15": float(load15),
                "mem_total_bytes": mem.total,
                "mem_used_bytes": mem.used,
                "mem_available_bytes": mem.available,
                "swap_used_bytes": swap.used,
                "uptime_s": float(round(time.time() - self._boot, 3)),
                "processes": len(psutil.pids()),
            },
        )
        if self.config.per_cpu:
            for i, pct in enumerate(psutil.cpu_percent(interval=None, percpu=True)):
                acc.add_fields(HOST_CPU, {"usage_pct": float(pct)}, tags={"cpu": str(i)})


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(HostCollector)
