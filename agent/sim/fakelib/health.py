"""Memory health: ECC mode and error counts, retired pages, and row remapping.

ECC counts come from the device's ECC state, which faults raise, and the remapped-row count
follows the uncorrected errors. No page is ever retired, so the retired-page lists are always
empty. The ECC calls are among those a MIG device handle may make, and answer for the parent.
Health faults (gpuagent.sim.health_faults) add uncorrectable errors, a pending or failed row
remapping, a pending page retirement, and move banks in the remapper histogram.
"""

from __future__ import annotations

import pynvml

from gpuagent.sim.fakelib.args import _SET, E_INVALID, OK, NvmlCalls, _fill_value, _int, _out
from gpuagent.sim.fakelib.calls import device_call
from gpuagent.sim.health_faults import peek


def _uncorrected(m, gpu) -> int:
    state = peek(m, gpu.index)
    return gpu.ecc_counts["uncorrected"] + (state.ecc_uncorrected(m.now()) if state else 0)


def _count(m, gpu, key: str) -> int:
    return gpu.ecc_counts[key] if key == "corrected" else _uncorrected(m, gpu)


def remapped_rows(m, dev) -> tuple[int, int, int, int]:
    """(correctable, uncorrectable, pending, failure): nvmlDeviceGetRemappedRows' numbers, which
    the NVML_FI_DEV_REMAPPED_* fields mirror (gpuagent.sim.fakelib.fields)."""
    state, now = peek(m, dev.index), m.now()
    return (
        0,
        _uncorrected(m, dev) + (state.remapped(now) if state else 0),
        1 if state and state.remap_pending(now) else 0,
        1 if state and state.remap_failure(now) else 0,
    )


def ecc_total(m, dev, key: str) -> int:
    """nvmlDeviceGetTotalEccErrors' number ("corrected" / "uncorrected"), mirrored by the
    NVML_FI_DEV_ECC_{SBE,DBE}_*_TOTAL fields."""
    return _count(m, dev.gpu if dev.is_mig else dev, key)


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
        key = "corrected" if _int(err_type) == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else "uncorrected"
        return self._put(out, ecc_total(self.m, dev, key))

    @device_call
    def nvmlDeviceGetMemoryErrorCounter(self, dev, err_type=None, counter=None, location=None, out=None):
        gpu = dev.gpu if dev.is_mig else dev
        key = "corrected" if _int(err_type) == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else "uncorrected"
        loc = _int(location)
        if loc in (pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY, pynvml.NVML_MEMORY_LOCATION_DRAM):
            return self._put(out, _count(self.m, gpu, key))
        return self._put(out, 0)

    @device_call
    def nvmlDeviceGetRetiredPages(self, dev, cause=None, count=None, pages=None):
        return self._two_call(count, pages, [], _fill_value)

    @device_call
    def nvmlDeviceGetRetiredPages_v2(self, dev, cause=None, count=None, pages=None, times=None):
        return self._two_call(count, pages, [], _fill_value)

    @device_call
    def nvmlDeviceGetRetiredPagesPendingStatus(self, dev, out=None):
        state = peek(self.m, dev.index)
        return self._put(out, 1 if state and state.retired_pending(self.m.now()) else 0)

    @device_call
    def nvmlDeviceGetRemappedRows(self, dev, corr=None, unc=None, pending=None, failure=None):
        for out, value in zip((corr, unc, pending, failure), remapped_rows(self.m, dev), strict=True):
            if self._put(out, value) != OK:
                return E_INVALID
        return OK

    @device_call
    def nvmlDeviceGetRowRemapperHistogram(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        # An imported capture's "Bank Remap Availability Histogram / Max" (H100: 2560 bank(s)),
        # else 2560 on HBM as the H100 capture shows and 192 on GDDR.
        banks = dev.profile.get("remap_histogram_banks") or (
            2560 if str(dev.profile["memory"].get("type", "")).startswith("HBM") else 192
        )
        state, now = peek(self.m, dev.index), self.m.now()
        # Each applied or pending remapping uses a spare row of one bank (availability max -> high);
        # a failed remapping leaves a bank with none (the H100 capture: Max 2560 bank(s), rest 0).
        used = (state.remapped(now) + state.remap_pending(now)) if state else 0
        failed = 1 if state and state.remap_failure(now) else 0
        _SET(o, "max", banks - used - failed)
        _SET(o, "high", used)
        _SET(o, "partial", 0)
        _SET(o, "low", 0)
        _SET(o, "none", failed)
        return OK
