"""System-wide calls: init/shutdown, driver, NVML and CUDA versions, process names, the device
count, the ways of getting a device handle, and nvmlErrorString.

These take no device handle, so they wear system_call; only the two init calls are answered
before nvmlInit, and shutdown just counts the init down. Getting a handle by index applies the
GPU's lost and forced codes, as the real call does for a GPU that has fallen off the bus.
nvmlErrorString is an object rather than a method because pynvml sets ``restype`` on it.
"""

from __future__ import annotations

import pynvml

from gpuagent.sim.fakelib.args import (
    E_INVALID,
    E_LOST,
    E_NOT_FOUND,
    E_NS,
    E_SIZE,
    E_TIMEOUT,
    E_UNINIT,
    E_VERSION,
    OK,
    NvmlCalls,
    _bytes,
    _int,
    _put_str,
    check_args,
)
from gpuagent.sim.fakelib.calls import _gpu_guard, system_call
from gpuagent.sim.machine import SimMachine, call_slot

ERROR_STRINGS = {
    OK: b"Success",
    E_UNINIT: b"Uninitialized",
    E_INVALID: b"Invalid Argument",
    E_NS: b"Not Supported",
    pynvml.NVML_ERROR_NO_PERMISSION: b"Insufficient Permissions",
    pynvml.NVML_ERROR_ALREADY_INITIALIZED: b"Already Initialized",
    E_NOT_FOUND: b"Not Found",
    E_SIZE: b"Insufficient Size",
    E_TIMEOUT: b"Timeout",
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: b"Function Not Found",
    E_LOST: b"GPU is lost",
    pynvml.NVML_ERROR_RESET_REQUIRED: b"GPU requires restart",
    E_VERSION: b"Argument version mismatch",
    pynvml.NVML_ERROR_DEPRECATED: b"Requested functionality has been deprecated",
    pynvml.NVML_ERROR_NO_DATA: b"No data",
    pynvml.NVML_ERROR_UNKNOWN: b"Unknown Error",
}

_ERROR_STRING_SLOT = call_slot("nvmlErrorString")


class _ErrorString:
    """nvmlErrorString: pynvml sets ``restype`` on it, so it must take attributes."""

    def __init__(self, machine: SimMachine) -> None:
        self.m = machine
        self.restype = None
        self.argtypes = None

    def __call__(self, result):
        self.m.call_counts[_ERROR_STRING_SLOT] += 1
        check_args((result,))
        return ERROR_STRINGS.get(_int(result), b"Unknown Error")


class SystemCalls(NvmlCalls):
    @system_call(needs_init=False)
    def nvmlInitWithFlags(self, flags=0):
        self.m.init_count += 1
        return OK

    @system_call(needs_init=False)
    def nvmlInit_v2(self):
        self.m.init_count += 1
        return OK

    @system_call()
    def nvmlShutdown(self):
        self.m.init_count -= 1
        return OK

    @system_call()
    def nvmlSystemGetDriverVersion(self, buf=None, size=None):
        return _put_str(buf, self.m.driver_version, size)

    @system_call()
    def nvmlSystemGetNVMLVersion(self, buf=None, size=None):
        # "<CUDA major>.<driver>", e.g. 12.535.54.03 with CUDA 12.2 (the major follows the CUDA
        # version the driver reports, which an imported capture gives).
        return _put_str(buf, b"%d." % (self.m.cuda_version // 1000) + self.m.driver_version, size)

    @system_call()
    def nvmlSystemGetCudaDriverVersion(self, out=None):
        return self._put(out, self.m.cuda_version)

    @system_call()
    def nvmlSystemGetCudaDriverVersion_v2(self, out=None):
        return self._put(out, self.m.cuda_version)

    @system_call()
    def nvmlSystemGetProcessName(self, pid=None, buf=None, size=None):
        name = self.m.process_names.get(_int(pid))
        if name is None:
            return E_NOT_FOUND
        return _put_str(buf, name, size)

    @system_call()
    def nvmlSystemGetHicVersion(self, count=None, arr=None):
        return self._put(count, 0)

    @system_call()
    def nvmlUnitGetCount(self, out=None):
        return self._put(out, 0)

    @system_call()
    def nvmlDeviceGetCount_v2(self, out=None):
        return self._put(out, len(self.m.devices))

    @system_call()
    def nvmlDeviceGetHandleByIndex_v2(self, index=None, out=None):
        i = _int(index)
        if i is None or not 0 <= i < len(self.m.devices):
            return E_INVALID
        dev = self.m.devices[i]
        code = _gpu_guard(self.m, dev, "nvmlDeviceGetHandleByIndex_v2")
        if code is not None:
            return code
        return self._put_handle(out, dev.handle.addr)

    @system_call()
    def nvmlDeviceGetHandleByUUID(self, uuid=None, out=None):
        dev = self.m.by_uuid.get(_bytes(uuid))
        if dev is None:
            return E_NOT_FOUND
        return self._put_handle(out, dev.handle.addr)

    @system_call()
    def nvmlDeviceGetHandleByPciBusId_v2(self, bus_id=None, out=None):
        key = (_bytes(bus_id) or b"").upper()
        if len(key) == 12:  # short form 0000:01:00.0
            key = b"0000" + key
        dev = self.m.by_bus_id.get(key)
        if dev is None:
            return E_NOT_FOUND
        return self._put_handle(out, dev.handle.addr)

    @system_call()
    def nvmlDeviceGetHandleBySerial(self, serial=None, out=None):
        s = (_bytes(serial) or b"").decode()
        for dev in self.m.devices:
            if dev.serial == s:
                return self._put_handle(out, dev.handle.addr)
        return E_NOT_FOUND

    @system_call()
    def nvmlSystemGetTopologyGpuSet(self, cpu=None, count=None, arr=None):
        devs = [d for d in self.m.devices if d.numa == _int(cpu)]
        return self._put_handles(count, arr, [d.handle.addr for d in devs])
