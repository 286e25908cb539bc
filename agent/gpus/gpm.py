"""GPM (GPU Performance Monitoring, Hopper and newer): metrics between two samples.

Shared by the memory (DRAM bandwidth, SM and tensor activity), mig (per GPU
instance utilisation) and nvlink (per link throughput) collectors. A sampler
keeps two NVML samples and alternates them: each read takes a new sample and
returns the metrics over the time since the previous one, so the first read
after start returns nothing. ``GpmSamplers.start_run``, the one set-up of the three
collectors, frees the samplers of sources gone since the last run and takes the first
samples of new ones, waiting once for all of them.
"""

from __future__ import annotations

import ctypes
import logging
import struct
import time
from collections.abc import Callable, Iterable
from typing import Any

import pynvml

from gpuagent.gpus.gpu import Gpu, GpuLost

log = logging.getLogger("gpuagent.gpus.gpm")

# The first run's wait between the priming sample and the first read. nvml.h: the interval
# between two nvmlGpmSampleGet() calls "should be greater than 100ms due to the internal sample
# refresh rate" (samples closer than that are refused), so strictly more than 100 ms, with a
# margin for clocks that tick (the simulator's real-time clock advances in 20 ms steps).
GPM_WARMUP_S = 0.12


def gpm_supported(gpu: Gpu) -> bool:
    """Whether the GPU offers GPM (read once and cached)."""

    def query_gpm_support(handle: Any) -> bool:
        return bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)

    query_gpm_support.__name__ = "nvmlGpmQueryDeviceSupport"  # what its refusals are counted under
    return bool(gpu.static("gpm_supported", query_gpm_support))


