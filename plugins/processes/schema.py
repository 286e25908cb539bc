"""What the processes plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.plugins.processes.attribution import OWNER_TAGS
from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, counter, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPU_PROCESS,
        (
            gauge(
                "used_memory_bytes",
                int,
                unit="bytes",
                help="GPU memory the process holds; absent when NVML cannot tell (no permission, WDDM)",
                source="`nvmlDeviceGetComputeRunningProcesses_v3` / `nvmlDeviceGetGraphicsRunningProcesses_v3` (`usedGpuMemory`)",
            ),
            gauge(
                "name",
                str,
                help="process name from /proc; for a pid /proc does not show (another PID namespace, a simulated card's) NVML's name, what nvidia-smi prints (asked once while the pid stays listed); absent when neither knows it (the process ended before it was read); a byte that is not UTF-8 reads `\\xff` (`train\\xffjob`)",
                source="psutil, else `nvmlSystemGetProcessName`",
            ),
            gauge("user", str, help="user name; absent when it cannot be read", source="psutil"),
            gauge("type", str, help="`C` (compute), `G` (graphics) or `C+G`", source="which of the two process lists"),
            gauge(
                "sm_util_pct",
                int,
                unit="%",
                help="the process's share of SM time in its newest sample",
                source="`nvmlDeviceGetProcessesUtilizationInfo`, else `nvmlDeviceGetProcessUtilization`",
            ),
            gauge(
                "mem_util_pct", int, unit="%", help="its share of memory-controller busy time", source="the same sample"
            ),
            gauge(
                "enc_util_pct", int, unit="%", help="its share of the video encoder / decoder", source="the same sample"
            ),
            gauge(
                "dec_util_pct", int, unit="%", help="its share of the video encoder / decoder", source="the same sample"
            ),
            gauge(
                "acct_gpu_util_pct",
                int,
                unit="%",
                help="accounting: mean GPU utilisation over the process's life",
                source="`nvmlDeviceGetAccountingStats`",
            ),
            gauge(
                "acct_mem_util_pct",
                int,
                unit="%",
                help="accounting: mean memory utilisation over its life",
                source="`nvmlDeviceGetAccountingStats`",
            ),
            gauge(
                "acct_max_memory_bytes",
                int,
                unit="bytes",
                help="accounting: the most GPU memory it held",
                source="`nvmlDeviceGetAccountingStats`",
            ),
            gauge(
                "acct_run_time_s",
                float,
                unit="s",
                help="accounting: how long it has run (or ran)",
                source="`nvmlDeviceGetAccountingStats` (ms)",
            ),
            gauge(
                "container_runtime",
                str,
                help="`containerd`, `cri-o` or `docker`, where the cgroup path names it",
                source="/proc/PID/cgroup",
            ),
            gauge(
                "attribution_missing",
                str,
                help="comma-separated reasons an owner look-up failed (see `gpu_attribution`); absent when none did",
                source="derived",
            ),
        ),
        tags=(
            "pid",
            "gi_id",
            "ci_id",
            *OWNER_TAGS,
            "k8s_namespace",
            "k8s_pod",
            "k8s_container",
        ),
    ),
    Measurement(
        measurements.GPU_JOB,
        (
            gauge(
                "processes",
                int,
                help="the job's processes on this GPU (0: the kubelet gave it a GPU it does not use yet)",
                source="derived",
            ),
            gauge(
                "used_memory_bytes",
                int,
                unit="bytes",
                help="GPU memory the job's processes hold here (their `used_memory_bytes`, summed)",
                source="derived",
            ),
            gauge(
                "sm_util_pct",
                int,
                unit="%",
                help="the job's processes' SM shares in their newest samples, summed (at most 100); absent without per-process samples",
                source="derived",
            ),
            gauge(
                "gpu_util_pct",
                int,
                unit="%",
                help="the GPU's own busy time; absent with MIG on",
                source="`nvmlDeviceGetUtilizationRates`",
            ),
            counter(
                "energy_j",
                float,
                unit="J",
                help="counter: the GPU's energy since the driver loaded (the same counter as `gpu_power`), so its increase over a job's series is the job's energy on that GPU; a GPU shared by two jobs at once is charged to both",
                source="`nvmlDeviceGetTotalEnergyConsumption` (mJ)",
            ),
            gauge(
                "idle_s",
                float,
                unit="s",
                help="how long the job has held this GPU without kernel activity: since the GPU's busy time (`gpu_util_pct`; with MIG on, the job's SM samples) was last above 0, or since the job was first seen here; 0 while it computes; absent with `idle_after = 0` or without either reading",
                source="derived",
            ),
            gauge(
                "allocated_idle",
                bool,
                help="`idle_s` reached `idle_after` (default 30 min): a GPU held and not used (alert `GpuAllocatedIdle`; `gpuagent compare` counts these GPU-hours)",
                source="derived",
            ),
        ),
        tags=(
            "slurm_job_id",
            "slurm_user",
            "slurm_account",
            "slurm_partition",
            "k8s_pod_uid",
            "k8s_namespace",
            "k8s_pod",
            "k8s_container",
        ),
    ),
    Measurement(
        measurements.GPU_ATTRIBUTION,
        (
            counter(
                "pid_vanished_total",
                int,
                unit="count",
                help="counter: the process ended before /proc could be read",
                source="/proc",
            ),
            counter(
                "environ_unreadable_total",
                int,
                unit="count",
                help="counter: on a host with Slurm (`scontrol` found), /proc/PID/environ refused (not root) and neither `scontrol listpids` nor the cgroup path named the job",
                source="/proc/PID/environ",
            ),
            counter(
                "slurm_listpids_failed_total",
                int,
                unit="count",
                help="counter: `scontrol listpids` failed (no slurmd, no permission, timeout) while needed",
                source="`scontrol listpids`",
            ),
            counter(
                "cgroup_unknown_layout_total",
                int,
                unit="count",
                help="counter: a cgroup path that looks like a container or pod but matches no known layout",
                source="/proc/PID/cgroup",
            ),
            counter(
                "cgroup_unreadable_total",
                int,
                unit="count",
                help="counter: /proc/PID/cgroup could not be read",
                source="/proc/PID/cgroup",
            ),
            counter(
                "kubelet_refused_total",
                int,
                unit="count",
                help="counter: the kubelet socket exists but refused the `List` call",
                source="kubelet pod-resources `List`",
            ),
            counter(
                "kubelet_timeout_total",
                int,
                unit="count",
                help="counter: `List` took longer than `kubelet_timeout`",
                source="kubelet pod-resources `List`",
            ),
        ),
    ),
)
