"""Topology between GPUs: P2P status, the common ancestor in the PCIe tree, nearest GPUs, and
whether two GPUs share a board.

Answers come from the fleet's topology model. The second handle gets the same lost and forced
codes as the first, and a MIG device handle is refused because these calls take whole GPUs.
The P2P caps index is range-checked as the C library does.
"""

from __future__ import annotations

import pynvml

from gpuagent.sim.fakelib.args import E_INVALID, NvmlCalls, _addr, _int
from gpuagent.sim.fakelib.calls import _gpu_guard, device_call


class TopologyCalls(NvmlCalls):
    def _peer(self, h):
        d = self.m.by_addr.get(_addr(h))
        if d is None or d.is_mig:
            return None
        return d

    @device_call
    def nvmlDeviceGetP2PStatus(self, dev, other=None, caps=None, out=None):
        peer = self._peer(other)
        c = _int(caps)
        if dev.is_mig or peer is None or c is None or not 0 <= c <= pynvml.NVML_P2P_CAPS_INDEX_UNKNOWN:
            return E_INVALID
        code = _gpu_guard(self.m, peer, "nvmlDeviceGetP2PStatus")
        if code is not None:
            return code
        if c == pynvml.NVML_P2P_CAPS_INDEX_UNKNOWN:
            return self._put(out, pynvml.NVML_P2P_STATUS_UNKNOWN)
        return self._put(out, self.m.topology.p2p(dev.index, peer.index, c))

    @device_call
    def nvmlDeviceGetTopologyCommonAncestor(self, dev, other=None, out=None):
        peer = self._peer(other)
        if dev.is_mig or peer is None:
            return E_INVALID
        code = _gpu_guard(self.m, peer, "nvmlDeviceGetTopologyCommonAncestor")
        if code is not None:
            return code
        return self._put(out, self.m.topology.level(dev.index, peer.index))

    @device_call
    def nvmlDeviceGetTopologyNearestGpus(self, dev, level=None, count=None, arr=None):
        lv = _int(level)
        near = [
            d.handle.addr for d in self.m.devices if d is not dev and self.m.topology.level(dev.index, d.index) <= lv
        ]
        return self._put_handles(count, arr, near)

    @device_call
    def nvmlDeviceOnSameBoard(self, dev, other=None, out=None):
        return self._put(out, 0)
