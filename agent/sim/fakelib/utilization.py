"""Utilisation: GPU and memory-controller busy percentages, and the codec engines.

GPU and memory utilisation follow the load model's state at the time of the call. The encoder,
decoder, JPEG and OFA engines are always idle (no simulated workload uses them) and report a
fixed 167 ms sampling period. Where a capture says N/A (every engine with MIG on) the call is in
the profile's ``unsupported`` list and answers NOT_SUPPORTED before reaching this code.
"""

from __future__ import annotations

from gpuagent.sim.fakelib.args import _SET, E_INVALID, OK, NvmlCalls, _out
from gpuagent.sim.fakelib.calls import device_call


class UtilizationCalls(NvmlCalls):
    @device_call
    def nvmlDeviceGetUtilizationRates(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        st = dev.state()
        _SET(o, "gpu", int(round(st.util)))
        _SET(o, "memory", int(round(st.mem_util)))
        return OK

    def _codec_util(self, dev, util=None, period=None):
        if self._put(util, 0) != OK:
            return E_INVALID
        return self._put(period, 167000)

    @device_call
    def nvmlDeviceGetEncoderUtilization(self, dev, util=None, period=None):
        return self._codec_util(dev, util, period)

    @device_call
    def nvmlDeviceGetDecoderUtilization(self, dev, util=None, period=None):
        return self._codec_util(dev, util, period)

    @device_call
    def nvmlDeviceGetJpgUtilization(self, dev, util=None, period=None):
        return self._codec_util(dev, util, period)

    @device_call
    def nvmlDeviceGetOfaUtilization(self, dev, util=None, period=None):
        return self._codec_util(dev, util, period)
