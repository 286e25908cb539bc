"""Per-process GPU use: utilisation samples and accounting statistics.

- nvmlDeviceGetProcessesUtilizationInfo (drivers from 550 on) or, where the driver lacks it,
  nvmlDeviceGetProcessUtilization: SM, memory, encoder and decoder percentages per process,
  for the samples newer than the last one read (the driver keeps a short ring of them).
  NOT_FOUND means no new sample since then (nvml.h), not a refusal: asked again next cycle.
- nvmlDeviceGetAccountingStats, only while nvmlDeviceGetAccountingMode says enabled: the
  driver's record of the process (mean GPU and memory utilisation over its life, its peak
  memory, run time).
"""

from __future__ import annotations

from dataclasses import dataclass

import pynvml

from gpuagent.gpu import Gpu, GpuLost
from gpuagent.nvml_read import poll, valid

# Codes after which a call is not asked again on that GPU: the driver or card lacks it.
_REFUSED = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
        getattr(pynvml, "NVML_ERROR_DEPRECATED", 26),
    }
)
_CALLS = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")


@dataclass(frozen=True)
class Sample:
    sm_util_pct: int | None
    mem_util_pct: int | None
    enc_util_pct: int | None
    dec_util_pct: int | None


def _sample_call(gpu: Gpu, name: str, last_seen: int):
    """Samples newer than ``last_seen``: a list, [] when none is new, None when refused."""
    key = (name, ())
    fn = getattr(pynvml, name, None)
    if fn is None or key in gpu.refused_calls:
        return None
    try:
        return fn(gpu.handle, last_seen)
    except pynvml.NVMLError as exc:
        code = exc.value
        if code == pynvml.NVML_ERROR_NOT_FOUND:
            return []
        if code == pynvml.NVML_ERROR_GPU_IS_LOST:
            gpu.mark_lost(str(exc))
            raise GpuLost(gpu) from exc
        if code in _REFUSED:
            gpu.refused_calls.add(key)
        return None  # refused, or transient (TIMEOUT, UNKNOWN): asked again next cycle


class ProcessUsage:
    """Per GPU: the newest utilisation sample of each process since the last cycle."""

    def __init__(self) -> None:
        self._last_seen: dict[int, int] = {}  # GPU index -> newest sample time (µs)

    def utilisation(self, gpu: Gpu) -> dict[int, Sample]:
        last = self._last_seen.get(gpu.index, 0)
        for name in _CALLS:
            samples = _sample_call(gpu, name, last)
            if samples is None:
                continue
            newest: dict[int, tuple[int, Sample]] = {}
            for s in samples:
                stamp = int(s.timeStamp)
                if stamp >= newest.get(s.pid, (-1, None))[0]:
                    newest[s.pid] = (
                        stamp,
                        Sample(_pct(s.smUtil), _pct(s.memUtil), _pct(s.encUtil), _pct(s.decUtil)),
                    )
                last = max(last, stamp)
            self._last_seen[gpu.index] = last
            return {pid: sample for pid, (_, sample) in newest.items()}
        return {}

    @staticmethod
    def accounting_on(gpu: Gpu) -> bool:
        """Accounting mode, asked once per GPU per cycle (`nvidia-smi -am` switches it live)."""
        return poll(gpu, pynvml.nvmlDeviceGetAccountingMode) == pynvml.NVML_FEATURE_ENABLED

    @staticmethod
    def accounting(gpu: Gpu, pid: int) -> dict[str, int | float]:
        """Accounting fields for ``pid`` (accounting mode on); {} when it has no record."""
        try:
            stats = pynvml.nvmlDeviceGetAccountingStats(gpu.handle, pid)
        except pynvml.NVMLError as exc:
            if exc.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                gpu.mark_lost(str(exc))
                raise GpuLost(gpu) from exc
            return {}  # NOT_FOUND: no record of this pid (yet, or the buffer dropped it)
        out: dict[str, int | float] = {}
        for name, value in (
            ("acct_gpu_util_pct", _pct(stats.gpuUtilization)),
            ("acct_mem_util_pct", _pct(stats.memoryUtilization)),
            ("acct_max_memory_bytes", valid(stats.maxMemoryUsage)),
        ):
            if value is not None:
                out[name] = value
        run_ms = valid(stats.time)
        if run_ms is not None:
            out["acct_run_time_s"] = run_ms / 1000.0
        return out

    def forget(self, gpu_index: int) -> None:
        self._last_seen.pop(gpu_index, None)


def _pct(value) -> int | None:
    value = valid(int(value))
    return value if value is not None and value <= 100 else None
