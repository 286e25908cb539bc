"""Memory health: ECC mode and error counts, retired pages, and row remapping.

ECC counts come from the device's ECC state, which faults raise, and the remapped-row count
follows the uncorrected errors. No page is ever retired, so the retired-page lists are always
empty. The ECC calls are among those a MIG device handle may make, and answer for the parent.
"""

from __future__ import annotations

import pynvml

from gpuagent.sim.fakelib.args import E_INVALID, OK, NvmlCalls, _fill_value, _int, _out
from gpuagent.sim.fakelib.calls import device_call


class HealthCalls(NvmlCalls):
    @device_call
    def nvmlDeviceGetEccMode(self, dev, current=None, pending=None):
        gpu = dev.gpu if dev.is_mig else dev
        on = 1 if gpu.ecc and gpu.ecc.get("enabled") else 0
        if self._put(current, on) != OK:
            return E_INVALID
        return self._put(pending, on)

    @device_call
    def nvmlDeviceGetDefaultEccMode(self, dev, out=None):
        return self._put(out, 1)

    @device_call
    def nvmlDeviceGetTotalEccErrors(self, dev, err_type=None, counter=None, out=None):
        gpu = dev.gpu if dev.is_mig else dev
        key = (
            "corrected"
            if _int(err_type) == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
            else "uncorrected"
        )
        return self._put(out, gpu.ecc_counts[key])

    @device_call
    def nvmlDeviceGetMemoryErrorCounter(
        self, dev, err_type=None, counter=None, location=None, out=None
    ):
        gpu = dev.gpu if dev.is_mig else dev
        key = (
            "corrected"
            if _int(err_type) == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
            else "uncorrected"
        )
        loc = _int(location)
        if loc in (pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY, pynvml.NVML_MEMORY_LOCATION_DRAM):
            return self._put(out, gpu.ecc_counts[key])
        return self._put(out, 0)

    @device_call
    def nvmlDeviceGetRetiredPages(self, dev, cause=None, count=None, pages=None):
        return self._two_call(count, pages, [], _fill_value)

    @device_call
    def nvmlDeviceGetRetiredPages_v2(self, dev, cause=None, count=None, pages=None, times=None):
        return self._two_call(count, pages, [], _fill_value)

    @device_call
    def nvmlDeviceGetRetiredPagesPendingStatus(self, dev, out=None):
        return self._put(out, 0)

    @device_call
    def nvmlDeviceGetRemappedRows(self, dev, corr=None, unc=None, pending=None, failure=None):
        for out, value in (
            (corr, 0),
            (unc, dev.ecc_counts["uncorrected"]),
            (pending, 0),
            (failure, 0),
        ):
            if self._put(out, value) != OK:
                return E_INVALID
        return OK

    @device_call
    def nvmlDeviceGetRowRemapperHistogram(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        o.max = 2560 if str(dev.profile["memory"].get("type", "")).startswith("HBM") else 192
        return OK