def without_handle(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adapt an NVML call that takes no device handle (sample allocation, metrics) to
    ``gpu.query``, so its errors follow the GPU's policy (counted, logged once, never raised)."""

    name = getattr(fn, "__name__", "nvml_call")

    def call(_handle: Any, *args: Any) -> Any:
        # Looked up when called, not kept: what wraps pynvml (the bench's recorder) sees the call.
        return getattr(pynvml, name, fn)(*args)

    call.__name__ = name
    return call


_SAMPLE_ALLOC = without_handle(pynvml.nvmlGpmSampleAlloc)
# nvmlGpmMetric_t as bytes: metricId, nvmlReturn (unsigned ints), value (double), then metricInfo
# (three pointers) left out; built from the ctypes layout, so a pynvml with another one is read right.
_M = pynvml.c_nvmlGpmMetric_t
_METRIC = struct.Struct(
    f"=I{_M.nvmlReturn.offset - 4}xI{_M.value.offset - _M.nvmlReturn.offset - 4}xd"
    f"{ctypes.sizeof(_M) - _M.value.offset - 8}x"
)
assert _M.metricId.offset == 0 and _METRIC.size == ctypes.sizeof(_M)
_METRICS_GET = without_handle(pynvml.nvmlGpmMetricsGet)


class GpmSampler:
    """Metrics from one sample source: a whole GPU or one GPU instance (MIG)."""

    def __init__(self, gpu: Gpu, gpu_instance_id: int | None = None):
        self.gpu = gpu
        self.gpu_instance_id = gpu_instance_id
        self._previous: Any = None
        self._current: Any = None
        self._have_previous = False
        self._requests: dict[tuple[int, ...], Any] = {}

    @property
    def primed(self) -> bool:
        """Holds an earlier sample: the next read returns metrics."""
        return self._have_previous

    def _take(self, sample: Any) -> Any:
        if self.gpu_instance_id is None:
            return self.gpu.query(pynvml.nvmlGpmSampleGet, sample)
        return self.gpu.query(pynvml.nvmlGpmMigSampleGet, self.gpu_instance_id, sample)

    def read(self, metric_ids: Iterable[int]) -> dict[int, float]:
        """Metric id -> value over the interval since the last read ({} on the first read).

        Raises GpuLost when the GPU is lost; metrics NVML refuses are left out.
        ``metric_ids`` may be empty: that only takes the earlier sample (priming).
        """
        metric_ids = list(metric_ids)
        if self._current is None:  # allocation refused: no GPM this time (asked again next time)
            self._previous = self._previous or self.gpu.query(_SAMPLE_ALLOC)
            self._current = self.gpu.query(_SAMPLE_ALLOC) if self._previous is not None else None
        taken = self._take(self._current) if self._current is not None else None
        if taken is None:
            self._have_previous = False
            return {}
        values: dict[int, float] = {}
        if self._have_previous and metric_ids:
            values = self._metrics(metric_ids)
        self._previous, self._current = self._current, self._previous
        self._have_previous = True
        return values

    def _metrics(self, metric_ids: list[int]) -> dict[int, float]:
        # The request (up to 98 metric slots) is built once per metric list and reused:
        # only the two samples change between cycles.
        key = tuple(metric_ids)
        request = self._requests.get(key)
        if request is None:
            request = pynvml.c_nvmlGpmMetricsGet_t()
            request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(metric_ids)
            for i, metric_id in enumerate(metric_ids):
                request.metrics[i].metricId = metric_id
            self._requests[key] = request
        request.sample1 = self._previous
        request.sample2 = self._current
        if self.gpu.query(_METRICS_GET, request) is None:
            return {}
        # The answers read as bytes (one struct pass), not as a ctypes object per metric.
        ok = pynvml.NVML_SUCCESS
        values = {}
        raw = ctypes.string_at(ctypes.addressof(request.metrics), _METRIC.size * len(metric_ids))
        for metric_id, code, value in _METRIC.iter_unpack(raw):
            if code == ok:
                values[metric_id] = value
            else:  # one metric refused: counted (logged once), the others kept
                self.gpu.note_error(f"nvmlGpmMetricsGet/{metric_id}", code)
        return values

    def close(self) -> None:
        for sample in (self._previous, self._current):
            if sample is not None:
                try:
                    pynvml.nvmlGpmSampleFree(sample)
                except pynvml.NVMLError:
                    pass
        self._previous = self._current = None
        self._have_previous = False


def whole_gpus(gpus: Iterable[Gpu], uses: Callable[[Gpu], bool]) -> list[tuple[Gpu, None]]:
    """The GPM sources of a collector that reads whole GPUs: those of `gpus` that `uses`
    (a GPU lost while asked is left out; its collector meets GpuLost when it reads it)."""
    sources = []
    for gpu in gpus:
        try:
            if uses(gpu):
                sources.append((gpu, None))
        except GpuLost:
            continue
    return sources


class GpmSamplers:
    """One sampler per source, created on first use, freed on close()."""

    def __init__(self) -> None:
        self._samplers: dict[tuple[str, int | None], GpmSampler] = {}

    def has(self, gpu: Gpu, gpu_instance_id: int | None = None) -> bool:
        """Whether this source already holds an earlier sample (so a read now returns metrics)."""
        sampler = self._samplers.get((gpu.uuid, gpu_instance_id))
        return sampler is not None and sampler.primed

    def read(self, gpu: Gpu, metric_ids: Iterable[int], gpu_instance_id: int | None = None) -> dict[int, float]:
        key = (gpu.uuid, gpu_instance_id)
        sampler = self._samplers.get(key)
        if sampler is None:
            sampler = self._samplers[key] = GpmSampler(gpu, gpu_instance_id)
        return sampler.read(metric_ids)

    def warm_up(self, sources: Iterable[tuple[Gpu, int | None]], seconds: float) -> bool:
        """Take the earlier sample of every source (GPU, GPU instance or None) that has none,
        then wait ``seconds`` once for all of them, so the run's reads return metrics.
        A GPU lost meanwhile is skipped (its collector meets GpuLost when it reads it).
        Returns whether it waited."""
        primed = False
        for gpu, gpu_instance_id in sources:
            if gpu.lost or self.has(gpu, gpu_instance_id):
                continue
            try:
                self.read(gpu, (), gpu_instance_id)
            except GpuLost:
                continue
            primed = primed or self.has(gpu, gpu_instance_id)  # no sample taken: no wait
        if primed:
            time.sleep(seconds)
        return primed

    def start_run(self, sources: Iterable[tuple[Gpu, int | None]], seconds: float) -> bool:
        """A collector's GPM set-up at the start of a run, given the sources it reads this run:
        free the samplers of the sources not among them (a lost GPU, a destroyed GPU
        instance), then warm up the new ones (see warm_up). Returns whether it waited."""
        sources = list(sources)
        keep = {(gpu.uuid, gpu_instance_id) for gpu, gpu_instance_id in sources}
        self.forget(lambda uuid, gpu_instance_id: (uuid, gpu_instance_id) in keep)
        return self.warm_up(sources, seconds)

    def __len__(self) -> int:
        return len(self._samplers)

    def forget(self, keep: Callable[[str, int | None], bool]) -> None:
        """Free the samplers of sources that are gone (a destroyed GPU instance, a lost GPU)."""
        for key in [k for k in self._samplers if not keep(*k)]:
            self._samplers.pop(key).close()

    def close(self) -> None:
        for sampler in self._samplers.values():
            sampler.close()
        self._samplers.clear()
