"""The stream's measurement names, one constant each: collectors write under them, and compare,
top, health and inspect read them (a renamed measurement is one edit here)."""

from __future__ import annotations

GPU_CLOCKS = "gpu_clocks"
GPU_POWER = "gpu_power"
GPU_POWER_HIST = "gpu_power_hist"  # rollups only: the power histogram behind the p95 (compare)
GPU_MEMORY = "gpu_memory"
GPU_PCIE = "gpu_pcie"
GPU_P2P = "gpu_p2p"
GPU_NVLINK = "gpu_nvlink"
GPU_MIG = "gpu_mig"
GPU_VGPU = "gpu_vgpu"
GPU_HEALTH = "gpu_health"
GPU_INVENTORY = "gpu_inventory"
GPU_ACTION = "gpu_action"
GPU_PROCESS = "gpu_process"
GPU_JOB = "gpu_job"
GPU_ATTRIBUTION = "gpu_attribution"
GPU_INFO = "gpu_info"
GPU_WORK = "gpu_work"
GPU_L2_PROBE = "gpu_l2_probe"
HOST = "host"
HOST_CPU = "host_cpu"
GPUAGENT = "gpuagent"
