"""processes collector -> gpu_process: one point per process per GPU.

NVML lists the compute and graphics processes on each GPU (the v3 lists, two
calls each only when a GPU has processes); psutil names the process and its
user. A process that ended between NVML's list and psutil's look-up is
skipped. ``pid`` is a tag: points are keyed by series and timestamp, so with
pid as a field every process on a GPU would overwrite the others.
"""

from __future__ import annotations

import os
from typing import Any

import psutil
import pynvml

import gpuagent
from gpuagent.nvml_read import poll, valid

KINDS = (
    (pynvml.nvmlDeviceGetComputeRunningProcesses_v3, "C"),
    (pynvml.nvmlDeviceGetGraphicsRunningProcesses_v3, "G"),
)


class ProcessesConfig(gpuagent.CollectorConfig):
    # Also list graphics (display, OpenGL/Vulkan) processes, not only compute ones.
    graphics: bool = True


def describe(pid: int) -> dict[str, str] | None:
    """Name and user of a live process; None when it is gone."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            info = {"name": proc.name()}
            try:
                info["user"] = proc.username()
            except (psutil.AccessDenied, KeyError):  # KeyError: a uid with no passwd entry
                pass
        return info
    except psutil.NoSuchProcess:  # ZombieProcess included: it no longer runs anything
        return None
    except psutil.AccessDenied:
        return {}


class ProcessNames:
    """describe() with a memory. /proc/PID's inode time is set when the process's
    entry appears, so an unchanged one means the same process: a stat() instead of
    the three /proc reads psutil needs for name and user."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[int, dict[str, str]]] = {}

    def __call__(self, pid: int) -> dict[str, str] | None:
        try:
            stamp = os.stat(f"/proc/{pid}").st_ctime_ns
        except FileNotFoundError:
            self._known.pop(pid, None)
            return None
        except OSError:
            return describe(pid)
        known = self._known.get(pid)
        if known is not None and known[0] == stamp:
            return known[1]
        info = describe(pid)
        if info is not None:
            self._known[pid] = (stamp, info)
        return info

    def keep_only(self, pids: set[int]) -> None:
        for pid in self._known.keys() - pids:
            del self._known[pid]


class ProcessesCollector(gpuagent.Collector):
    name = "processes"
    requires_gpus = True
    Config = ProcessesConfig

    def __init__(self, config, context):
        super().__init__(config, context)
        self._names = ProcessNames()
        self._seen: set[int] = set()

    def collect(self, acc: gpuagent.Accumulator) -> None:
        self._seen = set()
        super().collect(acc)
        self._names.keep_only(self._seen)

    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: gpuagent.Gpu) -> None:
        # (pid, gi, ci) -> kinds and used bytes. A process can be both compute and graphics;
        # on a MIG GPU the parent's list holds every instance's processes, each with its gi/ci.
        found: dict[tuple[int, int | None, int | None], dict[str, Any]] = {}
        for fn, kind in KINDS:
            if kind == "G" and not self.config.graphics:
                continue
            for proc in poll(gpu, fn) or ():
                # 0xFFFFFFFF instance ids: not on a MIG instance.
                key = (proc.pid, valid(proc.gpuInstanceId), valid(proc.computeInstanceId))
                entry = found.setdefault(key, {"kinds": [], "used": None})
                if kind not in entry["kinds"]:
                    entry["kinds"].append(kind)
                used = valid(proc.usedGpuMemory)  # None on WDDM / without permission
                if used is not None:
                    entry["used"] = max(used, entry["used"] or 0)
        described: dict[int, dict[str, str] | None] = {}
        for (pid, gi, ci), entry in found.items():
            if pid not in described:
                described[pid] = self._names(pid)
                self._seen.add(pid)
            info = described[pid]
            if info is None:
                continue
            tags = dict(gpu.tags, pid=str(pid))
            if gi is not None:
                tags["gi_id"] = str(gi)
            if ci is not None:
                tags["ci_id"] = str(ci)
            acc.add_fields(
                "gpu_process",
                {
                    "used_memory_bytes": entry["used"],
                    "name": info.get("name"),
                    "user": info.get("user"),
                    "type": "+".join(entry["kinds"]),
                },
                tags=tags,
            )


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(ProcessesCollector)
