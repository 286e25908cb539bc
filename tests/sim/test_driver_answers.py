"""The simulator answers as real drivers do, each answer checked against nvml.h or a capture."""

from __future__ import annotations

import json

import pynvml
import pytest

from gpuagent.sim.capture_import import import_capture
from gpuagent.sim.fakelib import FakeNvmlLib
from gpuagent.sim.profile import load_profile
from tests.captures import CAPTURES


def test_gpu_instance_profile_ids_are_not_indices(simulated_fleet):
    # `nvidia-smi mig -lgip` on an H100 80GB: 1g.10gb 19, 1g.20gb 15, 2g.20gb 14, 3g.40gb 9,
    # 4g.40gb 5, 7g.80gb 0 (issue 16); the table is indexed by NVML_GPU_INSTANCE_PROFILE_*.
    simulated_fleet("h100-sxm-mig:1")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    got = {}
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
        except pynvml.NVMLError_NotSupported:
            continue
        got[info.name.removeprefix("MIG ")] = info.id
    assert got == {
        "1g.10gb": 19,
        "1g.20gb": 15,
        "2g.20gb": 14,
        "3g.40gb": 9,
        "4g.40gb": 5,
        "7g.80gb": 0,
    }
    gi = pynvml.nvmlDeviceGetGpuInstanceById(h, 1)
    assert pynvml.nvmlGpuInstanceGetInfo(gi).profileId == 9  # the 3g.40gb instance: its id


def test_compute_instance_profiles_named_as_nvidia_smi_lcip(simulated_fleet):
    simulated_fleet("h100-sxm-mig:1")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(h, 1)
    shared = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    names = []
    for index in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, index, shared)
        except pynvml.NVMLError_NotSupported:
            continue
        names.append((info.id, info.sliceCount, info.name))
    assert names == [(0, 1, "MIG 1c.3g.40gb"), (1, 2, "MIG 2c.3g.40gb"), (2, 3, "MIG 3g.40gb")]


def test_attributes_only_on_mig_handles(simulated_fleet):
    # nvml.h (nvmlDeviceGetAttributes_v2): "This API currently only supports MIG device
    # handles"; NOT_SUPPORTED is its answer for "not supported by the device".
    simulated_fleet("h100-sxm-mig:1,h100-sxm:1")
    for index in (0, 1):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetAttributes(pynvml.nvmlDeviceGetHandleByIndex(index))
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pynvml.nvmlDeviceGetHandleByIndex(0), 0)
    attrs = pynvml.nvmlDeviceGetAttributes(mig)
    assert (attrs.gpuInstanceSliceCount, attrs.computeInstanceSliceCount) == (3, 3)


def test_event_wait_answers_gpu_is_lost_once_per_set(simulated_fleet, sim_clock):
    # nvml.h (nvmlEventSetWait_v2): NVML_ERROR_GPU_IS_LOST "if a GPU has fallen off the bus".
    machine = simulated_fleet("h100-sxm:2")
    es = pynvml.nvmlEventSetCreate()
    for index in (0, 1):
        pynvml.nvmlDeviceRegisterEvents(
            pynvml.nvmlDeviceGetHandleByIndex(index), pynvml.nvmlEventTypeXidCriticalError, es
        )
    sim_clock.advance(1)
    machine.lose_gpu(1)
    assert pynvml.nvmlEventSetWait_v2(es, 0).eventData == 79  # the XID comes first
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlEventSetWait_v2(es, 0)
    machine.inject_xid(0, 48)
    assert pynvml.nvmlEventSetWait_v2(es, 0).eventData == 48  # the other GPU is still heard
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 0)
    pynvml.nvmlEventSetFree(es)


def test_symbols_outside_the_drivers_export_list_are_not_found(simulated_fleet, tmp_path):
    # captures' README: "a call outside [nvml-symbols] answers NVML_ERROR_FUNCTION_NOT_FOUND".
    profile = load_profile("h100-sxm")
    offered = [name for name in dir(FakeNvmlLib) if name.startswith("nvml")]
    profile["nvml_symbols"] = [name for name in offered if name != "nvmlDeviceGetPowerUsage"]
    path = tmp_path / "old-driver.json"
    path.write_text(json.dumps(profile))
    simulated_fleet(str(path))
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetPowerUsage(h)


def test_capture_symbol_list_is_kept_and_covers_what_the_sim_offers(simulated_fleet, tmp_path):
    path = CAPTURES / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
    if not path.exists():
        pytest.skip(f"H100 capture not available (expected under {CAPTURES})")
    profile = import_capture(path)
    assert len(profile["nvml_symbols"]) > 300 and "nvmlGpmSampleGet" in profile["nvml_symbols"]
    out = tmp_path / "h100.json"
    out.write_text(json.dumps(profile))
    simulated_fleet(str(out))
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetPowerUsage(h) > 0
