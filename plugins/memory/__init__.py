"""memory collector -> gpu_memory: framebuffer, BAR1, utilisation, GPM DRAM bandwidth, L2, GPM activity.

Static facts, read once per GPU: bus width, max memory clock, the peak DRAM
bandwidth derived from them, the L2 size (CUDA driver, else the published
figures in gpuagent.gpus.specs) and GPM support. Per cycle: memory info (v2),
BAR1, utilisation rates, and on GPM cards (Hopper and newer) one GPM sample
plus one metrics call over the interval since the previous sample. DRAM
bandwidth (``dram_bw_*``) comes only from GPM; NVML's memory utilisation is
busy time and keeps its own name, ``memory_util_pct``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import pynvml

import gpuagent
from gpuagent.gpus import cuda_attrs, specs
from gpuagent.gpus.gpm import GPM_WARMUP_S, GpmSamplers, gpm_supported, whole_gpus
from gpuagent.gpus.nvml_read import due, raw, valid
from gpuagent.plugins.memory.schema import SCHEMA
from gpuagent.schema.measurements import GPU_MEMORY

log = logging.getLogger("gpuagent.collector.memory")

MEASUREMENT = GPU_MEMORY

# GPM metric -> field (all percentages, 0-100, over the interval between two samples).
GPM_METRICS = {
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_bw_util_pct",
    pynvml.NVML_GPM_METRIC_SM_UTIL: "sm_active_pct",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy_pct",
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_active_pct",
    pynvml.NVML_GPM_METRIC_FP16_UTIL: "fp16_active_pct",
    pynvml.NVML_GPM_METRIC_FP32_UTIL: "fp32_active_pct",
    pynvml.NVML_GPM_METRIC_FP64_UTIL: "fp64_active_pct",
    # The GPM metrics dcgm-exporter's profiling counters read (DCGM_FI_PROF_GR_ENGINE_ACTIVE,
    # PIPE_*_ACTIVE) that were not read before issue 32.
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: "graphics_active_pct",
    pynvml.NVML_GPM_METRIC_INTEGER_UTIL: "integer_active_pct",
    pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL: "hmma_tensor_active_pct",
    pynvml.NVML_GPM_METRIC_IMMA_TENSOR_UTIL: "imma_tensor_active_pct",
    pynvml.NVML_GPM_METRIC_DFMA_TENSOR_UTIL: "dfma_tensor_active_pct",
}


# Video and optical-flow engines (nvml.h NVML_GPM_METRIC_NVDEC_0_UTIL ... NVOFA_1_UTIL): one
# field each, the mean over the card's engines (H100: 7 NVDEC, 7 NVJPG, 1 NVOFA).
ENGINE_METRICS = {
    "nvdec_active_pct": tuple(range(pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL, pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL + 8)),
    "nvjpg_active_pct": tuple(range(pynvml.NVML_GPM_METRIC_NVJPG_0_UTIL, pynvml.NVML_GPM_METRIC_NVJPG_0_UTIL + 8)),
    "nvofa_active_pct": tuple(range(pynvml.NVML_GPM_METRIC_NVOFA_0_UTIL, pynvml.NVML_GPM_METRIC_NVOFA_0_UTIL + 2)),
}
ENGINE_METRIC_IDS = tuple(i for ids in ENGINE_METRICS.values() for i in ids)


class MemoryConfig(gpuagent.CollectorConfig):
    # Use GPM where the card has it (Hopper and newer).
    gpm: bool = True
    # The first run has no earlier GPM sample: take one, wait this long, take another.
    gpm_warmup: gpuagent.Duration = GPM_WARMUP_S


def peak_dram_gbps(bus_width_bits: int | None, max_memory_clock_mhz: int | None) -> float | None:
    """Bus width / 8 bytes x effective transfers (2 per memory clock) x clock, in GB/s."""
    if not bus_width_bits or not max_memory_clock_mhz:
        return None
    return bus_width_bits / 8 * max_memory_clock_mhz * 2 / 1000.0


def static_fields(gpu: gpuagent.Gpu, use_cuda: bool) -> dict[str, Any]:
    """Bus width, peak bandwidth and L2 size with their sources; read once per GPU."""

    def read() -> dict[str, Any]:
        pci = gpu.static("pci_info", pynvml.nvmlDeviceGetPciInfo_v3)
        spec = specs.lookup(pci.pciDeviceId if pci is not None else None, gpu.name)
        fields: dict[str, Any] = {}

        nvml_bus_width = valid(gpu.query(pynvml.nvmlDeviceGetMemoryBusWidth), zero=False)
        if nvml_bus_width is not None:
            fields["bus_width_bits"] = nvml_bus_width
        elif spec is not None:
            fields["bus_width_bits"] = spec.bus_width_bits

        max_mem_clock = valid(
            gpu.static(
                f"max_clock.{pynvml.NVML_CLOCK_MEM}",
                pynvml.nvmlDeviceGetMaxClockInfo,
                pynvml.NVML_CLOCK_MEM,
            ),
            zero=False,
        )
        peak = peak_dram_gbps(nvml_bus_width, max_mem_clock)
        if peak is not None:
            fields["dram_peak_gbps"], fields["dram_peak_source"] = round(peak, 3), "nvml"
        elif spec is not None:
            fields["dram_peak_gbps"], fields["dram_peak_source"] = (
                float(spec.peak_dram_gbps),
                "spec",
            )

        l2 = cuda_attrs.l2_cache_bytes(gpu.pci_bus_id) if use_cuda else None
        if l2 is not None:
            fields["l2_cache_bytes"], fields["l2_cache_source"] = l2, "cuda"
        elif spec is not None:
            fields["l2_cache_bytes"], fields["l2_cache_source"] = spec.l2_cache_bytes, "spec"
        return fields

    return gpu.remember("memory.static", read)


def read_gpu(
    gpu: gpuagent.Gpu,
    use_cuda: bool = True,
    gpm_read: Callable[[gpuagent.Gpu, Iterable[int]], dict[int, float]] | None = None,
) -> dict[str, Any]:
    """One GPU's gpu_memory fields (what the collector emits and `inspect` shows).

    ``gpm_read(gpu, metric_ids)`` gives GPM metrics over the interval since the
    previous sample (the collector's samplers); None: no GPM fields (a one-off
    read has no earlier sample).
    """
    fields: dict[str, Any] = {}
    info = gpu.query(pynvml.nvmlDeviceGetMemoryInfo, pynvml.nvmlMemory_v2)
    # The structs' numbers read with ctypes' own getter (nvml_read.raw), not pynvml's hook.
    if info is not None:
        fields["fb_reserved_bytes"] = valid(raw(info, "reserved"))
    else:  # drivers before r510 have only the v1 struct (no reserved)
        info = gpu.query(pynvml.nvmlDeviceGetMemoryInfo)
    if info is not None:
        fields["fb_total_bytes"] = valid(raw(info, "total"))
        fields["fb_used_bytes"] = valid(raw(info, "used"))
        fields["fb_free_bytes"] = valid(raw(info, "free"))
    bar1 = gpu.query(pynvml.nvmlDeviceGetBAR1MemoryInfo)
    if bar1 is not None:
        fields["bar1_total_bytes"] = valid(raw(bar1, "bar1Total"))
        fields["bar1_used_bytes"] = valid(raw(bar1, "bar1Used"))
        fields["bar1_free_bytes"] = valid(raw(bar1, "bar1Free"))
    util = gpu.query(pynvml.nvmlDeviceGetUtilizationRates)
    if util is not None:
        fields["gpu_util_pct"] = valid(raw(util, "gpu"))
        # The share of time memory was read or written (busy time), not bandwidth.
        fields["memory_util_pct"] = valid(raw(util, "memory"))
    # GPU-level video engines: the encoder through its call on every card (GPM has no NVENC
    # metric); the decoder through its call where GPM is not read (with GPM: nvdec_active_pct).
    # Both every SLOW_READING_S on the scheduler's ticks (nvml_read.due), not every cycle.
    if due(gpu, "memory.video"):
        encoder = gpu.query(pynvml.nvmlDeviceGetEncoderUtilization)
        if encoder is not None:
            fields["encoder_util_pct"] = valid(encoder[0])
        if gpm_read is None:
            decoder = gpu.query(pynvml.nvmlDeviceGetDecoderUtilization)
            if decoder is not None:
                fields["decoder_util_pct"] = valid(decoder[0])

    static = static_fields(gpu, use_cuda)
    fields.update(static)

    # DRAM bandwidth only where NVML measures it: GPM (Hopper and newer). Cards without GPM
    # carry no dram_bw_* field: their memory busy time is not bandwidth.
    if gpm_read is not None:
        values = gpm_read(gpu, [*GPM_METRICS, *ENGINE_METRIC_IDS])
        for metric_id, value in values.items():
            if metric_id in GPM_METRICS:
                fields[GPM_METRICS[metric_id]] = valid(float(value))
        for name, ids in ENGINE_METRICS.items():
            # The mean over the engines the card has (an absent engine answers NOT_SUPPORTED).
            answered = [float(values[i]) for i in ids if values.get(i) is not None]
            if answered:
                fields[name] = sum(answered) / len(answered)
        if fields.get("dram_bw_util_pct") is not None:
            fields["dram_bw_source"] = "gpm"
    util_pct = fields.get("dram_bw_util_pct")
    peak = static.get("dram_peak_gbps")
    if util_pct is not None and peak is not None:
        fields["dram_bw_gbps"] = round(util_pct / 100.0 * peak, 3)
    return fields


class MemoryCollector(gpuagent.Collector):
    name = "memory"
    schema = SCHEMA
    requires_gpus = True
    Config = MemoryConfig

    def read_gpu(self, gpu: gpuagent.Gpu) -> dict:
        return {MEASUREMENT: read_gpu(gpu, use_cuda=self._use_cuda)}  # no GPM: no earlier sample

    def __init__(self, config: MemoryConfig, context):
        super().__init__(config, context)
        self._gpm = GpmSamplers()
        # A simulated GPU's bus id may equal a real one on this machine: never ask the real CUDA driver.
        self._use_cuda = not context.simulated

    def _uses_gpm(self, gpu: gpuagent.Gpu) -> bool:
        if not self.config.gpm:
            return False
        return gpu.remember("memory.gpm", lambda: gpm_supported(gpu))

    def _gpm_read(self, gpu: gpuagent.Gpu, metric_ids) -> dict[int, float]:
        # A refused allocation, sample or metric is {} (or a missing metric) under the error
        # policy of gpu.query: counted and logged there, never raised.
        return self._gpm.read(gpu, metric_ids)

    def collect(self, acc: gpuagent.Accumulator) -> None:
        # GPM reports over the interval between two samples: a new GPU's earlier sample first
        # (one wait for all of them), a lost GPU's sampler freed.
        self._gpm.start_run(whole_gpus(self.gpus, self._uses_gpm), self.config.gpm_warmup)
        super().collect(acc)

    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: gpuagent.Gpu) -> None:
        gpm_read = self._gpm_read if self._uses_gpm(gpu) else None
        acc.add_fields(MEASUREMENT, read_gpu(gpu, self._use_cuda, gpm_read), tags=gpu.tags)

    def close(self) -> None:
        self._gpm.close()


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(MemoryCollector)
