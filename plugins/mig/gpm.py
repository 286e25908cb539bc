"""Moved to gpuagent.gpm (shared by memory, nvlink and mig); this name stays for old imports."""

from gpuagent.gpm import GPM_WARMUP_S, GpmSampler, GpmSamplers, gpm_supported, without_handle  # noqa: F401
