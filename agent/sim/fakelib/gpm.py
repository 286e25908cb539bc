"""GPM (GPU Performance Monitoring, Hopper and later): device support, sample allocation, GPU
and MIG samples, and metrics computed from two samples.

A sample snapshots the load model's integrals (the whole GPU's, or a GPU instance's share), so
a metric is the average over the interval between two samples, as real GPM metrics are; two
samples at the same instant fall back to the instantaneous values. A metric that cannot be
given (NVLink on a GPU-instance sample, unknown ids) answers NOT_SUPPORTED in its own code.
"""

from __future__ import annotations

import ctypes
from ctypes import addressof

import pynvml

from gpuagent.sim.fakelib.args import (
    _GET,
    _SET,
    E_INVALID,
    E_NOT_FOUND,
    E_NS,
    E_VERSION,
    OK,
    NvmlCalls,
    _addr,
    _int,
    _out,
)
from gpuagent.sim.fakelib.calls import _gpu_guard, device_call, system_call
from gpuagent.sim.fakelib.nvlink import _nvlink_bytes
from gpuagent.sim.machine import SimDevice


class _GpmSample:
    def __init__(self) -> None:
        self.buf = ctypes.create_string_buffer(8)
        self.addr = addressof(self.buf)
        self.gpu: SimDevice | None = None
        self.gi: int | None = None
        self.snap: tuple | None = None


GPM_METRIC_NAMES = {
    1: (b"gr_util", b"graphics utilization", b"%"),
    2: (b"sm_util", b"SM utilization", b"%"),
    3: (b"sm_occupancy", b"SM occupancy", b"%"),
    4: (b"integer_util", b"integer utilization", b"%"),
    5: (b"any_tensor_util", b"any tensor utilization", b"%"),
    6: (b"dfma_tensor_util", b"DFMA tensor utilization", b"%"),
    7: (b"hmma_tensor_util", b"HMMA tensor utilization", b"%"),
    8: (b"dmma_tensor_util", b"DMMA tensor utilization", b"%"),
    9: (b"imma_tensor_util", b"IMMA tensor utilization", b"%"),
    10: (b"dram_bw_util", b"DRAM bandwidth utilization", b"%"),
    11: (b"fp64_util", b"FP64 utilization", b"%"),
    12: (b"fp32_util", b"FP32 utilization", b"%"),
    13: (b"fp16_util", b"FP16 utilization", b"%"),
    20: (b"pcie_tx", b"PCIe TX", b"MiB/s"),
    21: (b"pcie_rx", b"PCIe RX", b"MiB/s"),
    60: (b"nvlink_rx", b"NVLink RX", b"MiB/s"),
    61: (b"nvlink_tx", b"NVLink TX", b"MiB/s"),
}
_GPM_SHARE = {
    1: "busy",
    2: "sm",
    3: "occupancy",
    4: "integer",
    5: "tensor",
    6: "dfma",
    7: "hmma",
    8: "dfma",
    9: "imma",
    11: "fp64",
    12: "fp32",
    13: "fp16",
}


# Video engines per GPU (NVIDIA H100 Tensor Core GPU Architecture whitepaper: 7 NVDEC, 7 NVJPG,
# 1 NVOFA; the H100 MIG capture's 3g.40gb device has 3 decoders and 3 JPG engines, 0 OFA).
VIDEO_ENGINES = {"nvdec": 7, "nvjpg": 7, "nvofa": 1}


def _engine(mid: int) -> tuple[str, int] | None:
    """NVML_GPM_METRIC_NVDEC_0_UTIL (30) ... NVOFA_1_UTIL (51) as (engine kind, engine index)."""
    if 30 <= mid <= 37:
        return "nvdec", mid - 30
    if 40 <= mid <= 47:
        return "nvjpg", mid - 40
    if 50 <= mid <= 51:
        return "nvofa", mid - 50
    return None


GPM_MIN_INTERVAL_S = 0.1
E_NOT_READY = pynvml.NVML_ERROR_NOT_READY


