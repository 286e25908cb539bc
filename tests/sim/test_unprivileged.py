"""@unprivileged: what nvml.h marks as needing root/admin answers NO_PERMISSION."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from gpuagent.errors import AgentError
from gpuagent.sim.fleet import parse_spec
from gpuagent.sim.machine import privileged_calls


def test_privileged_list_names_its_header():
    table = privileged_calls()
    assert "NVML_API_VERSION 13" in table["header"]
    # nvml.h: "Requires privileged user" / "... only if the caller has appropriate privileges".
    assert {"nvmlDeviceGetGpuInstances", "nvmlDeviceGetGpuInstanceById"} <= set(table["always"])
    assert {
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetBAR1MemoryInfo",
        "nvmlDeviceGetComputeRunningProcesses_v3",
    } <= set(table["mig_parent"])
    assert table["mig_parent_events"] == ["nvmlEventSetWait_v2"]


def test_mig_parent_refuses_what_needs_privileges(simulated_fleet):
    simulated_fleet("h100-sxm-mig:1@unprivileged", scenario="training")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    for call in (
        lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
        lambda: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
        lambda: pynvml.nvmlDeviceGetBAR1MemoryInfo(h),
        lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
        lambda: pynvml.nvmlDeviceGetGpuInstanceById(h, 1),
        lambda: pynvml.nvmlDeviceGetGpuInstances(
            h, 9, (pynvml.c_nvmlGpuInstance_t * 7)(), ctypes.byref(ctypes.c_uint(0))
        ),
    ):
        with pytest.raises(pynvml.NVMLError_NoPermission):
            call()
    # Per-instance readings on the MIG device handles stay readable, and so do the
    # profile tables (nvml.h marks neither as privileged).
    m = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert pynvml.nvmlDeviceGetMemoryInfo(m).total > 0
    assert len(pynvml.nvmlDeviceGetComputeRunningProcesses(m)) == 1
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    assert info.name == "MIG 3g.40gb"
    assert pynvml.nvmlDeviceGetPowerUsage(h) > 0


def test_without_mig_only_the_always_privileged_calls_refuse(simulated_fleet):
    simulated_fleet("h100-sxm:1@unprivileged")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMemoryInfo(h).total > 0
    assert pynvml.nvmlDeviceGetBAR1MemoryInfo(h).bar1Total > 0
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 9)


def test_modifier_applies_to_its_item_only():
    items = parse_spec("l40s:2,h100-sxm-mig:1@unprivileged")
    assert items[0].faults == []
    assert items[1].faults[0].gpus == (2,)
    with pytest.raises(AgentError, match="unprivileged"):
        parse_spec("h100-sxm:1@unprivileged=1")


def test_per_instance_xids_hidden_without_privileges(simulated_fleet, sim_clock):
    # nvml.h (nvmlEventSetWait_v2): without privileges "only the events which affect all
    # the instances (i.e. whole device) are reported".
    for spec, want in (("h100-sxm-mig:1", [31, 48]), ("h100-sxm-mig:1@unprivileged", [48])):
        machine = simulated_fleet(spec)
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        es = pynvml.nvmlEventSetCreate()
        pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
        sim_clock.advance(1)
        machine.inject_xid(0, 31, gi_id=1)
        machine.inject_xid(0, 48)
        got = []
        for _ in range(3):
            try:
                got.append(pynvml.nvmlEventSetWait_v2(es, 0).eventData)
            except pynvml.NVMLError_Timeout:
                break
        assert got == want, spec
        pynvml.nvmlEventSetFree(es)
