"""Simulator health faults at the libnvidia-ml boundary: what pynvml's own wrappers read back."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from gpuagent.errors import AgentError
from gpuagent.sim.faults import parse_fault
from gpuagent.sim.health_faults import HealthFault


def handles():
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


def field(handle, field_id, scope=None):
    [fv] = pynvml.nvmlDeviceGetFieldValues(handle, [(field_id, scope) if scope is not None else field_id])
    return fv


def test_xid_79_answers_gpu_is_lost_until_a_reset(simulated_fleet, sim_clock):
    machine = simulated_fleet("h100-sxm:2@xid=1:79:5s@reset=1:30s")
    a, b = handles()
    sim_clock.set(4)
    assert pynvml.nvmlDeviceGetUUID(b)
    sim_clock.set(5)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetUUID(b)
    assert pynvml.nvmlDeviceGetUUID(a)  # the other GPU keeps answering
    sim_clock.set(30)
    assert pynvml.nvmlDeviceGetUUID(b) == pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(1))
    machine.lose_gpu(1, at=40)  # lost again after the reset
    sim_clock.set(41)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetPowerUsage(b)


def test_recovery_action_field_until_a_reset(simulated_fleet, sim_clock):
    simulated_fleet("h100-sxm:1@recovery=0:drain_p2p:10s@reset=0:20s,rtx4090:1")
    h100, rtx = handles()
    fid = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    assert (field(h100, fid).nvmlReturn, field(h100, fid).value.uiVal) == (0, 0)
    assert field(rtx, fid).value.uiVal == pynvml.NVML_GPU_RECOVERY_ACTION_NONE  # GeForce captures: None
    sim_clock.set(10)
    assert field(h100, fid).value.uiVal == pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P
    sim_clock.set(20)
    assert field(h100, fid).value.uiVal == pynvml.NVML_GPU_RECOVERY_ACTION_NONE


def test_error_counters_grow_at_their_rate(simulated_fleet, sim_clock):
    simulated_fleet("h100-sxm:1@pcie_replay=0:30/m@pcie_err=0:1:10s@nvlink_replay=0:17:2,l40s:1")
    h100, l40s = handles()
    sim_clock.set(60)
    assert pynvml.nvmlDeviceGetPcieReplayCounter(h100) == 30
    assert field(h100, pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER).value.uiVal == 30
    assert field(h100, pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS).value.uiVal == 50
    assert field(l40s, pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS).nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    replay = field(h100, pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 17)
    assert (replay.nvmlReturn, replay.value.ullVal) == (0, 120)
    assert field(h100, pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 16).value.ullVal == 0
    assert field(h100, pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY, 18).nvmlReturn == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert pynvml.nvmlDeviceGetNvLinkErrorCounter(h100, 17, pynvml.NVML_NVLINK_ERROR_DL_REPLAY) == 120
    assert field(l40s, pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC, 0).nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_fabric_info_on_nvswitch_hopper_only(simulated_fleet, sim_clock):
    simulated_fleet("h100-sxm:1@fabric=0:in_progress:5s,a100-sxm4:1,l40s:1")
    h100, a100, l40s = handles()
    info = pynvml.c_nvmlGpuFabricInfo_v3_t()
    pynvml.nvmlDeviceGetGpuFabricInfoV(h100, ctypes.byref(info))
    assert (info.state, info.status, info.cliqueId, info.healthMask) == (
        pynvml.NVML_GPU_FABRIC_STATE_COMPLETED,
        pynvml.NVML_SUCCESS,
        0,
        0,  # the H100 SXM capture
    )
    sim_clock.set(5)
    v2 = pynvml.c_nvmlGpuFabricInfo_v2_t()
    pynvml.nvmlDeviceGetGpuFabricInfoV(h100, ctypes.byref(v2))
    assert v2.state == pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS
    for other in (a100, l40s):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetGpuFabricInfoV(other, ctypes.byref(pynvml.c_nvmlGpuFabricInfo_v3_t()))
    bad = pynvml.c_nvmlGpuFabricInfo_v3_t()
    bad.version = 0x7
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlDeviceGetGpuFabricInfoV(h100, ctypes.byref(bad))


def test_health_faults_parse_and_apply_from_code(simulated_fleet, sim_clock):
    machine = simulated_fleet("h100-sxm:2")
    fault = parse_fault("remap=1:failure:3s")
    assert fault == HealthFault("remap", 1, 3.0, "failure")
    machine.apply(fault)
    sim_clock.set(3)
    assert pynvml.nvmlDeviceGetRemappedRows(handles()[1])[3] == 1
    with pytest.raises(AgentError, match="no simulated GPU 5"):
        machine.apply(HealthFault("reset", 5))
    with pytest.raises(AgentError, match="GPU 2 is not in this item"):
        parse_fault("reset=2:1s", count=2)


@pytest.mark.parametrize("spec", ["h100-sxm:1@lost=0:10s@reset=0:20s", "h100-sxm:1@reset=0:20s@lost=0:10s"])
def test_a_scheduled_reset_ends_a_loss_whatever_the_order(simulated_fleet, sim_clock, spec):
    simulated_fleet(spec)
    (h,) = handles()
    sim_clock.set(15)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetUUID(h)
    sim_clock.set(20)
    assert pynvml.nvmlDeviceGetUUID(h)
