"""Field values: nvmlDeviceGetFieldValues, the batched query for counters that have no call of
their own (energy, instant power, HBM temperature, PCIe byte and replay counters, clock-event
reason times, NVLink counts, speeds and throughput).

Each requested field gets its own return code, as on hardware: a field the device cannot
answer (no HBM, no NVLink, NVLink in MIG mode, no reason counters) is NOT_SUPPORTED while the
call as a whole succeeds. Counters are integrals of the load model since t=0, so they only grow.
"""

from __future__ import annotations

import ctypes
import struct
from typing import ClassVar

import pynvml

from gpuagent.sim.fakelib.args import _GET, _SET, E_INVALID, E_NS, OK, NvmlCalls, _int, _out
from gpuagent.sim.fakelib.calls import _gpu_guard, device_call
from gpuagent.sim.fakelib.health import ecc_total, remapped_rows
from gpuagent.sim.fakelib.nvlink import _link_active, _nvlink_bytes

# Field id -> the clock-event reason bit whose set-time (ns since t=0) it counts.
REASON_TIME_FIELDS = {
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP: pynvml.nvmlClocksEventReasonSwPowerCap,
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST: pynvml.nvmlClocksEventReasonSyncBoost,
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: (pynvml.nvmlClocksEventReasonSwThermalSlowdown),
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN: (pynvml.nvmlClocksEventReasonHwThermalSlowdown),
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: (pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown),
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
UI = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
ULL = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
SI = pynvml.NVML_VALUE_TYPE_SIGNED_INT
_SET_UNION = ctypes.Union.__setattr__

# nvmlFieldValue_t as nvml.h lays it out, written with one struct.pack_into per entry (ctypes
# attribute writes were most of this call's cost). A union member written as uiVal leaves the
# union's other 4 bytes as they were, as a uiVal store does.
_FV = pynvml.c_nvmlFieldValue_t
_FV_SIZE = ctypes.sizeof(_FV)
_TS = _FV.timestamp.offset
assert (_FV.scopeId.offset, _FV.latencyUsec.offset, _FV.valueType.offset) == (4, _TS + 8, _TS + 16)
assert (_FV.nvmlReturn.offset, _FV.value.offset) == (_TS + 20, _TS + 24)
_IDS = struct.Struct(f"=II{_FV_SIZE - 8}x").iter_unpack  # fieldId, scopeId of each entry
_ERROR = struct.Struct("=qq").pack_into  # timestamp, latencyUsec (valueType left as it was)
_RETURN = struct.Struct("=I").pack_into  # nvmlReturn
# timestamp, latencyUsec, valueType, nvmlReturn, value
_PACK_UI = struct.Struct("=qqIII").pack_into
_PACK_ULL = struct.Struct("=qqIIQ").pack_into
_PACK_DOUBLE = struct.Struct("=qqIId").pack_into
_PACK_SI = struct.Struct("=qqIIi").pack_into


class FieldValueCalls(NvmlCalls):
    # Set below the class, once its handlers are defined; merged per class by _field_handlers.
    FIELD_HANDLERS: ClassVar[dict]
    _merged_field_handlers: ClassVar[dict]

    @device_call
    def nvmlDeviceGetFieldValues(self, dev, count=None, values=None):
        n = _int(count)
        arr = _out(values)
        if arr is None or n is None or n < 0:
            return E_INVALID
        st = dev.state()
        now_us = int(self.m.clock.now() * 1e6)
        fast = isinstance(arr, ctypes.Array) and arr._type_ is _FV
        if not fast or not -(1 << 63) <= now_us < 1 << 63:  # else as ctypes would store it
            return self._fill_values(dev, st, now_us, n, arr)
        m = self.m
        gpu = dev.gpu if dev.is_mig else dev
        handlers = self._field_handlers()
        mirrored_calls = MIRRORED_CALLS
        # libnvidia-ml fills the array in C; here one pack per entry writes what the ctypes
        # fields would (the same bytes), with the same IndexError past the array's end.
        size = len(arr)
        end = min(n, size) * _FV_SIZE
        # A byte view: struct reads a ctypes object's buffer slower (a format string per access).
        raw = memoryview(arr).cast("B")
        error, put_return, pack_ui, pack_ull, pack_double = (_ERROR, _RETURN, _PACK_UI, _PACK_ULL, _PACK_DOUBLE)
        guard = _gpu_guard
        at = _TS - _FV_SIZE
        for field_id, scope in _IDS(raw[:end]):
            at += _FV_SIZE
            mirrored = mirrored_calls.get(field_id)
            if mirrored is None or (code := guard(m, gpu, mirrored)) is None:
                handler = handlers.get(field_id)
                if handler is None:
                    code = E_NS
                else:
                    kind, value = handler(self, dev, st, scope)
                    # the masks: what ctypes' c_uint / c_ulonglong stores keep of an int
                    if kind == UI:
                        pack_ui(raw, at, now_us, 0, UI, OK, int(value) & 0xFFFFFFFF)
                        continue
                    if kind == ULL:
                        pack_ull(raw, at, now_us, 0, ULL, OK, int(value) & 0xFFFFFFFFFFFFFFFF)
                        continue
                    if kind == SI:
                        _PACK_SI(raw, at, now_us, 0, SI, OK, int(value))
                        continue
                    if kind is not None:
                        pack_double(raw, at, now_us, 0, kind, OK, float(value))
                        continue
                    code = value
            error(raw, at, now_us, 0)
            put_return(raw, at + 20, code & 0xFFFFFFFF)  # ctypes' c_uint store masks too
        if n > size:
            arr[size]  # noqa: B018 (the IndexError ctypes raises for it)
        return OK

    def _fill_values(self, dev, st, now_us, n, arr):
        """Any other array form (or none): entry by entry through ctypes, as before."""
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
            if kind == UI:
                put_value(get(fv, "value"), "uiVal", int(value))
            elif kind == ULL:
                put_value(get(fv, "value"), "ullVal", int(value))
            elif kind == SI:
                put_value(get(fv, "value"), "siVal", int(value))
            else:
                put_value(get(fv, "value"), "dVal", float(value))
        return OK

    @classmethod
    def _field_handlers(cls) -> dict:
        """Field id -> handler(calls, dev, st, scope) -> (value type, value) or (None, code):
        every class's FIELD_HANDLERS, an earlier base's (HealthFaultCalls) winning."""
        table = cls.__dict__.get("_merged_field_handlers")
        if table is None:
            table = {}
            for klass in reversed(cls.__mro__):
                table.update(klass.__dict__.get("FIELD_HANDLERS", {}))
            cls._merged_field_handlers = table
        return table

    def _field(self, dev, st, field_id, scope):
        handler = self._field_handlers().get(field_id)
        return handler(self, dev, st, scope) if handler else (None, E_NS)


# nvml.h's power-limit fields (mW), the same numbers as their calls: CURRENT_LIMIT is the enforced
# limit (nvmlDeviceGetEnforcedPowerLimit), REQUESTED_LIMIT the management limit
# (nvmlDeviceGetPowerManagementLimit), MIN/MAX the constraints, DEFAULT the default.
POWER_LIMIT_FIELDS = {
    pynvml.NVML_FI_DEV_POWER_CURRENT_LIMIT: "limit",
    pynvml.NVML_FI_DEV_POWER_REQUESTED_LIMIT: "limit",
    pynvml.NVML_FI_DEV_POWER_MIN_LIMIT: "min",
    pynvml.NVML_FI_DEV_POWER_MAX_LIMIT: "max",
    pynvml.NVML_FI_DEV_POWER_DEFAULT_LIMIT: "default",
}


# -- one handler per field id: (calls, dev, st, scope) -> (value type, value) or (None, code) --
def _energy(calls, dev, st, scope):
    return ULL, st.energy_j * 1000


def _power(calls, dev, st, scope):
    return UI, st.power_w * 1000


def _power_limit(key):
    def answer(calls, dev, st, scope):
        return UI, int(dev.power[key] * 1000)

    return answer


def _ecc_total(key):
    def answer(calls, dev, st, scope):  # as nvmlDeviceGetTotalEccErrors answers, faults included
        return ULL, ecc_total(calls.m, dev, key)

    return answer


def _remapped(index):
    def answer(calls, dev, st, scope):  # as nvmlDeviceGetRemappedRows answers, faults included
        return UI, remapped_rows(calls.m, dev)[index]

    return answer


def _memory_temp(calls, dev, st, scope):
    captured = (dev.profile.get("captured") or {}).get("idle")
    if captured is not None:  # an imported capture: its idle run's memory-GPU offset, or N/A
        mem, gpu = captured.get("memory_temp_c"), captured.get("temp_c")
        return (UI, st.temp_c + (mem - gpu)) if mem is not None and gpu is not None else (None, E_NS)
    if str(dev.profile["memory"].get("type", "")).startswith("HBM"):
        return UI, st.temp_c + 6
    return None, E_NS


def _tlimit(key):
    def answer(calls, dev, st, scope):
        from gpuagent.sim.fakelib.power_thermal import tlimit_threshold

        value = tlimit_threshold(dev.gpu if dev.is_mig else dev, key)
        # nvml.h does not give these fields' value type; a signed int as the T.Limit lines read
        return (None, E_NS) if value is None else (SI, int(value))

    return answer


def _power_average(calls, dev, st, scope):
    # nvml.h: NVML_FI_DEV_POWER_AVERAGE is "supported on Ampere (except GA100) or newer"; the
    # RTX 2080 SUPER capture shows "Average Power Draw: N/A".
    gpu = dev.gpu if dev.is_mig else dev
    device_id = gpu.pci_device_id >> 16
    if gpu.profile.get("architecture") in INSTANT_ARCHS or 0x2080 <= device_id <= 0x20FF:
        return None, E_NS
    return UI, st.power_w * 1000


INSTANT_ARCHS = frozenset({"Kepler", "Maxwell", "Pascal", "Volta", "Turing", "unknown"})


def _ecc_mode(calls, dev, st, scope):
    # nvmlDeviceGetEccMode's current and pending modes (the simulator keeps one).
    gpu = dev.gpu if dev.is_mig else dev
    return (UI, 1 if gpu.ecc.get("enabled") else 0) if gpu.ecc else (None, E_NS)


def _pcie_replays(calls, dev, st, scope):
    return UI, dev.pcie_replays


def _pcie_rollovers(calls, dev, st, scope):
    return UI, 0  # the replay counter never wraps in a simulated run


# Field id -> its name in a profile's clocks_event_reason_counters_start_us (the capture's counters).
REASON_COUNTER_NAMES = {
    pynvml.nvmlClocksEventReasonSwPowerCap: "sw_power_cap",
    pynvml.nvmlClocksEventReasonSyncBoost: "sync_boost",
    pynvml.nvmlClocksEventReasonSwThermalSlowdown: "sw_thermal_slowdown",
    pynvml.nvmlClocksEventReasonHwThermalSlowdown: "hw_thermal_slowdown",
    pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown: "hw_power_brake",
}


def _reason_time(bit):
    name = REASON_COUNTER_NAMES[bit]

    def answer(calls, dev, st, scope):
        if not dev.reason_counters:
            return None, E_NS
        # Counted since the driver loaded: from where the capture's counter stood (us -> ns).
        start_us = (dev.profile.get("clocks_event_reason_counters_start_us") or {}).get(name) or 0
        return ULL, int(start_us) * 1000 + st.reason_s[bit] * 1e9

    return answer


def _violation_time(calls, dev, st, scope):
    # NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT / LOW_UTILIZATION / RELIABILITY, answered where the
    # reason counters are (the same perf-policy family, nvml.h). The load model never holds a GPU
    # below its application clocks for these (it has no such limiter): 0 ns, a healthy card's.
    return (ULL, 0) if dev.reason_counters else (None, E_NS)


def _pcie_bytes(share):
    def answer(calls, dev, st, scope):
        total = int(st.util_s / 100 * dev.model.pcie_kbps * 1000 * share)
        # nvml.h: "PCIe transmit bytes. Value can be wrapped." It names no width; the sim
        # wraps at 2**32 (PCIE_COUNTER_WRAP), so readers see a wrap within a run.
        return ULL, total % PCIE_COUNTER_WRAP

    return answer


def _nvlink(dev):
    return dev.nvlink if not dev.mig_enabled else None  # no NVLink queries in MIG mode


def _nvlink_link_count(calls, dev, st, scope):
    nv = _nvlink(dev)
    return (UI, nv["links"]) if nv else (None, E_NS)


def _nvlink_state(calls, dev, st, scope):
    # nvml.h: "NVLink State - Active,Inactive", scopeId = the link; the value
    # nvmlDeviceGetNvLinkState answers for that link.
    nv = _nvlink(dev)
    if not nv:
        return None, E_NS
    if not 0 <= scope < int(nv["links"]):
        return None, E_INVALID
    active = _link_active(calls.m, dev)
    return UI, pynvml.NVML_FEATURE_ENABLED if active else pynvml.NVML_FEATURE_DISABLED


def _nvlink_speed(calls, dev, st, scope):
    nv = _nvlink(dev)
    return (UI, nv.get("speed_mbps", 25000)) if nv else (None, E_NS)


def _nvlink_throughput(raw):
    def answer(calls, dev, st, scope):
        nv = _nvlink(dev)
        if not nv:
            return None, E_NS
        total_kib = _nvlink_bytes(calls.m, dev, st.util_s) / 1024
        if raw:
            total_kib *= 1.06
        links = int(nv["links"])
        return ULL, total_kib / links if scope < links else total_kib

    return answer


FieldValueCalls.FIELD_HANDLERS = {
    pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION: _energy,
    pynvml.NVML_FI_DEV_ENERGY: _energy,
    pynvml.NVML_FI_DEV_POWER_INSTANT: _power,
    pynvml.NVML_FI_DEV_POWER_AVERAGE: _power_average,
    pynvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT: _tlimit("shutdown"),
    pynvml.NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT: _tlimit("slowdown"),
    pynvml.NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT: _tlimit("memory_max"),
    pynvml.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT: _tlimit("gpu_max"),
    **{f: _power_limit(key) for f, key in POWER_LIMIT_FIELDS.items()},
    **{f: _ecc_total(key) for f, key in ECC_TOTAL_FIELDS.items()},
    **{f: _remapped(index) for f, index in REMAP_FIELDS.items()},
    pynvml.NVML_FI_DEV_MEMORY_TEMP: _memory_temp,
    pynvml.NVML_FI_DEV_ECC_CURRENT: _ecc_mode,
    pynvml.NVML_FI_DEV_ECC_PENDING: _ecc_mode,
    pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: _pcie_replays,
    pynvml.NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER: _pcie_rollovers,
    **{f: _reason_time(bit) for f, bit in REASON_TIME_FIELDS.items()},
    pynvml.NVML_FI_DEV_PERF_POLICY_BOARD_LIMIT: _violation_time,
    pynvml.NVML_FI_DEV_PERF_POLICY_LOW_UTILIZATION: _violation_time,
    pynvml.NVML_FI_DEV_PERF_POLICY_RELIABILITY: _violation_time,
    pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: _pcie_bytes(0.12),
    pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: _pcie_bytes(0.2),
    pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT: _nvlink_link_count,
    pynvml.NVML_FI_DEV_NVLINK_GET_STATE: _nvlink_state,
    pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON: _nvlink_speed,
    pynvml.NVML_FI_DEV_NVLINK_GET_SPEED: _nvlink_speed,
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: _nvlink_throughput(False),
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: _nvlink_throughput(False),
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX: _nvlink_throughput(True),
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX: _nvlink_throughput(True),
}
