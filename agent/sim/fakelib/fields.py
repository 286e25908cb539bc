"""Field values: nvmlDeviceGetFieldValues, the batched query for counters that have no call of
their own (energy, instant power, HBM temperature, PCIe byte and replay counters, clock-event
reason times, NVLink counts, speeds and throughput).

Each requested field gets its own return code, as on hardware: a field the device cannot
answer (no HBM, no NVLink, NVLink in MIG mode, no reason counters) is NOT_SUPPORTED while the
call as a whole succeeds. Counters are integrals of the load model since t=0, so they only grow.
"""

from __future__ import annotations

import ctypes

import pynvml

from gpuagent.sim.fakelib.args import E_INVALID, E_NS, OK, NvmlCalls, _int, _out
from gpuagent.sim.fakelib.calls import _gpu_guard, device_call
from gpuagent.sim.fakelib.health import ecc_total, remapped_rows
from gpuagent.sim.fakelib.nvlink import _link_active, _nvlink_bytes

# Field id -> the clock-event reason bit whose set-time (ns since t=0) it counts.
REASON_TIME_FIELDS = {
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP: pynvml.nvmlClocksEventReasonSwPowerCap,
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST: pynvml.nvmlClocksEventReasonSyncBoost,
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: (
        pynvml.nvmlClocksEventReasonSwThermalSlowdown
    ),
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN: (
        pynvml.nvmlClocksEventReasonHwThermalSlowdown
    ),
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: (
        pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    ),
}

# Field id -> the call that answers the same number: a card (or a forced fault) that refuses the
# call refuses the field's entry with the same code, so a collector reading either sees the same.
MIRRORED_CALLS = {
    pynvml.NVML_FI_DEV_POWER_INSTANT: "nvmlDeviceGetPowerUsage",
    pynvml.NVML_FI_DEV_POWER_AVERAGE: "nvmlDeviceGetPowerUsage",
    pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT: "nvmlDeviceGetEnforcedPowerLimit",
    pynvml.NVML_FI_DEV_POWER_REQUESTED_LIMIT: "nvmlDeviceGetPowerManagementLimit",
    pynvml.NVML_FI_DEV_POWER_MIN_LIMIT: "nvmlDeviceGetPowerManagementLimitConstraints",
    pynvml.NVML_FI_DEV_POWER_MAX_LIMIT: "nvmlDeviceGetPowerManagementLimitConstraints",
    pynvml.NVML_FI_DEV_POWER_DEFAULT_LIMIT: "nvmlDeviceGetPowerManagementDefaultLimit",
    pynvml.NVML_FI_DEV_NVLINK_GET_STATE: "nvmlDeviceGetNvLinkState",
    pynvml.NVML_FI_DEV_ECC_CURRENT: "nvmlDeviceGetEccMode",
    pynvml.NVML_FI_DEV_ECC_PENDING: "nvmlDeviceGetEccMode",
    pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: "nvmlDeviceGetTotalEccErrors",
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: "nvmlDeviceGetTotalEccErrors",
    pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: "nvmlDeviceGetTotalEccErrors",
    pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: "nvmlDeviceGetTotalEccErrors",
    pynvml.NVML_FI_DEV_REMAPPED_COR: "nvmlDeviceGetRemappedRows",
    pynvml.NVML_FI_DEV_REMAPPED_UNC: "nvmlDeviceGetRemappedRows",
    pynvml.NVML_FI_DEV_REMAPPED_PENDING: "nvmlDeviceGetRemappedRows",
    pynvml.NVML_FI_DEV_REMAPPED_FAILURE: "nvmlDeviceGetRemappedRows",
}
# nvml.h: SBE = corrected, DBE = uncorrected; VOL since the driver loaded, AGG over the card's
# life (the simulator keeps one count per kind, as its nvmlDeviceGetTotalEccErrors does).
# NVML_FI_DEV_REMAPPED_* -> its place in nvmlDeviceGetRemappedRows' (cor, unc, pending, failure).
REMAP_FIELDS = {
    pynvml.NVML_FI_DEV_REMAPPED_COR: 0,
    pynvml.NVML_FI_DEV_REMAPPED_UNC: 1,
    pynvml.NVML_FI_DEV_REMAPPED_PENDING: 2,
    pynvml.NVML_FI_DEV_REMAPPED_FAILURE: 3,
}
ECC_TOTAL_FIELDS = {
    pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: "corrected",
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: "uncorrected",
    pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: "corrected",
    pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: "uncorrected",
}


PCIE_COUNTER_WRAP = 1 << 32
_GET = ctypes.Structure.__getattribute__
_SET = ctypes.Structure.__setattr__
_SET_UNION = ctypes.Union.__setattr__


