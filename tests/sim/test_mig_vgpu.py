"""MIG device handles and GPU/compute instances; vGPU host instances."""

import ctypes

import pynvml
import pytest


def test_mig_devices(simulated_fleet, sim_clock):
    simulated_fleet("h100-sxm-mig:1,a100-sxm4-mig:1", scenario="training")
    sim_clock.advance(5)
    for index, sm in ((0, 60), (1, 42)):
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h) == 7
        assert pynvml.nvmlDeviceIsMigDeviceHandle(h).value == 0
        parent_uuid = pynvml.nvmlDeviceGetUUID(h)
        migs = [pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i) for i in range(2)]
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 2)
        assert [pynvml.nvmlDeviceGetGpuInstanceId(m) for m in migs] == [1, 2]
        assert [pynvml.nvmlDeviceGetComputeInstanceId(m) for m in migs] == [0, 0]
        for m in migs:
            assert pynvml.nvmlDeviceIsMigDeviceHandle(m).value == 1
            assert pynvml.nvmlDeviceGetName(m).endswith("MIG 3g.40gb")
            assert pynvml.nvmlDeviceGetUUID(m).startswith("MIG-")
            parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)
            assert pynvml.nvmlDeviceGetUUID(parent) == parent_uuid
            mem = pynvml.nvmlDeviceGetMemoryInfo(m)
            assert 39 << 30 < mem.total < 40 << 30 and 0 < mem.used < mem.total
            assert pynvml.nvmlDeviceGetAttributes(m).multiprocessorCount == sm
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(m)
            assert len(procs) == 1 and procs[0].gpuInstanceId == pynvml.nvmlDeviceGetGpuInstanceId(m)
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlDeviceGetPowerUsage(m)  # device-level readings live on the parent
        assert len(pynvml.nvmlDeviceGetComputeRunningProcesses(h)) == 2
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetUtilizationRates(h)  # N/A in MIG mode, as in the capture
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceGetGpuInstanceId(h)


def test_mig_gpu_instances_api(simulated_fleet):
    simulated_fleet("h100-sxm-mig:1")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    assert (info.sliceCount, info.instanceCount, info.multiprocessorCount) == (3, 2, 60)
    assert info.name == "MIG 3g.40gb"  # _PrintableStructure decodes char arrays
    count = ctypes.c_uint(0)
    arr = (pynvml.c_nvmlGpuInstance_t * 7)()
    pynvml.nvmlDeviceGetGpuInstances(h, info.id, arr, ctypes.byref(count))
    assert count.value == 2
    gi_info = pynvml.nvmlGpuInstanceGetInfo(arr[1])
    assert gi_info.id == 2 and gi_info.profileId == info.id and gi_info.placement.size == 3
    assert pynvml.nvmlDeviceGetUUID(gi_info.device) == pynvml.nvmlDeviceGetUUID(h)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(h, 1)
    ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)
    ci_info = pynvml.nvmlComputeInstanceGetInfo(ci)
    assert ci_info.id == 0 and pynvml.nvmlGpuInstanceGetInfo(ci_info.gpuInstance).id == 1


def test_mig_capable_but_disabled(simulated_fleet):
    simulated_fleet("a100-sxm4:1")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu >= 0


def test_vgpu_host(simulated_fleet, sim_clock):
    simulated_fleet("l40s-vgpu:1,l40s:1", scenario="training")
    sim_clock.advance(10)
    h, plain = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    assert pynvml.nvmlDeviceGetVirtualizationMode(h) == pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU
    assert pynvml.nvmlDeviceGetVirtualizationMode(plain) == pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE
    assert pynvml.nvmlDeviceGetHostVgpuMode(h) == pynvml.NVML_HOST_VGPU_MODE_SRIOV
    active = pynvml.nvmlDeviceGetActiveVgpus(h)
    assert len(active) == 2
    for v in active:
        type_id = pynvml.nvmlVgpuInstanceGetType(v)
        assert pynvml.nvmlVgpuTypeGetName(type_id) == "NVIDIA L40S-24Q"
        assert pynvml.nvmlVgpuTypeGetFramebufferSize(type_id) == 24 << 30
        # The C API writes a 64-bit value; pynvml's wrapper reads it through a c_uint, so (as on
        # hardware) usage of 4 GiB or more comes back truncated. The full value needs a c_ulonglong.
        full = ctypes.c_ulonglong()
        fn = pynvml._nvmlGetFunctionPointer("nvmlVgpuInstanceGetFbUsage")
        assert fn(ctypes.c_uint(v), ctypes.byref(full)) == pynvml.NVML_SUCCESS
        assert 4 << 30 < full.value < 24 << 30
        assert pynvml.nvmlVgpuInstanceGetFbUsage(v) == full.value & 0xFFFFFFFF
        vm_id, kind = pynvml.nvmlVgpuInstanceGetVmID(v)
        assert len(vm_id) == 36 and kind == pynvml.NVML_VGPU_VM_ID_UUID
        assert pynvml.nvmlVgpuInstanceGetLicenseStatus(v) == 1
        lic = pynvml.nvmlVgpuInstanceGetLicenseInfo(v)
        assert lic.isLicensed == 1 and lic.currentState == pynvml.NVML_GRID_LICENSE_STATE_LICENSED
    samples = pynvml.nvmlDeviceGetVgpuUtilization(h, 0)
    assert {s.vgpuInstance for s in samples} == set(active)
    assert all(s.smUtil.uiVal > 0 for s in samples)
    supported = pynvml.nvmlDeviceGetSupportedVgpus(h)
    assert len(supported) == 10
    assert pynvml.nvmlDeviceGetCreatableVgpus(h) == []  # two 24Q fill the 48 GB
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(h) == []  # guests' processes are not visible
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlVgpuInstanceGetType(12345)
