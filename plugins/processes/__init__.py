"""processes collector -> gpu_process (one point per process per GPU), gpu_job (one point per
GPU per job or pod holding it) and gpu_attribution (why an owner could not be read, counted).

NVML lists the compute and graphics processes on each GPU (the v3 lists, two calls each only
when a GPU has processes); psutil names the process and its user; attribution.py reads its
owner (Slurm job, Kubernetes pod and container, systemd unit) from /proc; usage.py adds its
utilisation samples and accounting record; kubelet.py asks the kubelet which pod holds each
GPU. ``pid`` is a tag: points are keyed by series and timestamp, so with pid as a field every
process on a GPU would overwrite the others.

Each cycle's list (GpuProcess: GPU, pid, MIG instance, owner tags) is published on the
agent's shared board as ``processes`` (gpuagent.service.shared), so the work collector attributes
work to GPUs and jobs without asking NVML again.

On a MIG GPU an unprivileged agent is refused the parent's process list (NO_PERMISSION, nvml.h);
then each MIG device handle is asked for its own instance's processes.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import psutil
import pynvml

import gpuagent
from gpuagent.gpus.gpu import GpuLost
from gpuagent.gpus.nvml_read import valid
from gpuagent.plugins.processes import kubelet as kubelet_api
from gpuagent.plugins.processes import slurm
from gpuagent.plugins.processes.attribution import OWNER_TAGS, PID_VANISHED, Attributor, Owner
from gpuagent.plugins.processes.schema import SCHEMA
from gpuagent.plugins.processes.usage import ProcessUsage
from gpuagent.schema.measurements import GPU_ATTRIBUTION, GPU_JOB, GPU_PROCESS
from gpuagent.service.timebase import monotonic_clock

KINDS = (
    (pynvml.nvmlDeviceGetComputeRunningProcesses_v3, "C"),
    (pynvml.nvmlDeviceGetGraphicsRunningProcesses_v3, "G"),
)
# The tags that make one gpu_job series: the first owner tag a process has picks its job.
JOB_KEYS = (
    ("slurm_job_id", ("slurm_job_id", "slurm_user", "slurm_account", "slurm_partition")),
    ("k8s_pod_uid", ("k8s_pod_uid",)),
)


# The cycle's process list is published under the collector's name (AgentContext.shared).
SHARED_NAME = "processes"


@dataclass(frozen=True)
class GpuProcess:
    """One process on one GPU (or MIG instance) this cycle, as the work collector reads it."""

    gpu: gpuagent.Gpu
    pid: int
    gi_id: int | None = None
    ci_id: int | None = None
    owner: dict[str, str] = field(default_factory=dict)  # OWNER_TAGS that are known
    sm_util_pct: float | None = None  # its SM share of the GPU this cycle, where NVML sampled it


class ProcessesConfig(gpuagent.CollectorConfig):
    # Also list graphics (display, OpenGL/Vulkan) processes, not only compute ones.
    graphics: bool = True
    # Read each process's owner (Slurm job, pod, container, unit) from /proc.
    attribution: bool = True
    # Per-process SM / memory / encoder / decoder utilisation samples.
    utilization: bool = True
    # NVML accounting statistics per process (only where accounting mode is on).
    accounting: bool = True
    # One gpu_job point per GPU per job or pod holding it.
    jobs: bool = True
    # The kubelet's pod-resources socket; "" never asks.
    kubelet_socket: str = kubelet_api.DEFAULT_SOCKET
    kubelet_timeout: gpuagent.Duration = 2.0
    # scontrol for `scontrol listpids` when a process's environment cannot be read;
    # None: found on PATH, "": never run.
    scontrol: str | None = None
    # A job or pod holding a GPU with no kernel activity (the GPU's busy time, else its processes'
    # SM samples, at 0) for this long is flagged allocated_idle on its gpu_job point; 0: never.
    idle_after: gpuagent.Duration = 1800.0


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


class HostProcesses:
    """Name, user and owner of a host process, from /proc (the stand-in `sim fleet` swaps in
    for its simulated jobs has the same two methods)."""

    def __init__(self, config: ProcessesConfig):
        self.names = ProcessNames()
        listpids = None if config.scontrol == "" else slurm.ListPids(config.scontrol)
        self.attributor = Attributor(listpids=listpids) if config.attribution else None

    def new_cycle(self) -> None:
        if self.attributor is not None:
            self.attributor.new_cycle()

    def describe(self, pid: int) -> tuple[dict[str, str] | None, Owner]:
        info = self.names(pid)
        if self.attributor is None:
            return info, Owner(reasons=[PID_VANISHED] if info is None else [])
        owner = self.attributor(pid) if info is not None else Owner(reasons=[PID_VANISHED])
        return info, owner

    def keep_only(self, pids: set[int]) -> None:
        self.names.keep_only(pids)
        if self.attributor is not None:
            self.attributor.keep_only(pids)


class ProcessesCollector(gpuagent.Collector):
    name = "processes"
    schema = SCHEMA
    requires_gpus = True
    Config = ProcessesConfig
    # What `host.describe(pid)` returns beside the process: a stand-in host (the simulated jobs) builds these too.
    Owner: TypeAlias = Owner

    def __init__(self, config, context):
        super().__init__(config, context)
        self.host = HostProcesses(config)
        self.usage = ProcessUsage()
        self.kubelet = (
            kubelet_api.PodResources(config.kubelet_socket, config.kubelet_timeout) if config.kubelet_socket else None
        )
        self.reasons: Counter[str] = Counter()  # since start, written as gpu_attribution
        self._pods: dict[str, list[kubelet_api.PodDevice]] = {}
        self._seen: set[int] = set()
        self._listed: list[GpuProcess] = []
        # pid -> NVML's name for a process /proc does not show (another PID namespace, a
        # simulated one), asked once while the pid stays listed.
        self._nvml_names: dict[int, str | None] = {}
        # (GPU index, job key) -> when it was last seen active (or first seen), on self.clock
        self._active_at: dict[tuple[int, Any], float] = {}
        self._held: set[tuple[int, Any]] = set()
        self.clock = monotonic_clock()

    def collect(self, acc: gpuagent.Accumulator) -> None:
        self._seen = set()
        self._listed = []
        self._held = set()
        self.host.new_cycle()
        self._pods = {}
        if self.kubelet is not None:
            pods = self.kubelet.devices()
            if pods is not None:
                # Time-sliced GPUs are offered as UUID::N replicas, maybe to several pods;
                # the GPU is the UUID.
                for dev, holder in pods.items():
                    held = self._pods.setdefault(dev.split("::")[0], [])
                    if holder not in held:
                        held.append(holder)
            elif self.kubelet.error:
                self.reasons[self.kubelet.error] += 1
        try:
            super().collect(acc)
        finally:
            self.context.shared.publish(SHARED_NAME, tuple(self._listed))
        self.host.keep_only(self._seen)
        for pid in self._nvml_names.keys() - self._seen:
            del self._nvml_names[pid]
        for gone in self._active_at.keys() - self._held:  # a job that let go of its GPU starts afresh
            del self._active_at[gone]
        if self.reasons:
            acc.add_fields(GPU_ATTRIBUTION, {f"{r}_total": n for r, n in sorted(self.reasons.items())})

    # -- names and the one-off read (inspect) ---------------------------------------------------
    def process_name(self, pid: int, info: dict[str, str] | None) -> str | None:
        """/proc's name of a process, else NVML's (nvmlSystemGetProcessName, what nvidia-smi
        prints) for a pid /proc does not show; None when neither knows it."""
        name = (info or {}).get("name")
        if name:
            return name
        if pid not in self._nvml_names:
            try:
                raw = pynvml.nvmlSystemGetProcessName(pid)
                self._nvml_names[pid] = (raw.decode(errors="replace") if isinstance(raw, bytes) else raw) or None
            except pynvml.NVMLError:
                self._nvml_names[pid] = None
        return self._nvml_names[pid]

    def read_gpu(self, gpu: gpuagent.Gpu) -> dict:
        """The GPU's processes for `inspect`, as nvidia-smi lists them: pid, type, name, memory
        (and the MIG instance), without owners or samples."""
        points = []
        for (pid, gi, ci), entry in sorted(self._lists(gpu).items(), key=lambda kv: (kv[0][1] or 0, kv[0][0])):
            info = self.host.names(pid)
            points.append(
                {
                    "pid": pid,
                    "gi_id": gi,
                    "ci_id": ci,
                    "type": "+".join(entry["kinds"]),
                    "name": self.process_name(pid, info),
                    "used_memory_bytes": entry["used"],
                }
            )
        return {GPU_PROCESS: {"points": points}}

    # -- the process lists ----------------------------------------------------------------------
    def _lists(self, gpu: gpuagent.Gpu) -> dict[tuple[int, int | None, int | None], dict]:
        """(pid, gi, ci) -> kinds and used bytes, from the GPU's handle or its MIG devices'."""
        found: dict[tuple[int, int | None, int | None], dict[str, Any]] = {}
        for fn, kind in KINDS:
            if kind == "G" and not self.config.graphics:
                continue
            procs = gpu.query(fn)
            if procs is None:
                procs = self._mig_lists(gpu, fn)
            for proc in procs or ():
                # 0xFFFFFFFF instance ids: not on a MIG instance.
                key = (proc.pid, valid(proc.gpuInstanceId), valid(proc.computeInstanceId))
                entry = found.setdefault(key, {"kinds": [], "used": None})
                if kind not in entry["kinds"]:
                    entry["kinds"].append(kind)
                used = valid(proc.usedGpuMemory)  # None on WDDM / without permission
                if used is not None:
                    entry["used"] = max(used, entry["used"] or 0)
        return found

    def _mig_lists(self, gpu: gpuagent.Gpu, fn) -> list | None:
        """The list from each MIG device handle, where the parent's was refused (unprivileged)."""
        modes = gpu.query(pynvml.nvmlDeviceGetMigMode)
        if not modes or int(modes[0]) != pynvml.NVML_DEVICE_MIG_ENABLE:
            return None
        count = gpu.static("max_mig_device_count", pynvml.nvmlDeviceGetMaxMigDeviceCount) or 0
        out: list = []
        for index in range(count):
            handle = gpu.query(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, index)
            if handle is None:
                continue
            try:
                procs = fn(handle)
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                    gpu.mark_lost(str(exc))
                    raise GpuLost(gpu) from exc
                continue
            mig_gi = gpu.remember(
                f"processes.mig_gi:{index}",
                lambda h=handle: valid(pynvml.nvmlDeviceGetGpuInstanceId(h)),
            )
            for proc in procs:
                if valid(proc.gpuInstanceId) is None and mig_gi is not None:
                    proc.gpuInstanceId = mig_gi  # the MIG handle's own instance
                out.append(proc)
        return out

    def _mig_holders(self, gpu: gpuagent.Gpu) -> dict[int, kubelet_api.PodDevice]:
        """GPU instance id -> the one container the kubelet gave that MIG device (by MIG UUID,
        as NVIDIA's device plugin names them with MIG on); asked only when it names any."""
        if not any(uuid.startswith("MIG-") for uuid in self._pods):
            return {}
        modes = gpu.query(pynvml.nvmlDeviceGetMigMode)
        if not modes or int(modes[0]) != pynvml.NVML_DEVICE_MIG_ENABLE:
            return {}
        count = gpu.static("max_mig_device_count", pynvml.nvmlDeviceGetMaxMigDeviceCount) or 0
        out: dict[int, kubelet_api.PodDevice] = {}
        for index in range(count):
            handle = gpu.query(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, index)
            if handle is None:
                continue
            try:
                uuid = pynvml.nvmlDeviceGetUUID(handle)
                held = self._pods.get(uuid.decode() if isinstance(uuid, bytes) else uuid)
                if held and len(held) == 1:
                    gi = valid(pynvml.nvmlDeviceGetGpuInstanceId(handle))
                    if gi is not None:
                        out[gi] = held[0]
            except pynvml.NVMLError:
                continue
        return out

    # -- points ---------------------------------------------------------------------------------
    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: gpuagent.Gpu) -> None:
        found = self._lists(gpu)
        holders = self._pods.get(gpu.uuid, [])
        # One container holds the GPU: its names go on every process here. Several (a
        # time-sliced GPU): which process is whose is unknown, so each only gets a gpu_job.
        holder = holders[0] if len(holders) == 1 else None
        mig_holders = self._mig_holders(gpu)
        if not found and not holders and not mig_holders:
            self.usage.forget(gpu.index)
            return
        utils = self.usage.utilisation(gpu) if self.config.utilization and found else {}
        accounting = self.config.accounting and bool(found) and self.usage.accounting_on(gpu)
        described: dict[int, tuple[dict[str, str] | None, Owner]] = {}
        jobs: dict[tuple, dict[str, Any]] = {}
        for (pid, gi, ci), entry in found.items():
            if pid not in described:
                described[pid] = self.host.describe(pid)
                self._seen.add(pid)
                for reason in described[pid][1].reasons:
                    self.reasons[reason] += 1
            info, owner = described[pid]
            tags = dict(gpu.tags, pid=str(pid))
            if gi is not None:
                tags["gi_id"] = str(gi)
            if ci is not None:
                tags["ci_id"] = str(ci)
            tags.update((k, owner.tags[k]) for k in OWNER_TAGS if k in owner.tags)
            sample = utils.get(pid)
            self._listed.append(
                GpuProcess(
                    gpu,
                    pid,
                    gi,
                    ci,
                    {k: owner.tags[k] for k in OWNER_TAGS if k in owner.tags},
                    sample.sm_util_pct if sample is not None else None,
                )  # fmt: skip
            )
            proc_holder = mig_holders.get(gi, holder) if gi is not None else holder
            if proc_holder is not None:
                tags.update(proc_holder.tags())
            fields: dict[str, Any] = {
                "used_memory_bytes": entry["used"],
                "name": self.process_name(pid, info),
                "user": (info or {}).get("user"),
                "type": "+".join(entry["kinds"]),
                "attribution_missing": ",".join(owner.reasons) or None,
                **owner.fields,
            }
            if sample is not None:
                fields.update(
                    sm_util_pct=sample.sm_util_pct,
                    mem_util_pct=sample.mem_util_pct,
                    enc_util_pct=sample.enc_util_pct,
                    dec_util_pct=sample.dec_util_pct,
                )
            if accounting:
                fields.update(self.usage.accounting(gpu, pid))
            acc.add_fields(GPU_PROCESS, fields, tags=tags)
            if self.config.jobs:
                self._add_to_job(jobs, owner, proc_holder, entry, sample)
        if self.config.jobs:
            # Containers the kubelet gave this GPU (or one of its MIG devices) that run nothing
            # here yet, or whose processes could not be told apart: a point each.
            idle = list(mig_holders.values())
            if holder is None or not jobs:
                idle += holders
            for h in idle:
                jobs.setdefault(("k8s", h), {"tags": h.tags(), "processes": 0, "used": 0, "sm": None})
            self._job_points(acc, gpu, jobs, holder)

    @staticmethod
    def _add_to_job(jobs, owner: Owner, holder, entry, sample) -> None:
        for key_tag, job_tags in JOB_KEYS:
            if key_tag in owner.tags:
                key = (key_tag, owner.tags[key_tag])
                tags = {t: owner.tags[t] for t in job_tags if t in owner.tags}
                break
        else:
            if holder is None:
                return  # a process of no job or pod (a desktop, a service): no gpu_job
            key, tags = ("k8s", holder), holder.tags()
        job = jobs.setdefault(key, {"tags": tags, "processes": 0, "used": 0, "sm": None})
        job["processes"] += 1
        job["used"] += entry["used"] or 0
        if sample is not None and sample.sm_util_pct is not None:
            job["sm"] = min(100, (job["sm"] or 0) + sample.sm_util_pct)

    def _job_points(self, acc, gpu: gpuagent.Gpu, jobs, holder) -> None:
        if not jobs:
            return
        # The GPU's own energy counter and busy time, on every job point of this GPU, so that a
        # job's energy is the increase of energy_j over its own series (see the README).
        energy_mj = valid(gpu.query(pynvml.nvmlDeviceGetTotalEnergyConsumption))
        rates = gpu.query(pynvml.nvmlDeviceGetUtilizationRates)
        gpu_util = valid(rates.gpu) if rates is not None else None
        pods = [k for k in jobs if k[0] == "k8s_pod_uid"]
        for key, job in jobs.items():
            tags = dict(gpu.tags, **job["tags"])
            # The kubelet names the one container holding this GPU: on the pod's point when
            # exactly one pod's processes run here (else on a point of its own).
            if holder is not None and len(pods) == 1 and key == pods[0]:
                tags.update(holder.tags())
            acc.add_fields(
                GPU_JOB,
                {
                    "processes": job["processes"],
                    "used_memory_bytes": job["used"],
                    "sm_util_pct": job["sm"],
                    "gpu_util_pct": gpu_util,
                    "energy_j": energy_mj / 1000.0 if energy_mj is not None else None,
                    **self._idle((gpu.index, key), gpu_util, job["sm"]),
                },
                tags=tags,
            )

    def _idle(self, key: tuple[int, Any], gpu_util: int | None, sm_util: int | None) -> dict[str, Any]:
        """idle_s (since the job's last kernel activity on this GPU, or since it was first seen
        holding it) and allocated_idle; nothing without evidence (no busy time, no samples)."""
        if not self.config.idle_after:
            return {}
        self._held.add(key)
        activity = gpu_util if gpu_util is not None else sm_util
        if activity is None:
            return {}
        now = self.clock()
        since = self._active_at.setdefault(key, now)
        if activity > 0:
            since = self._active_at[key] = now
        idle_s = now - since
        return {"idle_s": round(idle_s, 3), "allocated_idle": idle_s >= self.config.idle_after}


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(ProcessesCollector)
