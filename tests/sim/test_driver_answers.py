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


@pytest.mark.parametrize("name", ["l40s", "rtx4090", "h100-sxm", "h200", "a100-sxm4"])
def test_applications_clocks_deprecated_from_driver_590(name, simulated_fleet):
    # Every 590, 595 and 610 capture: "Applications Clocks ... Requested functionality has
    # been deprecated" (NVML_ERROR_DEPRECATED); the A100 profile comes from a 535 capture.
    profile = load_profile(name)
    simulated_fleet(name)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    if int(profile["driver_version"].split(".")[0]) >= 590:
        for call in (
            pynvml.nvmlDeviceGetApplicationsClock,
            pynvml.nvmlDeviceGetDefaultApplicationsClock,
        ):
            with pytest.raises(pynvml.NVMLError_Deprecated):
                call(h, pynvml.NVML_CLOCK_GRAPHICS)
    else:
        assert pynvml.nvmlDeviceGetApplicationsClock(h, pynvml.NVML_CLOCK_GRAPHICS) > 0


def _gpm_metrics(h, first_to_second_s, sim_clock):
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(h, s1)
    sim_clock.advance(first_to_second_s)
    pynvml.nvmlGpmSampleGet(h, s2)
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = 1
    mg.sample1, mg.sample2 = s1, s2
    mg.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    try:
        return pynvml.nvmlGpmMetricsGet(mg).metrics[0].value
    finally:
        pynvml.nvmlGpmSampleFree(s1)
        pynvml.nvmlGpmSampleFree(s2)


def test_gpm_samples_must_be_more_than_100ms_apart(simulated_fleet, sim_clock):
    # nvml.h (nvmlGpmSampleGet / nvmlGpmMetricsGet): "The interval between these two
    # nvmlGpmSampleGet() calls should be greater than 100ms"; no code is named, the sim
    # answers NOT_READY.
    simulated_fleet("h100-sxm:1", scenario="training")
    sim_clock.advance(5)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    for apart in (0.0, 0.1):
        with pytest.raises(pynvml.NVMLError_NotReady):
            _gpm_metrics(h, apart, sim_clock)
    assert 0 <= _gpm_metrics(h, 0.2, sim_clock) <= 100


def test_pcie_byte_counters_wrap(simulated_fleet, sim_clock):
    # nvml.h: NVML_FI_DEV_PCIE_COUNT_TX_BYTES / RX_BYTES "Value can be wrapped" (no width
    # named; the sim wraps at 2**32).
    from gpuagent.sim.fakelib.fields import PCIE_COUNTER_WRAP

    simulated_fleet("h100-sxm:1", scenario="training")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    tx = pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES
    seen, wrapped = [], False
    for _ in range(40):
        sim_clock.advance(30)
        (fv,) = pynvml.nvmlDeviceGetFieldValues(h, [tx])
        assert fv.nvmlReturn == pynvml.NVML_SUCCESS
        value = fv.value.ullVal
        assert 0 <= value < PCIE_COUNTER_WRAP
        wrapped = wrapped or bool(seen and value < seen[-1])
        seen.append(value)
    assert wrapped
