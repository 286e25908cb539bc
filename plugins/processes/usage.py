"""Per-process GPU use: utilisation samples and accounting statistics.

- nvmlDeviceGetProcessesUtilizationInfo (drivers from 550 on) or, where the driver lacks it,
  nvmlDeviceGetProcessUtilization: SM, memory, encoder and decoder percentages per process,
  for the samples newer than the last one read (the driver keeps a short ring of them).
  NOT_FOUND means no new sample since then (nvml.h), not a refusal: asked again next cycle.
  Every call goes through the agent's NVML error policy (Gpu.query).
- nvmlDeviceGetAccountingStats, only while nvmlDeviceGetAccountingMode says enabled: the
  driver's record of the process (mean GPU and memory utilisation over its life, its peak
  memory, run time).
"""

from __future__ import annotations

from dataclasses import dataclass

import pynvml

from gpuagent.gpus.gpu import Gpu
from gpuagent.gpus.nvml_read import valid
from gpuagent.service.timebase import monotonic_clock

ACCOUNTING_REFRESH_S = 30.0  # how stale the accounting mode may be

_CALLS = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")


@dataclass(frozen=True)
class Sample:
    sm_util_pct: int | None
    mem_util_pct: int | None
    enc_util_pct: int | None
    dec_util_pct: int | None


def _sample_call(gpu: Gpu, name: str, last_seen: int, refused: set[tuple[int, str]]):
    """Samples newer than ``last_seen`` (through the NVML error policy): a list (empty when
    there is none new), or None when the driver lacks the call, refused it for good or
    answered a transient error (then the older call is tried).

    NOT_FOUND is nvml.h's "no sample since then", an answer, so it does not fall through to
    the older call. The argument changes every cycle, so the policy's per-(call, args) memory
    cannot remember a refusal here: the name is remembered per GPU instead.
    """
    fn = getattr(pynvml, name, None)
    if fn is None or (gpu.index, name) in refused:
        return None
    transient_before = gpu.transient_errors
    samples = gpu.query(fn, last_seen)
    if samples is None:
        if gpu.refused(fn, last_seen):
            refused.add((gpu.index, name))
            return None
        if gpu.transient_errors > transient_before:
            return None  # TIMEOUT, UNKNOWN ...: this cycle the older call may still answer
        return []  # NOT_FOUND: nothing new since last_seen
    return samples


class ProcessUsage:
    """Per GPU: the newest utilisation sample of each process since the last cycle."""

    def __init__(self) -> None:
        self._last_seen: dict[int, int] = {}  # GPU index -> newest sample time (µs)
        self._refused: set[tuple[int, str]] = set()  # (GPU index, call) refused for good
        self._accounting: dict[int, tuple[float, bool]] = {}  # GPU index -> (asked at, on)
        self._clock = monotonic_clock()

    def utilisation(self, gpu: Gpu) -> dict[int, Sample]:
        last = self._last_seen.get(gpu.index, 0)
        for name in _CALLS:
            samples = _sample_call(gpu, name, last, self._refused)
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

    def accounting_on(self, gpu: Gpu) -> bool:
        """Accounting mode, asked at most every ACCOUNTING_REFRESH_S per GPU: `nvidia-smi -am`
        switches it live, but an operator's switch need not cost a call every cycle."""
        now = self._clock()
        asked = self._accounting.get(gpu.index)
        if asked is None or now - asked[0] >= ACCOUNTING_REFRESH_S:
            on = gpu.query(pynvml.nvmlDeviceGetAccountingMode) == pynvml.NVML_FEATURE_ENABLED
            asked = self._accounting[gpu.index] = (now, on)
        return asked[1]

    @staticmethod
    def accounting(gpu: Gpu, pid: int) -> dict[str, int | float]:
        """Accounting fields for ``pid`` (accounting mode on); {} when it has no record
        (NOT_FOUND: not yet, or the driver's buffer dropped it) or the driver refused."""
        stats = gpu.query(pynvml.nvmlDeviceGetAccountingStats, pid)
        if stats is None:
            return {}
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
