"""Memory: framebuffer (v1 and versioned v2), BAR1, bus width, and device attributes.

Used memory follows the load model; a MIG device reports its own slice of the framebuffer, its
use following the parent GPU's load. An imported capture's idle run answers as stated: BAR1 in
use, and each MIG device's memory and BAR1 in use and its engine counts. v1 counts the driver's reserved memory as used, as the
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


def captured_idle(dev) -> dict | None:
    """The imported capture's idle run while its GPU replays it (idle scenario), else None."""
    return (dev.gpu if dev.is_mig else dev).model.captured_idle


def captured_mig(dev, key: str) -> int | None:
    """A MIG device's own reading in the replayed idle run (MiB lists by MIG device index)."""
    run = captured_idle(dev)
    values = (run or {}).get(key) or []
    return values[dev.n] if dev.n < len(values) else None


class MemoryCalls(NvmlCalls):
    def _memory(self, dev):
        if dev.is_mig:
            total = dev.memory_bytes
            stated = captured_mig(dev, "mig_used_mib")
            if stated is not None:  # "Shared FB Memory Usage / Used" of this MIG device
                return total, 0, stated << 20
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
        # The capture's "BAR1 Memory Usage / Used" (a MIG device's "Shared BAR1 Memory / Used").
        stated = (
            captured_mig(dev, "mig_bar1_used_mib") if dev.is_mig else (captured_idle(dev) or {}).get("bar1_used_mib")
        )
        if stated is not None:
            used = int(stated) << 20
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
        # A capture's "Device Attributes / Shared" counts where it states them, else the model's.
        spec = dev.spec
        o.sharedCopyEngineCount = int(spec.get("ce_count", dev.slices))
        o.sharedDecoderCount = int(spec.get("decoder_count", max(1, dev.slices - 1)))
        o.sharedJpegCount = int(spec.get("jpeg_count", max(1, dev.slices - 1)))
        if "encoder_count" in spec:
            o.sharedEncoderCount = int(spec["encoder_count"])
        if "ofa_count" in spec:
            o.sharedOfaCount = int(spec["ofa_count"])
        return OK
