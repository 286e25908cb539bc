"""Health readings the verdict needs beyond the ECC / row-remapper calls: the GPU recovery action,
PCIe error counters, per-link NVLink error counters (field values) and the NVSwitch fabric info.

Values come from the health faults scheduled on the machine (gpuagent.sim.health_faults); with
none, a card reports what its capture shows: recovery action None (every 590+/595 capture, GeForce
included), zero error counters, and on Hopper NVSwitch boards fabric "Completed / Success" with
the health fields N/A. The PCIe error-count fields (NVML_FI_DEV_PCIE_COUNT_*) answer on Hopper
and newer only ("where the driver has them"); elsewhere NOT_SUPPORTED, as is the fabric info.

This class must come before FieldValueCalls in FakeNvmlLib's bases: its FIELD_HANDLERS answer the
field ids above ahead of FieldValueCalls' own.
"""

from __future__ import annotations

import ctypes
from typing import ClassVar

import pynvml

from gpuagent.sim.fakelib.args import (
    _GET,
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
from gpuagent.sim.health_faults import FABRIC_STATES, counter, fabric_default, pcie_replays, peek

UI = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
ULL = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG

PCIE_COUNT_FIELDS = {
    pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS: "pcie_err",
    pynvml.NVML_FI_DEV_PCIE_COUNT_NAKS_RECEIVED: None,
    pynvml.NVML_FI_DEV_PCIE_COUNT_RECEIVER_ERROR: None,
    pynvml.NVML_FI_DEV_PCIE_COUNT_BAD_TLP: None,
    pynvml.NVML_FI_DEV_PCIE_COUNT_NAKS_SENT: None,
    pynvml.NVML_FI_DEV_PCIE_COUNT_BAD_DLLP: None,
    pynvml.NVML_FI_DEV_PCIE_COUNT_NON_FATAL_ERROR: None,
    pynvml.NVML_FI_DEV_PCIE_COUNT_FATAL_ERROR: None,
    pynvml.NVML_FI_DEV_PCIE_COUNT_UNSUPPORTED_REQ: None,
    pynvml.NVML_FI_DEV_PCIE_COUNT_LCRC_ERROR: None,
    pynvml.NVML_FI_DEV_PCIE_COUNT_LANE_ERROR: None,
}
# Per-link NVLink data-link error counters (scopeId = link).
NVLINK_DL_FIELDS = {
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC: "nvlink_crc",
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY: "nvlink_replay",
    pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY: "nvlink_recovery",
}
FABRIC_VERSIONS = (pynvml.nvmlGpuFabricInfo_v2, pynvml.nvmlGpuFabricInfo_v3)
NEWER_PCIE_COUNTERS = ("Hopper", "Blackwell")


class HealthFaultCalls(NvmlCalls):
    FIELD_HANDLERS: ClassVar[dict]  # set below the class, once its handlers are defined

    @device_call
    def nvmlDeviceGetGpuFabricInfoV(self, dev, info=None):
        o = _out(info)
        if o is None:
            return E_INVALID
        if _version(o) not in FABRIC_VERSIONS:
            return E_VERSION
        state = peek(self.m, dev.index)
        name = (state.fabric_state(self.m.now()) if state else None) or fabric_default(dev)
        if name is None:
            return E_NS
        fabric_state, status, mask = FABRIC_STATES[name]
        ctypes.memset(ctypes.addressof(_GET(o, "clusterUuid")), 0, pynvml.NVML_GPU_FABRIC_UUID_LEN)
        _SET(o, "status", status)
        _SET(o, "cliqueId", 0)
        _SET(o, "state", fabric_state)
        _SET(o, "healthMask", mask)
        if _GET(o, "version") == pynvml.nvmlGpuFabricInfo_v3:
            _SET(
                o,
                "healthSummary",
                pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY
                if mask
                else pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED,
            )
        return OK


# -- field handlers, (calls, dev, st, scope) -> (value type, value) or (None, code) -----------
def _recovery_action(calls, dev, st, scope):
    m = calls.m
    state = peek(m, dev.index)
    return UI, state.recovery_action(m.now()) if state else pynvml.NVML_GPU_RECOVERY_ACTION_NONE


def _pcie_replays(calls, dev, st, scope):
    return UI, pcie_replays(calls.m, dev)


def _pcie_count(kind):
    def answer(calls, dev, st, scope):
        if dev.profile.get("architecture") not in NEWER_PCIE_COUNTERS:
            return None, E_NS
        return UI, counter(calls.m, dev, kind) if kind else 0

    return answer


def _nvlink_dl(kind):
    def answer(calls, dev, st, scope):
        if not dev.nvlink or dev.mig_enabled:  # no NVLink, or NVLink queries in MIG mode
            return None, E_NS
        if not 0 <= int(scope) < int(dev.nvlink["links"]):
            return None, E_INVALID
        return ULL, counter(calls.m, dev, kind, int(scope))

    return answer


# Read before FieldValueCalls' handlers (see FieldValueCalls._field_handlers).
HealthFaultCalls.FIELD_HANDLERS = {
    pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: _recovery_action,
    pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: _pcie_replays,
    **{f: _pcie_count(kind) for f, kind in PCIE_COUNT_FIELDS.items()},
    **{f: _nvlink_dl(kind) for f, kind in NVLINK_DL_FIELDS.items()},
}
