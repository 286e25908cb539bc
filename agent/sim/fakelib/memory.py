"""Memory: framebuffer (v1 and versioned v2), BAR1, bus width, and device attributes.

Used memory follows the load model; a MIG device reports its own slice of the framebuffer, its
use following the parent GPU's load. v1 counts the driver's reserved memory as used, as the
real v1 call does, while v2 reports it apart; a v2 struct with the wrong version answers
ARGUMENT_VERSION_MISMATCH.
"""

from __future__ import annotations

import pynvml

from gpuagent.sim.fakelib.args import (
    _SET,
    E_INVALID,
    E_NS,
    E_VERSION,
    OK,
    NvmlCalls,
    _out,
    _version,
)
from gpuagent.sim.fakelib.calls import device_call


class MemoryCalls(NvmlCalls):
    def _memory(self, dev):
        if dev.is_mig:
            st = dev.gpu.state()
            total = dev.memory_bytes
            used = int(total * dev.gpu.model.mem_frac * 0.9 * (1 if dev.gpu.model.scenario != "idle" else 0)) + (
                26 << 20
            )
            return total, 0, used
        st = dev.state()
        return dev.total_bytes, dev.reserved_bytes, st.mem_used_bytes

    @device_call
    def nvmlDeviceGetMemoryInfo(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        total, reserved, used = self._memory(dev)
        _SET(o, "total", total)
        _SET(o, "used", used + reserved)
        _SET(o, "free", total - used - reserved)
        return OK

    @device_call
    def nvmlDeviceGetMemoryInfo_v2(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        if _version(o) != pynvml.nvmlMemory_v2:
            return E_VERSION
        total, reserved, used = self._memory(dev)
        _SET(o, "total", total)
        _SET(o, "reserved", reserved)
        _SET(o, "used", used)
        _SET(o, "free", total - reserved - used)
        return OK

    @device_call
    def nvmlDeviceGetBAR1MemoryInfo(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        total = dev.bar1_bytes
        used = (2 << 20) if (dev.gpu if dev.is_mig else dev).model.scenario != "idle" else 0
        _SET(o, "bar1Total", total)
        _SET(o, "bar1Used", used)
        _SET(o, "bar1Free", total - used)
        return OK

    @device_call
    def nvmlDeviceGetMemoryBusWidth(self, dev, out=None):
        return self._put(out, int(dev.bus_width))

    @device_call
    def nvmlDeviceGetAttributes_v2(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        if not dev.is_mig:
            # nvml.h: "This API currently only supports MIG device handles"; NOT_SUPPORTED otherwise.
            return E_NS
        o.multiprocessorCount = dev.sm_count
        o.gpuInstanceSliceCount = dev.slices
        o.computeInstanceSliceCount = dev.ci_slices
        o.memorySizeMB = dev.memory_bytes >> 20
        o.sharedCopyEngineCount = dev.slices
        o.sharedDecoderCount = max(1, dev.slices - 1)
        o.sharedJpegCount = max(1, dev.slices - 1)
        return OK
