"""The fake libnvidia-ml as pynvml sees it: install, argument checks, NOT_SUPPORTED patterns."""

import ctypes

import pynvml
import pytest

from gpuagent import sim
from gpuagent.gpus.gpu import Gpu


def handles():
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


def code_of(fn, *args):
    try:
        fn(*args)
        return pynvml.NVML_SUCCESS
    except pynvml.NVMLError as exc:
        return exc.value


def test_install_makes_fake_the_library_and_uninstall_unloads_it():
    machine = sim.install("l40s:2", seed=3)
    try:
        assert isinstance(pynvml.nvmlLib, sim.FakeNvmlLib)
        assert pynvml._nvmlGetFunctionPointer_cache == {}
        pynvml.nvmlInit()
        assert pynvml.nvmlDeviceGetCount() == 2
        assert "nvmlDeviceGetCount_v2" in pynvml._nvmlGetFunctionPointer_cache
        assert sim.installed() is machine
        pynvml.nvmlShutdown()
    finally:
        sim.uninstall()
    assert pynvml.nvmlLib is None
    assert pynvml._nvmlGetFunctionPointer_cache == {}
    assert sim.installed() is None


def test_calls_before_init_are_uninitialized(sim_clock):
    sim.install("l40s:1", clock=sim_clock)
    try:
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()
    finally:
        sim.uninstall()


def test_p2p_caps_tuple_is_refused_like_ctypes(simulated_fleet):
    simulated_fleet("l40s:2")
    a, b = handles()
    assert isinstance(pynvml.NVML_P2P_CAPS_INDEX_READ, tuple)  # the trap in current nvidia-ml-py
    with pytest.raises(ctypes.ArgumentError, match="argument 3: TypeError: Don't know how to convert parameter 3"):
        pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_READ)
    assert pynvml.nvmlDeviceGetP2PStatus(a, b, 0) == pynvml.NVML_P2P_STATUS_OK
    with pytest.raises(ctypes.ArgumentError) as real:  # what real ctypes says for the same call
        ctypes.CDLL(None).abs(1, 2, pynvml.NVML_P2P_CAPS_INDEX_READ)
    assert str(real.value) == "argument 3: TypeError: Don't know how to convert parameter 3"


@pytest.mark.parametrize("bad", [1.5, [1], {"a": 1}, object()])
def test_unconvertible_arguments_raise_argument_error(simulated_fleet, bad):
    simulated_fleet("h100-sxm:1")
    (h,) = handles()
    with pytest.raises(ctypes.ArgumentError, match="argument 2: TypeError"):
        pynvml.nvmlDeviceGetNvLinkState(h, bad)  # pynvml passes the link number through as is


def test_int_too_big_overflows_like_ctypes(simulated_fleet):
    simulated_fleet("h100-sxm:1")
    (h,) = handles()
    with pytest.raises(ctypes.ArgumentError, match="argument 2: OverflowError: int too long to convert"):
        pynvml.nvmlDeviceGetNvLinkState(h, 1 << 70)
    ctypes_lib = ctypes.CDLL(None)  # the same refusal from real ctypes
    with pytest.raises(ctypes.ArgumentError, match="argument 1: OverflowError: int too long to convert"):
        ctypes_lib.abs(1 << 70)


def test_bad_handle_is_invalid_argument(simulated_fleet):
    simulated_fleet("l40s:1")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetPowerUsage(pynvml.c_nvmlDevice_t())
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetHandleByIndex(5)


def test_unknown_symbol_is_function_not_found(simulated_fleet):
    simulated_fleet("l40s:1")
    (h,) = handles()
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetC2cModeInfoV(h)


def test_error_strings_work(simulated_fleet):
    simulated_fleet("l40s:1")
    (h,) = handles()
    with pytest.raises(pynvml.NVMLError) as info:
        pynvml.nvmlDeviceGetFanSpeed(h)
    assert str(info.value) == "Not Supported"


def test_identity_and_static_facts(simulated_fleet):
    machine = simulated_fleet("l40s:1,h100-sxm:1", seed=1)
    l40s, h100 = handles()
    assert pynvml.nvmlDeviceGetName(l40s) == "NVIDIA L40S"
    assert pynvml.nvmlDeviceGetName(h100) == "NVIDIA H100 80GB HBM3"
    assert pynvml.nvmlDeviceGetPciInfo_v3(l40s).pciDeviceId == 0x26B910DE
    assert pynvml.nvmlDeviceGetArchitecture(h100) == pynvml.NVML_DEVICE_ARCH_HOPPER
    assert pynvml.nvmlDeviceGetMemoryBusWidth(l40s) == 384
    assert pynvml.nvmlDeviceGetMaxClockInfo(l40s, pynvml.NVML_CLOCK_MEM) == 9001
    assert pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h100) == [200000, 700000]
    assert pynvml.nvmlDeviceGetEnforcedPowerLimit(h100) == 700000
    assert pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h100) == 5
    assert pynvml.nvmlDeviceGetMaxPcieLinkWidth(l40s) == 16
    uuid = pynvml.nvmlDeviceGetUUID(h100)
    assert uuid.startswith("GPU-") and uuid != pynvml.nvmlDeviceGetUUID(l40s)
    same = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    assert pynvml.nvmlDeviceGetName(same) == "NVIDIA H100 80GB HBM3"
    bus = pynvml.nvmlDeviceGetPciInfo_v3(h100).busId
    assert pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByPciBusId(bus)) == "NVIDIA H100 80GB HBM3"
    assert [g.name for g in machine.gpus] == ["NVIDIA L40S", "NVIDIA H100 80GB HBM3"]
    assert machine.gpus[0].arch == "Ada Lovelace"