class GpmCalls(NvmlCalls):
    @device_call
    def nvmlGpmQueryDeviceSupport(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        if o.version != pynvml.NVML_GPM_SUPPORT_VERSION:
            return E_VERSION
        o.isSupportedDevice = 1 if (not dev.is_mig and dev.gpm) else 0
        return OK

    @system_call()
    def nvmlGpmSampleAlloc(self, out=None):
        s = _GpmSample()
        self.m.gpm_samples[s.addr] = s
        return self._put_handle(out, s.addr)

    @system_call()
    def nvmlGpmSampleFree(self, sample=None):
        if self.m.gpm_samples.pop(_addr(sample), None) is None:
            return E_INVALID
        return OK

    def _snap(self, dev, sample, gi_id=None):
        s = self.m.gpm_samples.get(_addr(sample))
        if s is None:
            return E_INVALID
        st = dev.state()
        share = 1.0
        if gi_id is not None:
            mig = next((m for m in dev.mig_devices if m.gi_id == gi_id), None)
            if mig is None:
                return E_NOT_FOUND
            share = mig.share
        s.gpu, s.gi = dev, gi_id
        s.snap = (
            st.t,
            st.util_s * share,
            st.mem_util_s * share,
            st.util * share,
            st.mem_util * share,
        )
        return OK

    @device_call
    def nvmlGpmSampleGet(self, dev, sample=None):
        if dev.is_mig:
            return E_INVALID
        return self._snap(dev, sample)

    @device_call
    def nvmlGpmMigSampleGet(self, dev, gi_id=None, sample=None):
        if dev.is_mig or not dev.mig_enabled:
            return E_INVALID
        return self._snap(dev, sample, _int(gi_id))

    @system_call()
    def nvmlGpmMetricsGet(self, arg=None):
        mg = _out(arg)
        if mg is None:
            return E_INVALID
        # Plain ctypes access, not pynvml's printable-structure hooks (a str/bytes check on every
        # read and write; no field read here is a string, none written is a str).
        get, put = _GET, _SET
        if get(mg, "version") != pynvml.NVML_GPM_METRICS_GET_VERSION:
            return E_VERSION
        samples = self.m.gpm_samples
        s1 = samples.get(_addr(get(mg, "sample1")))
        s2 = samples.get(_addr(get(mg, "sample2")))
        if s1 is None or s2 is None or s1.snap is None or s2.snap is None or s1.gpu is not s2.gpu or s1.gi != s2.gi:
            return E_INVALID
        count = get(mg, "numMetrics")
        if count > pynvml.NVML_GPM_METRIC_MAX:
            return E_INVALID
        dev = s1.gpu
        code = _gpu_guard(self.m, dev, "nvmlGpmMetricsGet")
        if code is not None:
            return code
        (t1, u1, m1, ui1, mi1), (t2, u2, m2, ui2, mi2) = sorted((s1.snap, s2.snap))
        dt = t2 - t1
        if dt <= GPM_MIN_INTERVAL_S:
            # nvml.h: "The interval between these two nvmlGpmSampleGet() calls should be greater
            # than 100ms due to the internal sample refresh rate"; it names no code ("Nonzero
            # NVML_ERROR_? enum on error"): the sim answers NOT_READY ("The system is not ready
            # for the request").
            return E_NOT_READY
        util = (u2 - u1) / dt if dt > 0 else (ui1 + ui2) / 2
        mem = (m2 - m1) / dt if dt > 0 else (mi1 + mi2) / 2
        mix = dev.model.mix
        pcie = dev.model.pcie_kbps * 1000 / (1 << 20)
        nvl = _nvlink_bytes(self.m, dev, util) / (1 << 20) if dev.nvlink else 0.0
        metrics = get(mg, "metrics")
        for i in range(count):
            metric = metrics[i]
            mid = get(metric, "metricId")
            value = None
            share = _GPM_SHARE.get(mid)
            if mid == pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL:
                value = mem
            elif mid == pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL:
                value = util
            elif share is not None:
                value = util * mix.get(share, 0.0) if share != "busy" else util
            elif mid == pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC:
                value = pcie * util / 100 * 0.12
            elif mid == pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC:
                value = pcie * util / 100 * 0.2
            elif mid in (
                pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
                pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
            ):
                value = nvl if dev.nvlink and s1.gi is None else None
            elif dev.nvlink and 62 <= mid <= 61 + 2 * int(dev.nvlink["links"]) and s1.gi is None:
                value = nvl / int(dev.nvlink["links"])
            elif (engine := _engine(mid)) is not None:
                # No simulated workload decodes video, JPEG or optical flow: the engines the card
                # has are idle; one it lacks answers NOT_SUPPORTED.
                kind, n = engine
                value = 0.0 if n < VIDEO_ENGINES.get(kind, 0) else None
            if value is None:
                put(metric, "nvmlReturn", E_NS)
                put(metric, "value", 0.0)
                continue
            put(metric, "nvmlReturn", OK)
            put(metric, "value", float(min(value, 100.0) if mid < 20 else value))
            names = GPM_METRIC_NAMES.get(mid)
            if names:
                info = get(metric, "metricInfo")
                info.shortName, info.longName, info.unit = names
        return OK
