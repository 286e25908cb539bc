"""vGPU (host side): virtualisation mode, active/supported/creatable vGPU types, per-instance
utilisation, vGPU type properties, and vGPU instance properties.

Types and instances come from the profile and are fixed for a run. A type is creatable while
the framebuffer left fits it and, once any vGPU is active, only if it is a type already in use
(one GPU hosts one vGPU type at a time). Calls on a vGPU instance id wear owned_call with the
_vgpu resolver, so faults on the hosting GPU reach them too.
"""

from __future__ import annotations

import pynvml

from gpuagent.sim.fakelib.args import E_INVALID, OK, NvmlCalls, _fill_value, _int, _out, _put_str
from gpuagent.sim.fakelib.calls import device_call, owned_call, system_call


class VgpuCalls(NvmlCalls):
    def _vgpu(self, h):
        found = self.m.vgpu_by_id.get(_int(h))
        return found if found else None

    @device_call
    def nvmlDeviceGetVirtualizationMode(self, dev, out=None):
        return self._put(out, dev.virt_mode)

    @device_call
    def nvmlDeviceGetHostVgpuMode(self, dev, out=None):
        return self._put(out, dev.host_vgpu_mode)

    @device_call
    def nvmlDeviceGetActiveVgpus(self, dev, count=None, arr=None):
        return self._two_call(count, arr, list(dev.vgpu_instances), _fill_value)

    @device_call
    def nvmlDeviceGetSupportedVgpus(self, dev, count=None, arr=None):
        return self._two_call(count, arr, list(dev.vgpu_types), _fill_value)

    @device_call
    def nvmlDeviceGetCreatableVgpus(self, dev, count=None, arr=None):
        total = dev.total_bytes >> 20
        active = [dev.vgpu_types.get(v["type_id"]) for v in dev.vgpu_instances.values()]
        used = sum(int(t["fb_mib"]) for t in active if t)
        kinds = {int(v["type_id"]) for v in dev.vgpu_instances.values()}
        creatable = [
            tid for tid, t in dev.vgpu_types.items() if int(t["fb_mib"]) <= total - used and (not kinds or tid in kinds)
        ]
        return self._two_call(count, arr, creatable, _fill_value)

    @device_call
    def nvmlVgpuTypeGetMaxInstances(self, dev, type_id=None, out=None):
        t = dev.vgpu_types.get(_int(type_id))
        if t is None:
            return E_INVALID
        return self._put(out, int(t.get("max_instances", 1)))

    @device_call
    def nvmlDeviceGetVgpuUtilization(self, dev, timestamp=None, value_type=None, count=None, arr=None):
        st = dev.state()
        items = sorted(dev.vgpu_instances)
        if self._put(value_type, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT) != OK:
            return E_INVALID
        now_us = int(self.m.clock.now() * 1e6)

        def fill(sample, i, vid, _arr):
            share = 0.6 if i == 0 else 0.4
            sample.vgpuInstance = vid
            sample.timeStamp = now_us
            sample.smUtil.uiVal = int(st.util * share)
            sample.memUtil.uiVal = int(st.mem_util * share)
            sample.encUtil.uiVal = 0
            sample.decUtil.uiVal = 0

        return self._two_call(count, arr, items, fill)

    def _type(self, type_id):
        return self.m.vgpu_types.get(_int(type_id))

    @system_call()
    def nvmlVgpuTypeGetName(self, type_id=None, buf=None, size=None):
        t = self._type(type_id)
        if t is None:
            return E_INVALID
        return _put_str(buf, t["name"].encode(), None)

    @system_call()
    def nvmlVgpuTypeGetClass(self, type_id=None, buf=None, size=None):
        t = self._type(type_id)
        if t is None:
            return E_INVALID
        return _put_str(buf, str(t.get("class", "Quadro")).encode(), None)

    @system_call()
    def nvmlVgpuTypeGetFramebufferSize(self, type_id=None, out=None):
        t = self._type(type_id)
        if t is None:
            return E_INVALID
        return self._put(out, int(t["fb_mib"]) << 20)

    @system_call()
    def nvmlVgpuTypeGetNumDisplayHeads(self, type_id=None, out=None):
        return E_INVALID if self._type(type_id) is None else self._put(out, 4)

    @system_call()
    def nvmlVgpuTypeGetLicense(self, type_id=None, buf=None, size=None):
        return E_INVALID if self._type(type_id) is None else _put_str(buf, b"NVIDIA-RTX-Virtual-Workstation,5.0", None)

    @owned_call("_vgpu")
    def nvmlVgpuInstanceGetType(self, inst, out=None):
        return self._put(out, int(inst["type_id"]))

    @owned_call("_vgpu")
    def nvmlVgpuInstanceGetUUID(self, inst, buf=None, size=None):
        return _put_str(_out(buf), inst["uuid"], size)

    @owned_call("_vgpu")
    def nvmlVgpuInstanceGetVmID(self, inst, buf=None, size=None, id_type=None):
        code = _put_str(_out(buf), str(inst["vm_id"]).encode(), size)
        if code != OK:
            return code
        return self._put(id_type, pynvml.NVML_VGPU_VM_ID_UUID)

    @owned_call("_vgpu")
    def nvmlVgpuInstanceGetVmDriverVersion(self, inst, buf=None, size=None):
        return _put_str(_out(buf), self.m.driver_version, size)

    @owned_call("_vgpu")
    def nvmlVgpuInstanceGetFbUsage(self, inst, out=None):
        return self._put(out, int(inst.get("fb_used_mib", 0)) << 20)

    @owned_call("_vgpu")
    def nvmlVgpuInstanceGetLicenseStatus(self, inst, out=None):
        return self._put(out, 1 if inst.get("licensed", True) else 0)

    @owned_call("_vgpu")
    def nvmlVgpuInstanceGetLicenseInfo_v2(self, inst, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        licensed = bool(inst.get("licensed", True))
        o.isLicensed = 1 if licensed else 0
        o.currentState = (
            pynvml.NVML_GRID_LICENSE_STATE_LICENSED if licensed else pynvml.NVML_GRID_LICENSE_STATE_UNLICENSED
        )
        o.licenseExpiry.year = 2027
        o.licenseExpiry.month = 6
        o.licenseExpiry.day = 30
        o.licenseExpiry.status = 1
        return OK

    @owned_call("_vgpu")
    def nvmlVgpuInstanceGetFrameRateLimit(self, inst, out=None):
        return self._put(out, 60)

    @owned_call("_vgpu")
    def nvmlVgpuInstanceGetEccMode(self, inst, out=None):
        return self._put(out, 1)

    @owned_call("_vgpu")
    def nvmlVgpuInstanceGetEncoderCapacity(self, inst, out=None):
        return self._put(out, 100)
