"""NVLink: per-link state, version, capabilities, remote PCI info and device type, error
counters, and the traffic model the field values and GPM areas read.

A link on a bridge topology is only active when the GPU has a bridged peer; otherwise every
link is active, and without a direct GPU peer its remote end is an NVSwitch. _link_active and
_nvlink_bytes are module functions because field values and GPM report the same traffic.
"""

from __future__ import annotations

import pynvml

from gpuagent.sim.fakelib.args import E_INVALID, E_NS, NvmlCalls, _int
from gpuagent.sim.fakelib.calls import device_call
from gpuagent.sim.fakelib.identity import _fill_pci
from gpuagent.sim.health_faults import nvlink_errors
from gpuagent.sim.machine import SimMachine


def _link_active(m: SimMachine, dev) -> bool:
    if dev.nvlink.get("topology") == "bridge":
        return m.topology.nvlink_peer(dev.index) is not None
    return True


def _nvlink_bytes(m: SimMachine, dev, util_s: float) -> float:
    """Bytes moved over all NVLinks since start, in one direction."""
    if not dev.nvlink or not _link_active(m, dev):
        return 0.0
    gbps = float(dev.profile.get("load", {}).get("nvlink_gbps", 100))
    return util_s / 100 * gbps * 1e9


class NvLinkCalls(NvmlCalls):
    def _link(self, dev, link) -> int | None:
        n = _int(link)
        if n is None or not 0 <= n < int(dev.nvlink["links"]):
            return None
        return n

    @device_call
    def nvmlDeviceGetNvLinkState(self, dev, link=None, out=None):
        if self._link(dev, link) is None:
            return E_INVALID
        return self._put(
            out,
            pynvml.NVML_FEATURE_ENABLED if _link_active(self.m, dev) else pynvml.NVML_FEATURE_DISABLED,
        )

    @device_call
    def nvmlDeviceGetNvLinkVersion(self, dev, link=None, out=None):
        if self._link(dev, link) is None:
            return E_INVALID
        return self._put(out, int(dev.nvlink.get("version", 4)))

    @device_call
    def nvmlDeviceGetNvLinkCapability(self, dev, link=None, cap=None, out=None):
        if self._link(dev, link) is None or _int(cap) is None:
            return E_INVALID
        c = _int(cap)
        value = {pynvml.NVML_NVLINK_CAP_SLI_BRIDGE: 0}.get(c, 1)
        if c > pynvml.NVML_NVLINK_CAP_VALID:
            return E_INVALID
        return self._put(out, value if _link_active(self.m, dev) else 0)

    @device_call
    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, dev, link=None, out=None):
        n = self._link(dev, link)
        if n is None:
            return E_INVALID
        if not _link_active(self.m, dev):
            return E_NS
        peer = self.m.topology.nvlink_peer(dev.index)
        if peer is not None:
            p = self.m.devices[peer]
            return _fill_pci(out, p.bus_id, p.pci_bus, p.pci_device_id, p.pci_subsystem_id)
        # Four NVSwitch chips per baseboard; each SPEC item is its own baseboard, so
        # GPUs of different items (models) never share a switch.
        item = self.m.topology.slots[dev.index].item
        switch_bus = 0xC0 + ((item % 4) * 0x10 + (n % 4) * 0x04)
        return _fill_pci(out, f"00000000:{switch_bus:02X}:00.0".encode(), switch_bus, 0x22A310DE, 0x169910DE)

    @device_call
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, dev, link=None, out=None):
        if self._link(dev, link) is None:
            return E_INVALID
        if not _link_active(self.m, dev):
            return self._put(out, pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN)
        peer = self.m.topology.nvlink_peer(dev.index)
        return self._put(
            out,
            pynvml.NVML_NVLINK_DEVICE_TYPE_GPU if peer is not None else pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH,
        )

    @device_call
    def nvmlDeviceGetNvLinkErrorCounter(self, dev, link=None, counter=None, out=None):
        n = self._link(dev, link)
        if n is None:
            return E_INVALID
        return self._put(out, nvlink_errors(self.m, dev, n, _int(counter)))