class FieldValueCalls(NvmlCalls):
    @device_call
    def nvmlDeviceGetFieldValues(self, dev, count=None, values=None):
        n = _int(count)
        arr = _out(values)
        if arr is None or n is None or n < 0:
            return E_INVALID
        st = dev.state()
        now_us = int(self.m.clock.now() * 1e6)
        # Plain ctypes access, not pynvml's printable-structure hooks (a str/bytes check on every
        # read and write): libnvidia-ml fills the array in C, and the hooks were most of this
        # call's cost, which the agent's cost measurements should not carry.
        get, put, put_value = _GET, _SET, _SET_UNION
        gpu = dev.gpu if dev.is_mig else dev
        for i in range(n):
            fv = arr[i]
            field_id = get(fv, "fieldId")
            mirrored = MIRRORED_CALLS.get(field_id)
            code = _gpu_guard(self.m, gpu, mirrored) if mirrored else None
            if code is not None:
                kind, value = None, code
            else:
                kind, value = self._field(dev, st, field_id, get(fv, "scopeId"))
            put(fv, "timestamp", now_us)
            put(fv, "latencyUsec", 0)
            if kind is None:
                put(fv, "nvmlReturn", value)
                continue
            put(fv, "nvmlReturn", OK)
            put(fv, "valueType", kind)
            if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
                put_value(get(fv, "value"), "uiVal", int(value))
            elif kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
                put_value(get(fv, "value"), "ullVal", int(value))
            else:
                put_value(get(fv, "value"), "dVal", float(value))
        return OK

    def _field(self, dev, st, field_id, scope):
        ui, ull = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        if field_id in (pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, pynvml.NVML_FI_DEV_ENERGY):
            return ull, st.energy_j * 1000
        if field_id in (pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_FI_DEV_POWER_AVERAGE):
            return ui, st.power_w * 1000
        limit = self._power_limit_field(dev, field_id)
        if limit is not None:
            return limit
        kind = ECC_TOTAL_FIELDS.get(field_id)
        if kind is not None:  # the numbers nvmlDeviceGetTotalEccErrors answers, faults included
            return ull, ecc_total(self.m, dev, kind)
        remap = REMAP_FIELDS.get(field_id)
        if remap is not None:  # as nvmlDeviceGetRemappedRows answers them, faults included
            return ui, remapped_rows(self.m, dev)[remap]
        if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
            if str(dev.profile["memory"].get("type", "")).startswith("HBM"):
                return ui, st.temp_c + 6
            return None, E_NS
        if field_id in (pynvml.NVML_FI_DEV_ECC_CURRENT, pynvml.NVML_FI_DEV_ECC_PENDING):
            # nvmlDeviceGetEccMode's current and pending modes (the simulator keeps one).
            gpu = dev.gpu if dev.is_mig else dev
            return (ui, 1 if gpu.ecc.get("enabled") else 0) if gpu.ecc else (None, E_NS)
        if field_id == pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER:
            return ui, dev.pcie_replays
        if field_id == pynvml.NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER:
            return ui, 0  # the replay counter never wraps in a simulated run
        bit = REASON_TIME_FIELDS.get(field_id)
        if bit is not None:
            if not dev.reason_counters:
                return None, E_NS
            return ull, st.reason_s[bit] * 1e9
        if field_id in (
            pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
            pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
        ):
            share = 0.12 if field_id == pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES else 0.2
            total = int(st.util_s / 100 * dev.model.pcie_kbps * 1000 * share)
            # nvml.h: "PCIe transmit bytes. Value can be wrapped." It names no width; the sim
            # wraps at 2**32 (PCIE_COUNTER_WRAP), so readers see a wrap within a run.
            return ull, total % PCIE_COUNTER_WRAP
        nv = dev.nvlink if not dev.mig_enabled else None  # no NVLink queries in MIG mode
        if field_id == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            return (ui, nv["links"]) if nv else (None, E_NS)
        if field_id == pynvml.NVML_FI_DEV_NVLINK_GET_STATE:
            # nvml.h: "NVLink State - Active,Inactive", scopeId = the link; the value
            # nvmlDeviceGetNvLinkState answers for that link.
            if not nv:
                return None, E_NS
            if not 0 <= scope < int(nv["links"]):
                return None, E_INVALID
            active = _link_active(self.m, dev)
            return ui, pynvml.NVML_FEATURE_ENABLED if active else pynvml.NVML_FEATURE_DISABLED
        if field_id in (
            pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON,
            pynvml.NVML_FI_DEV_NVLINK_GET_SPEED,
        ):
            return (ui, nv.get("speed_mbps", 25000)) if nv else (None, E_NS)
        if field_id in (
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX,
        ):
            if not nv:
                return None, E_NS
            total_kib = _nvlink_bytes(self.m, dev, st.util_s) / 1024
            if field_id in (
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX,
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX,
            ):
                total_kib *= 1.06
            links = int(nv["links"])
            return ull, total_kib / links if scope < links else total_kib
        return None, E_NS

    @staticmethod
    def _power_limit_field(dev, field_id):
        """nvml.h's power-limit fields (mW), the same numbers as their calls: CURRENT_LIMIT is
        the enforced limit (nvmlDeviceGetEnforcedPowerLimit), REQUESTED_LIMIT the management
        limit (nvmlDeviceGetPowerManagementLimit), MIN/MAX the constraints, DEFAULT the default."""
        key = {
            pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT: "limit",
            pynvml.NVML_FI_DEV_POWER_REQUESTED_LIMIT: "limit",
            pynvml.NVML_FI_DEV_POWER_MIN_LIMIT: "min",
            pynvml.NVML_FI_DEV_POWER_MAX_LIMIT: "max",
            pynvml.NVML_FI_DEV_POWER_DEFAULT_LIMIT: "default",
        }.get(field_id)
        if key is None:
            return None
        return pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, int(dev.power[key] * 1000)
