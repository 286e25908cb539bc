"""PCIe link: current and maximum generation and width, link speed, throughput, and the replay
counter.

The current generation follows the load model (a profile can give a lower idle generation, as
real links train down when idle) and throughput follows the load; widths and maxima come from
the profile; an imported capture's idle run answers its stated Tx / Rx throughput. The replay
counter starts at a capture's "Replays Since Reset" and only moves when a fault adds replays.
"""

from __future__ import annotations

import pynvml

from gpuagent.sim.fakelib.args import E_INVALID, NvmlCalls, _int
from gpuagent.sim.fakelib.calls import device_call
from gpuagent.sim.health_faults import pcie_replays


class PcieCalls(NvmlCalls):
    @device_call
    def nvmlDeviceGetCurrPcieLinkGeneration(self, dev, out=None):
        return self._put(out, dev.state().pcie_gen)

    @device_call
    def nvmlDeviceGetMaxPcieLinkGeneration(self, dev, out=None):
        return self._put(out, int(dev.pcie["max_gen"]))

    @device_call
    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, dev, out=None):
        return self._put(out, int(dev.pcie.get("device_max_gen", dev.pcie["max_gen"])))

    @device_call
    def nvmlDeviceGetCurrPcieLinkWidth(self, dev, out=None):
        return self._put(out, int(dev.pcie["current_width"]))

    @device_call
    def nvmlDeviceGetMaxPcieLinkWidth(self, dev, out=None):
        return self._put(out, int(dev.pcie["max_width"]))

    @device_call
    def nvmlDeviceGetPcieLinkMaxSpeed(self, dev, out=None):
        return self._put(out, {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000}[int(dev.pcie["max_gen"])])

    @device_call
    def nvmlDeviceGetPcieSpeed(self, dev, out=None):
        return self._put(out, {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000}[dev.state().pcie_gen])

    @device_call
    def nvmlDeviceGetPcieThroughput(self, dev, counter=None, out=None):
        c = _int(counter)
        st = dev.state()
        # An imported capture's idle run: its "Tx / Rx Throughput" (KB/s), as stated.
        run = dev.model.captured_idle or {}
        if c == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            stated = run.get("pcie_tx_kbps")
            return self._put(out, st.pcie_tx_kbps if stated is None else int(stated))
        if c == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            stated = run.get("pcie_rx_kbps")
            return self._put(out, st.pcie_rx_kbps if stated is None else int(stated))
        return E_INVALID

    @device_call
    def nvmlDeviceGetPcieReplayCounter(self, dev, out=None):
        return self._put(out, pcie_replays(self.m, dev))
