"""Running processes: the compute, graphics and MPS process lists.

Compute processes come from the simulated workload, and a MIG device lists only those in its
own GPU instance. No workload is graphics or MPS, so those lists are always empty. All use
NVML's two-call pattern (ask for the count, then the array).
"""

from __future__ import annotations

from gpuagent.sim.fakelib.args import NvmlCalls, _fill_proc
from gpuagent.sim.fakelib.calls import device_call


class ProcessCalls(NvmlCalls):
    def _procs(self, dev, count, arr):
        gpu = dev.gpu if dev.is_mig else dev
        procs = gpu.processes(dev.gi_id if dev.is_mig else None)
        return self._two_call(count, arr, procs, _fill_proc)

    @device_call
    def nvmlDeviceGetComputeRunningProcesses_v3(self, dev, count=None, arr=None):
        return self._procs(dev, count, arr)

    @device_call
    def nvmlDeviceGetComputeRunningProcesses_v2(self, dev, count=None, arr=None):
        return self._procs(dev, count, arr)

    @device_call
    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, dev, count=None, arr=None):
        return self._two_call(count, arr, [], _fill_proc)

    @device_call
    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, dev, count=None, arr=None):
        return self._two_call(count, arr, [], _fill_proc)

    @device_call
    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, dev, count=None, arr=None):
        return self._two_call(count, arr, [], _fill_proc)
