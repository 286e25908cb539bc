"""GPM metrics (Hopper): whole GPU and per MIG instance, built the way pynvml users build them."""

import pynvml
import pytest

METRICS = (
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    pynvml.NVML_GPM_METRIC_FP16_UTIL,
    pynvml.NVML_GPM_METRIC_FP32_UTIL,
    pynvml.NVML_GPM_METRIC_FP64_UTIL,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
    pynvml.NVML_GPM_METRIC_SM_UTIL,
)


def metrics_between(s1, s2, ids=METRICS):
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = len(ids)
    mg.sample1 = s1
    mg.sample2 = s2
    for i, mid in enumerate(ids):
        mg.metrics[i].metricId = mid
    pynvml.nvmlGpmMetricsGet(mg)
    return {mg.metrics[i].metricId: (mg.metrics[i].nvmlReturn, mg.metrics[i].value) for i in range(len(ids))}


def test_gpm_whole_gpu(simulated_fleet, sim_clock):
    simulated_fleet("h100-sxm:2", scenario="training", seed=4)
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(h, s1)
    sim_clock.advance(5)
    pynvml.nvmlGpmSampleGet(h, s2)
    got = metrics_between(s1, s2)
    assert all(ret == pynvml.NVML_SUCCESS for ret, _ in got.values())
    dram = got[pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL][1]
    assert 0 < dram <= 100
    assert 0 < got[pynvml.NVML_GPM_METRIC_SM_OCCUPANCY][1] < got[pynvml.NVML_GPM_METRIC_SM_UTIL][1] <= 100
    assert got[pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL][1] > got[pynvml.NVML_GPM_METRIC_FP64_UTIL][1]
    assert got[pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC][1] > 0
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = 7
    mg.sample1, mg.sample2 = s1, s2
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlGpmMetricsGet(mg)
    pynvml.nvmlGpmSampleFree(s1)
    pynvml.nvmlGpmSampleFree(s2)


def test_gpm_idle_is_zero_and_unknown_metric_not_supported(simulated_fleet, sim_clock):
    simulated_fleet("h200:1", scenario="idle")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(h, s1)
    sim_clock.advance(1)
    pynvml.nvmlGpmSampleGet(h, s2)
    got = metrics_between(
        s1,
        s2,
        (
            pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
            pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL,
            pynvml.NVML_GPM_METRIC_NVDEC_7_UTIL,
            pynvml.NVML_GPM_METRIC_C2C_TOTAL_TX_PER_SEC,
        ),
    )
    assert got[pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL] == (0, 0.0)
    # Hopper has 7 NVDECs (0-6): an idle one answers 0, the absent eighth NOT_SUPPORTED (issue 32).
    assert got[pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL] == (0, 0.0)
    assert got[pynvml.NVML_GPM_METRIC_NVDEC_7_UTIL][0] == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert got[pynvml.NVML_GPM_METRIC_C2C_TOTAL_TX_PER_SEC][0] == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_gpm_per_mig_instance(simulated_fleet, sim_clock):
    simulated_fleet("h100-sxm-mig:1", scenario="training")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    values = {}
    for n in range(2):
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, n)
        gi = pynvml.nvmlDeviceGetGpuInstanceId(mig)
        s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
        pynvml.nvmlGpmMigSampleGet(h, gi, s1)
        sim_clock.advance(2)
        pynvml.nvmlGpmMigSampleGet(h, gi, s2)
        got = metrics_between(s1, s2)
        values[gi] = got[pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL][1]
        assert got[pynvml.NVML_GPM_METRIC_SM_OCCUPANCY][0] == 0
    assert all(v > 0 for v in values.values()) and len(set(values.values())) == 2
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlGpmMigSampleGet(h, 42, pynvml.nvmlGpmSampleAlloc())


def test_gpm_mixing_devices_is_invalid(simulated_fleet):
    simulated_fleet("h100-sxm:2")
    a, b = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    s1, s2 = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(a, s1)
    pynvml.nvmlGpmSampleGet(b, s2)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        metrics_between(s1, s2)
