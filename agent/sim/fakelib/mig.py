"""MIG: mode, MIG device handles, GPU-instance and compute-instance profiles, lists and info.

The layout of GPU and compute instances comes from the profile and is fixed for a run (nothing
here creates or destroys instances). Calls that take a GPU-instance or compute-instance handle
wear owned_call with the _gi/_ci resolvers, so faults on the parent GPU reach them too. A
versioned profile-info struct with the wrong version answers ARGUMENT_VERSION_MISMATCH.
"""

from __future__ import annotations

import pynvml

from gpuagent.sim.fakelib.args import (
    E_INVALID,
    E_NOT_FOUND,
    E_NS,
    E_VERSION,
    OK,
    NvmlCalls,
    _addr,
    _int,
    _out,
    _set_field_ptr,
    _set_ptrs,
)
from gpuagent.sim.fakelib.calls import device_call, owned_call
from gpuagent.sim.machine import CI_PROFILE_BY_SLICES


class MigCalls(NvmlCalls):
    def _gi(self, h):
        gi = self.m.gi_by_addr.get(_addr(h))
        return (gi.gpu, gi) if gi else None

    def _ci(self, h):
        ci = self.m.ci_by_addr.get(_addr(h))
        return (ci.gi.gpu, ci) if ci else None

    @device_call
    def nvmlDeviceGetMigMode(self, dev, current=None, pending=None):
        on = 1 if dev.mig_enabled else 0
        if self._put(current, on) != OK:
            return E_INVALID
        return self._put(pending, on)

    @device_call
    def nvmlDeviceGetMaxMigDeviceCount(self, dev, out=None):
        if dev.is_mig:
            return self._put(out, 0)
        return self._put(out, int(dev.mig.get("max_devices", 7)))

    @device_call
    def nvmlDeviceGetMigDeviceHandleByIndex(self, dev, index=None, out=None):
        i = _int(index)
        if dev.is_mig or not dev.mig_enabled or i is None:
            return E_INVALID
        if not 0 <= i < len(dev.mig_devices):
            return E_NOT_FOUND
        return self._put_handle(out, dev.mig_devices[i].handle.addr)

    @device_call
    def nvmlDeviceIsMigDeviceHandle(self, dev, out=None):
        return self._put(out, 1 if dev.is_mig else 0)

    @device_call
    def nvmlDeviceGetGpuInstanceId(self, dev, out=None):
        if not dev.is_mig:
            return E_INVALID
        return self._put(out, dev.gi_id)

    @device_call
    def nvmlDeviceGetComputeInstanceId(self, dev, out=None):
        if not dev.is_mig:
            return E_INVALID
        return self._put(out, dev.ci_id)

    @device_call
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, dev, out=None):
        if not dev.is_mig:
            return E_INVALID
        return self._put_handle(out, dev.gpu.handle.addr)

    def _gi_profile(self, dev, profile_index):
        """The table entry at NVML_GPU_INSTANCE_PROFILE_* ``profile_index`` (not the profile's id)."""
        for p in (dev.mig or {}).get("gpu_instance_profiles") or []:
            if int(p.get("index", p["profile_id"])) == profile_index:
                return p
        return None

    def _gi_profile_by_id(self, dev, profile_id):
        for p in (dev.mig or {}).get("gpu_instance_profiles") or []:
            if int(p["profile_id"]) == profile_id:
                return p
        return None

    def _fill_gi_profile(self, dev, profile, out, v2: bool):
        o = _out(out)
        if o is None:
            return E_INVALID
        if v2 and o.version != pynvml.nvmlGpuInstanceProfileInfo_v2:
            return E_VERSION
        p = self._gi_profile(dev, _int(profile))
        if p is None:
            return E_NS
        o.id = int(p["profile_id"])
        o.isP2pSupported = 0
        o.sliceCount = int(p["slices"])
        o.instanceCount = int(p["instance_count"])
        o.multiprocessorCount = int(p["sm_count"])
        o.copyEngineCount = int(p["slices"])
        o.decoderCount = max(0, int(p["slices"]) - 1)
        o.jpegCount = max(0, int(p["slices"]) - 1)
        o.memorySizeMB = int(p["memory_mib"])
        if v2:
            o.name = f"MIG {p['name']}".encode()
        return OK

    @device_call
    def nvmlDeviceGetGpuInstanceProfileInfo(self, dev, profile=None, out=None):
        return self._fill_gi_profile(dev, profile, out, v2=False)

    @device_call
    def nvmlDeviceGetGpuInstanceProfileInfoV(self, dev, profile=None, out=None):
        return self._fill_gi_profile(dev, profile, out, v2=True)

    @device_call
    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, dev, profile_id=None, out=None):
        p = self._gi_profile_by_id(dev, _int(profile_id))
        if p is None:
            return E_NS
        used = sum(gi.slices for gi in dev.gpu_instances)
        return self._put(out, max(0, (7 - used) // int(p["slices"])))

    @device_call
    def nvmlDeviceGetGpuInstances(self, dev, profile_id=None, arr=None, count=None):
        pid = _int(profile_id)
        gis = [gi.handle.addr for gi in dev.gpu_instances if gi.profile_id == pid]
        c = _out(count)
        if c is None:
            return E_INVALID
        if arr is not None and gis:
            _set_ptrs(_out(arr), gis)
        c.value = len(gis)
        return OK

    @device_call
    def nvmlDeviceGetGpuInstanceById(self, dev, gi_id=None, out=None):
        for gi in dev.gpu_instances:
            if gi.id == _int(gi_id):
                return self._put_handle(out, gi.handle.addr)
        return E_NOT_FOUND

    @owned_call("_gi")
    def nvmlGpuInstanceGetInfo(self, gi, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        _set_field_ptr(o, "device", gi.gpu.handle.addr)
        o.id = gi.id
        o.profileId = gi.profile_id
        o.placement.start = gi.start
        o.placement.size = gi.slices
        return OK

    @owned_call("_gi")
    def nvmlGpuInstanceGetComputeInstances(self, gi, profile_id=None, arr=None, count=None):
        cis = [ci.handle.addr for ci in gi.compute_instances if ci.profile_id == _int(profile_id)]
        c = _out(count)
        if c is None:
            return E_INVALID
        if arr is not None and cis:
            _set_ptrs(_out(arr), cis)
        c.value = len(cis)
        return OK

    @owned_call("_gi")
    def nvmlGpuInstanceGetComputeInstanceById(self, gi, ci_id=None, out=None):
        for ci in gi.compute_instances:
            if ci.id == _int(ci_id):
                return self._put_handle(out, ci.handle.addr)
        return E_NOT_FOUND

    @owned_call("_ci")
    def nvmlComputeInstanceGetInfo_v2(self, ci, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        _set_field_ptr(o, "device", ci.gi.gpu.handle.addr)
        _set_field_ptr(o, "gpuInstance", ci.gi.handle.addr)
        o.id = ci.id
        o.profileId = ci.profile_id
        o.placement.start = ci.start
        o.placement.size = ci.slices
        return OK

    def _fill_ci_profile(self, gi, profile, eng_profile, out, v2: bool):
        """Compute instance profile ``profile`` (NVML_COMPUTE_INSTANCE_PROFILE_*) of a GPU instance.

        Names as `nvidia-smi mig -lcip` lists them: "MIG 3g.40gb" for the whole GPU instance,
        "MIG 1c.3g.40gb" for one slice of it. Only the shared engine profile exists (nvml.h:
        NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED).
        """
        o = _out(out)
        index = _int(profile)
        if o is None or index is None:
            return E_INVALID
        if v2 and o.version != pynvml.nvmlComputeInstanceProfileInfo_v2:
            return E_VERSION
        slices = next((s for s, i in CI_PROFILE_BY_SLICES.items() if i == index), None)
        if slices is None or slices > gi.slices or _int(eng_profile) != 0:
            return E_NS
        gi_name = gi.profile_name
        o.id = index
        o.sliceCount = slices
        o.instanceCount = gi.slices // slices
        o.multiprocessorCount = gi.sm_count * slices // gi.slices if gi.sm_count else 0
        o.sharedCopyEngineCount = gi.slices
        o.sharedDecoderCount = max(0, gi.slices - 1)
        o.sharedJpegCount = max(0, gi.slices - 1)
        if v2:
            name = gi_name if slices == gi.slices else f"{slices}c.{gi_name}"
            o.name = f"MIG {name}".encode()
        return OK

    @owned_call("_gi")
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi, profile=None, eng_profile=None, out=None):
        return self._fill_ci_profile(gi, profile, eng_profile, out, v2=False)

    @owned_call("_gi")
    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(self, gi, profile=None, eng_profile=None, out=None):
        return self._fill_ci_profile(gi, profile, eng_profile, out, v2=True)