def test_memory_v2_struct_version_is_checked(simulated_fleet):
    simulated_fleet("l40s:1", scenario="training")
    (h,) = handles()
    mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert mem.total == 46068 << 20 and mem.reserved == 609 << 20
    assert mem.used + mem.free + mem.reserved == mem.total and mem.used > 0
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        pynvml.nvmlDeviceGetMemoryInfo(h, version=0x01000028)
    v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
    assert v1.total == mem.total and v1.used == mem.used + mem.reserved


def test_not_supported_where_the_real_cards_say_na(simulated_fleet):
    simulated_fleet("l40s:1,h100-sxm:1,rtx4090:1,a100-sxm4:1")
    l40s, h100, rtx, a100 = handles()
    NS = pynvml.NVML_ERROR_NOT_SUPPORTED
    # fan: N/A on the fan-less datacenter cards, a reading on GeForce
    assert code_of(pynvml.nvmlDeviceGetFanSpeed, l40s) == NS
    assert code_of(pynvml.nvmlDeviceGetFanSpeed, h100) == NS
    assert 0 <= pynvml.nvmlDeviceGetFanSpeed(rtx) <= 100
    # ECC and remapped rows absent on GeForce
    assert code_of(pynvml.nvmlDeviceGetEccMode, rtx) == NS
    assert code_of(pynvml.nvmlDeviceGetTotalEccErrors, rtx, 1, 1) == NS
    assert code_of(pynvml.nvmlDeviceGetRemappedRows, rtx) == NS
    assert pynvml.nvmlDeviceGetEccMode(l40s) == [1, 1]
    assert pynvml.nvmlDeviceGetRemappedRows(h100) == (0, 0, 0, 0)
    # serial / board part number N/A on GeForce
    assert code_of(pynvml.nvmlDeviceGetSerial, rtx) == NS
    # GPM only on Hopper
    assert pynvml.nvmlGpmQueryDeviceSupport(h100).isSupportedDevice == 1
    assert pynvml.nvmlGpmQueryDeviceSupport(l40s).isSupportedDevice == 0
    sample = pynvml.nvmlGpmSampleAlloc()
    assert code_of(pynvml.nvmlGpmSampleGet, a100, sample) == NS
    pynvml.nvmlGpmSampleFree(sample)
    # MIG only on A100/H100; vGPU calls only on a vGPU host
    assert code_of(pynvml.nvmlDeviceGetMigMode, l40s) == NS
    assert pynvml.nvmlDeviceGetMigMode(a100) == [0, 0]
    assert code_of(pynvml.nvmlDeviceGetActiveVgpus, l40s) == NS
    assert code_of(pynvml.nvmlDeviceGetHostVgpuMode, h100) == NS
    # NVLink only on SXM / bridge cards
    assert code_of(pynvml.nvmlDeviceGetNvLinkState, l40s, 0) == NS
    assert pynvml.nvmlDeviceGetNvLinkState(h100, 17) == pynvml.NVML_FEATURE_ENABLED
    assert code_of(pynvml.nvmlDeviceGetNvLinkState, h100, 18) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    # retired pages: replaced by row remapping on these generations
    assert code_of(pynvml.nvmlDeviceGetRetiredPages_v2, h100, 0) == NS


def test_processes_two_call_pattern(simulated_fleet):
    import os

    simulated_fleet("l40s:1,h100-sxm:1", scenario="inference")
    for h in handles():
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        assert {p.pid for p in procs} <= {os.getpid(), os.getppid()} and procs
        assert sum(p.usedGpuMemory for p in procs) == mem.used
        assert pynvml.nvmlDeviceGetGraphicsRunningProcesses(h) == []
    assert pynvml.nvmlSystemGetProcessName(os.getpid()) == "python3"


def test_idle_gpu_has_no_processes(simulated_fleet):
    simulated_fleet("h100-sxm:1", scenario="idle")
    (h,) = handles()
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(h) == []


def test_field_values(simulated_fleet, sim_clock):
    simulated_fleet("h100-sxm:2,l40s:1", scenario="training")
    sim_clock.advance(30)
    h, _, l40s = handles()
    ids = [
        pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
        pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT,
        (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0),
        pynvml.NVML_FI_DEV_MEMORY_TEMP,
        99999,
    ]
    values = pynvml.nvmlDeviceGetFieldValues(h, ids)
    assert values[0].nvmlReturn == 0 and values[0].value.ullVal == pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    assert values[1].value.uiVal == 18
    assert values[2].nvmlReturn == 0 and values[2].value.ullVal > 0
    assert values[3].nvmlReturn == 0
    assert values[4].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    lv = pynvml.nvmlDeviceGetFieldValues(l40s, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, pynvml.NVML_FI_DEV_MEMORY_TEMP])
    assert [v.nvmlReturn for v in lv] == [pynvml.NVML_ERROR_NOT_SUPPORTED] * 2


def test_gpu_helper_runs_unchanged(simulated_fleet):
    machine = simulated_fleet("rtx4090:1,l40s:1")
    rtx, l40s = machine.gpus
    assert isinstance(rtx, Gpu)
    assert rtx.query(pynvml.nvmlDeviceGetEccMode) is None  # NOT_SUPPORTED -> missing reading
    assert l40s.query(pynvml.nvmlDeviceGetEccMode) == [1, 1]
    assert l40s.tags["pci_bus_id"].startswith("00000000:")
