"""A pure-Python libnvidia-ml: attributes named after the C symbols pynvml looks up.

pynvml's own wrappers call these exactly as they would call the C library:
handles are opaque pointers, outputs come back through byref()/pointer
arguments and ctypes arrays, and every function returns an NVML return code.
Arguments ctypes could not convert (a tuple, list, float, dict ...) raise
ctypes.ArgumentError with ctypes' own message, so a wrapper misuse such as
``nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_READ)`` (a tuple in
current nvidia-ml-py) fails here as it does on hardware.

A symbol that is not defined here answers FUNCTION_NOT_FOUND through pynvml,
as an older driver would.
"""

from __future__ import annotations

import ctypes
import functools
from ctypes import addressof, c_void_p

import pynvml

from gpuagent.sim.machine import (
    MIG_HANDLE_CALLS,
    SimDevice,
    SimMachine,
    SimMigDevice,
    call_slot,
)

OK = pynvml.NVML_SUCCESS
E_UNINIT = pynvml.NVML_ERROR_UNINITIALIZED
E_INVALID = pynvml.NVML_ERROR_INVALID_ARGUMENT
E_NS = pynvml.NVML_ERROR_NOT_SUPPORTED
E_NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
E_SIZE = pynvml.NVML_ERROR_INSUFFICIENT_SIZE
E_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
E_TIMEOUT = pynvml.NVML_ERROR_TIMEOUT
E_VERSION = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
NA32 = 0xFFFFFFFF

# Field id -> the clock-event reason bit whose set-time (ns since t=0) it counts.
REASON_TIME_FIELDS = {
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP: pynvml.nvmlClocksEventReasonSwPowerCap,
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST: pynvml.nvmlClocksEventReasonSyncBoost,
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: (
        pynvml.nvmlClocksEventReasonSwThermalSlowdown
    ),
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN: (
        pynvml.nvmlClocksEventReasonHwThermalSlowdown
    ),
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: (
        pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
    ),
}

_CArg = type(ctypes.byref(ctypes.c_int()))
_CTYPES_BASES = (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array, ctypes._Pointer)
_PASSABLE: set[type] = {int, bool, bytes, str, type(None), _CArg}

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


def check_args(args: tuple) -> None:
    """Refuse what ctypes refuses for a function without argtypes."""
    for i, a in enumerate(args, 1):
        t = type(a)
        if t in _PASSABLE:
            if t is int and not -0x8000000000000000 <= a <= 0xFFFFFFFFFFFFFFFF:
                raise ctypes.ArgumentError(f"argument {i}: OverflowError: int too long to convert")
            continue
        if isinstance(a, _CTYPES_BASES) or hasattr(a, "_as_parameter_"):
            _PASSABLE.add(t)
            continue
        raise ctypes.ArgumentError(
            f"argument {i}: TypeError: Don't know how to convert parameter {i}"
        )


def _int(a) -> int | None:
    if a is None:
        return None
    if type(a) is int:
        return a
    v = getattr(a, "value", a)
    return int(v) if v is not None else None


def _out(a):
    """The ctypes object an output argument points at (None for NULL)."""
    t = type(a)
    if t is _CArg:
        return a._obj
    if a is None or t is int:
        return None
    if isinstance(a, ctypes._Pointer):
        return a.contents if a else None
    return a


def _addr(h) -> int | None:
    """Address held by an opaque handle argument."""
    if isinstance(h, ctypes._Pointer):
        try:
            return addressof(h.contents)
        except ValueError:  # NULL
            return None
    if type(h) is int:
        return h
    if type(h) is _CArg:
        return _addr(h._obj)
    if isinstance(h, c_void_p):
        return h.value
    return None


def _set_ptr(obj, addr: int) -> None:
    """Make the pointer object ``obj`` (a handle the caller passed byref) hold ``addr``."""
    c_void_p.from_buffer(obj).value = addr


def _set_ptrs(arr, addrs: list[int]) -> None:
    """Fill an array of handles (pointers) with addresses."""
    step = ctypes.sizeof(c_void_p)
    for i, addr in enumerate(addrs):
        c_void_p.from_buffer(arr, i * step).value = addr


def _set_field_ptr(struct, field: str, addr: int) -> None:
    c_void_p.from_buffer(struct, getattr(type(struct), field).offset).value = addr


def _put_str(buf, text: bytes, size) -> int:
    size = _int(size)
    if buf is None:
        return E_INVALID
    if size is not None and len(text) + 1 > size:
        return E_SIZE
    buf.value = text
    return OK


# -- decorators: argument checks, device resolution, faults ----------------


def device_call(fn):
    """First argument is a device handle: resolve it and apply lost/forced/unsupported answers."""
    name = fn.__name__
    slot = call_slot(name)

    @functools.wraps(fn)
    def wrapper(self, handle=None, *args):
        m = self.m
        m.call_counts[slot] += 1
        check_args((handle,) + args)
        if m.init_count <= 0:
            return E_UNINIT
        dev = m.by_addr.get(_addr(handle))
        if dev is None:
            return E_INVALID
        gpu = dev.gpu if dev.is_mig else dev
        gpu.call_counts[slot] += 1
        if gpu.lost_at is not None and m.now() >= gpu.lost_at:
            return E_LOST
        if m.forced:
            code = m.forced.get((name, gpu.index), m.forced.get((name, None)))
            if code is not None:
                return code
        if dev.is_mig and name not in MIG_HANDLE_CALLS:
            return E_NS
        code = gpu.fixed.get(name) if not dev.is_mig else dev.fixed.get(name)
        if code is not None:
            return code
        return fn(self, dev, *args)

    return wrapper


def system_call(needs_init: bool = True):
    def decorate(fn):
        name = fn.__name__
        slot = call_slot(name)

        @functools.wraps(fn)
        def wrapper(self, *args):
            m = self.m
            m.call_counts[slot] += 1
            check_args(args)
            if needs_init and m.init_count <= 0:
                return E_UNINIT
            if m.forced:
                code = m.forced.get((name, None))
                if code is not None:
                    return code
            return fn(self, *args)

        return wrapper

    return decorate


def _gpu_guard(m: SimMachine, gpu: SimDevice, name: str) -> int | None:
    if gpu.lost_at is not None and m.now() >= gpu.lost_at:
        return E_LOST
    if m.forced:
        code = m.forced.get((name, gpu.index), m.forced.get((name, None)))
        if code is not None:
            return code
    return gpu.fixed.get(name)


def owned_call(resolver: str):
    """First argument is a GPU-instance / compute-instance / vGPU-instance handle."""

    def decorate(fn):
        name = fn.__name__
        slot = call_slot(name)

        @functools.wraps(fn)
        def wrapper(self, obj=None, *args):
            m = self.m
            m.call_counts[slot] += 1
            check_args((obj,) + args)
            if m.init_count <= 0:
                return E_UNINIT
            found = getattr(self, resolver)(obj)
            if found is None:
                return E_INVALID
            gpu = found[0]
            gpu.call_counts[slot] += 1
            code = _gpu_guard(m, gpu, name)
            if code is not None:
                return code
            return fn(self, found[1], *args)

        return wrapper

    return decorate


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


class _EventSet:
    def __init__(self, m: SimMachine):
        self.handle_buf = ctypes.create_string_buffer(8)
        self.addr = addressof(self.handle_buf)
        self.registered: dict[int, tuple[int, float]] = {}  # gpu -> (mask, since)
        self.delivered: set[int] = set()


class _GpmSample:
    def __init__(self) -> None:
        self.buf = ctypes.create_string_buffer(8)
        self.addr = addressof(self.buf)
        self.gpu: SimDevice | None = None
        self.gi: int | None = None
        self.snap: tuple | None = None


GPM_METRIC_NAMES = {
    1: (b"gr_util", b"graphics utilization", b"%"),
    2: (b"sm_util", b"SM utilization", b"%"),
    3: (b"sm_occupancy", b"SM occupancy", b"%"),
    4: (b"integer_util", b"integer utilization", b"%"),
    5: (b"any_tensor_util", b"any tensor utilization", b"%"),
    6: (b"dfma_tensor_util", b"DFMA tensor utilization", b"%"),
    7: (b"hmma_tensor_util", b"HMMA tensor utilization", b"%"),
    8: (b"dmma_tensor_util", b"DMMA tensor utilization", b"%"),
    9: (b"imma_tensor_util", b"IMMA tensor utilization", b"%"),
    10: (b"dram_bw_util", b"DRAM bandwidth utilization", b"%"),
    11: (b"fp64_util", b"FP64 utilization", b"%"),
    12: (b"fp32_util", b"FP32 utilization", b"%"),
    13: (b"fp16_util", b"FP16 utilization", b"%"),
    20: (b"pcie_tx", b"PCIe TX", b"MiB/s"),
    21: (b"pcie_rx", b"PCIe RX", b"MiB/s"),
    60: (b"nvlink_rx", b"NVLink RX", b"MiB/s"),
    61: (b"nvlink_tx", b"NVLink TX", b"MiB/s"),
}
_GPM_SHARE = {
    1: "busy",
    2: "sm",
    3: "occupancy",
    4: "integer",
    5: "tensor",
    6: "dfma",
    7: "hmma",
    8: "dfma",
    9: "imma",
    11: "fp64",
    12: "fp32",
    13: "fp16",
}


class FakeNvmlLib:
    """The stand-in for ``pynvml.nvmlLib``; one per SimMachine."""

    def __init__(self, machine: SimMachine):
        self.m = machine
        machine.size_call_counts()  # every symbol has its slot once this module is loaded
        self.nvmlErrorString = _ErrorString(machine)

    def __repr__(self) -> str:
        return f"<FakeNvmlLib {self.m!r}>"

    # -- resolvers for owned_call ---------------------------------------
    def _gi(self, h):
        gi = self.m.gi_by_addr.get(_addr(h))
        return (gi.gpu, gi) if gi else None

    def _ci(self, h):
        ci = self.m.ci_by_addr.get(_addr(h))
        return (ci.gi.gpu, ci) if ci else None

    def _vgpu(self, h):
        found = self.m.vgpu_by_id.get(_int(h))
        return found if found else None

    # == init / system =====================================================
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
        return _put_str(buf, b"13." + self.m.driver_version, size)

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

    # == helpers ============================================================
    @staticmethod
    def _put(out, value) -> int:
        o = _out(out)
        if o is None:
            return E_INVALID
        o.value = value
        return OK

    @staticmethod
    def _put_handle(out, addr: int) -> int:
        o = _out(out)
        if o is None:
            return E_INVALID
        _set_ptr(o, addr)
        return OK

    @staticmethod
    def _put_handles(count, arr, addrs: list[int]) -> int:
        c = _out(count)
        if c is None:
            return E_INVALID
        if arr is None:  # these calls answer a NULL array with the count and SUCCESS
            c.value = len(addrs)
            return OK
        if c.value < len(addrs):
            c.value = len(addrs)
            return E_SIZE
        _set_ptrs(_out(arr), addrs)
        c.value = len(addrs)
        return OK

    @staticmethod
    def _two_call(count, arr, items, fill) -> int:
        """The NVML pattern: NULL array (or too small) -> count + INSUFFICIENT_SIZE."""
        c = _out(count)
        if c is None:
            return E_INVALID
        n = len(items)
        if arr is None or c.value < n:
            c.value = n
            return E_SIZE if n else OK
        a = _out(arr)
        for i, item in enumerate(items):
            fill(a[i] if not isinstance(a, ctypes._SimpleCData) else a, i, item, a)
        c.value = n
        return OK

    # == identity ===========================================================
    @device_call
    def nvmlDeviceGetName(self, dev, buf=None, size=None):
        return _put_str(buf, dev.name, size)

    @device_call
    def nvmlDeviceGetUUID(self, dev, buf=None, size=None):
        return _put_str(buf, dev.uuid, size)

    @device_call
    def nvmlDeviceGetSerial(self, dev, buf=None, size=None):
        return _put_str(buf, dev.serial.encode(), size)

    @device_call
    def nvmlDeviceGetBoardPartNumber(self, dev, buf=None, size=None):
        return _put_str(buf, dev.board_part_number.encode(), size)

    @device_call
    def nvmlDeviceGetVbiosVersion(self, dev, buf=None, size=None):
        return _put_str(buf, dev.vbios.encode(), size)

    @device_call
    def nvmlDeviceGetInforomImageVersion(self, dev, buf=None, size=None):
        return _put_str(buf, b"G520.0200.00.05", size)

    @device_call
    def nvmlDeviceGetMinorNumber(self, dev, out=None):
        return self._put(out, (dev.gpu if dev.is_mig else dev).minor)

    @device_call
    def nvmlDeviceGetIndex(self, dev, out=None):
        return self._put(out, dev.index)

    @device_call
    def nvmlDeviceGetBrand(self, dev, out=None):
        gpu = dev.gpu if dev.is_mig else dev
        brand = (
            pynvml.NVML_BRAND_GEFORCE
            if gpu.profile.get("brand") == "GeForce"
            else pynvml.NVML_BRAND_NVIDIA
        )
        return self._put(out, brand)

    @device_call
    def nvmlDeviceGetArchitecture(self, dev, out=None):
        return self._put(out, (dev.gpu if dev.is_mig else dev).arch)

    @device_call
    def nvmlDeviceGetCudaComputeCapability(self, dev, major=None, minor=None):
        from gpuagent.sim.machine import COMPUTE_CAPABILITY

        gpu = dev.gpu if dev.is_mig else dev
        cc = COMPUTE_CAPABILITY.get(gpu.profile["architecture"], (8, 0))
        if self._put(major, cc[0]) != OK:
            return E_INVALID
        return self._put(minor, cc[1])

    @device_call
    def nvmlDeviceGetPciInfo_v3(self, dev, out=None):
        gpu = dev.gpu if dev.is_mig else dev
        return self._fill_pci(out, gpu.bus_id, gpu.pci_bus, gpu.pci_device_id, gpu.pci_subsystem_id)

    @staticmethod
    def _fill_pci(out, bus_id: bytes, bus: int, device_id: int, subsystem: int) -> int:
        o = _out(out)
        if o is None:
            return E_INVALID
        o.busIdLegacy = bus_id[-12:] if len(bus_id) > 15 else bus_id
        o.busId = bus_id
        o.domain = 0
        o.bus = bus
        o.device = 0
        o.pciDeviceId = device_id
        o.pciSubSystemId = subsystem
        return OK

    @device_call
    def nvmlDeviceGetDisplayMode(self, dev, out=None):
        return self._put(out, 0)

    @device_call
    def nvmlDeviceGetDisplayActive(self, dev, out=None):
        return self._put(out, 0)

    @device_call
    def nvmlDeviceGetPersistenceMode(self, dev, out=None):
        return self._put(out, 1)

    @device_call
    def nvmlDeviceGetComputeMode(self, dev, out=None):
        return self._put(out, pynvml.NVML_COMPUTEMODE_DEFAULT)

    @device_call
    def nvmlDeviceGetMultiGpuBoard(self, dev, out=None):
        return self._put(out, 0)

    @device_call
    def nvmlDeviceGetBoardId(self, dev, out=None):
        return self._put(out, 0x100 + dev.index * 0x100)

    @device_call
    def nvmlDeviceGetNumaNodeId(self, dev, out=None):
        return self._put(out, dev.numa)

    @device_call
    def nvmlDeviceGetSupportedEventTypes(self, dev, out=None):
        return self._put(out, self._event_mask(dev))

    @staticmethod
    def _event_mask(dev: SimDevice) -> int:
        mask = (
            pynvml.nvmlEventTypeXidCriticalError
            | pynvml.nvmlEventTypePState
            | pynvml.nvmlEventTypeClock
        )
        if dev.ecc:
            mask |= pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
        return mask

    # == memory =============================================================
    def _memory(self, dev):
        if dev.is_mig:
            st = dev.gpu.state()
            total = dev.memory_bytes
            used = int(
                total
                * dev.gpu.model.mem_frac
                * 0.9
                * (1 if dev.gpu.model.scenario != "idle" else 0)
            ) + (26 << 20)
            return total, 0, used
        st = dev.state()
        return dev.total_bytes, dev.reserved_bytes, st.mem_used_bytes

    @device_call
    def nvmlDeviceGetMemoryInfo(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        total, reserved, used = self._memory(dev)
        o.total, o.used, o.free = total, used + reserved, total - used - reserved
        return OK

    @device_call
    def nvmlDeviceGetMemoryInfo_v2(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        if getattr(o, "version", None) != pynvml.nvmlMemory_v2:
            return E_VERSION
        total, reserved, used = self._memory(dev)
        o.total, o.reserved, o.used, o.free = total, reserved, used, total - reserved - used
        return OK

    @device_call
    def nvmlDeviceGetBAR1MemoryInfo(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        total = dev.bar1_bytes
        used = (2 << 20) if (dev.gpu if dev.is_mig else dev).model.scenario != "idle" else 0
        o.bar1Total, o.bar1Used, o.bar1Free = total, used, total - used
        return OK

    @device_call
    def nvmlDeviceGetMemoryBusWidth(self, dev, out=None):
        return self._put(out, int(dev.bus_width))

    @device_call
    def nvmlDeviceGetAttributes_v2(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        if dev.is_mig:
            o.multiprocessorCount = dev.sm_count
            o.gpuInstanceSliceCount = dev.slices
            o.computeInstanceSliceCount = dev.slices
            o.memorySizeMB = dev.memory_bytes >> 20
            o.sharedCopyEngineCount = dev.slices
            o.sharedDecoderCount = max(1, dev.slices - 1)
            o.sharedJpegCount = max(1, dev.slices - 1)
        else:
            o.multiprocessorCount = int(dev.profile.get("sm_count", 132))
            o.memorySizeMB = dev.total_bytes >> 20
        return OK

    # == utilisation, clocks, power, thermals =================================
    @device_call
    def nvmlDeviceGetUtilizationRates(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        st = dev.state()
        o.gpu = int(round(st.util))
        o.memory = int(round(st.mem_util))
        return OK

    def _codec_util(self, dev, util=None, period=None):
        if self._put(util, 0) != OK:
            return E_INVALID
        return self._put(period, 167000)

    @device_call
    def nvmlDeviceGetEncoderUtilization(self, dev, util=None, period=None):
        return self._codec_util(dev, util, period)

    @device_call
    def nvmlDeviceGetDecoderUtilization(self, dev, util=None, period=None):
        return self._codec_util(dev, util, period)

    @device_call
    def nvmlDeviceGetJpgUtilization(self, dev, util=None, period=None):
        return self._codec_util(dev, util, period)

    @device_call
    def nvmlDeviceGetOfaUtilization(self, dev, util=None, period=None):
        return self._codec_util(dev, util, period)

    def _clock(self, dev, kind, which: str):
        k = _int(kind)
        names = {0: "graphics", 1: "sm", 2: "memory", 3: "video"}
        if k not in names:
            return None
        if which == "max":
            return int(dev.clocks["max"][names[k]])
        if which == "current":
            st = dev.state()
            return (st.graphics_clock, st.sm_clock, st.mem_clock, st.video_clock)[k]
        apps = dev.clocks.get("applications") or {}
        key = "graphics" if k in (0, 1, 3) else "memory"
        return int(apps.get(key, dev.clocks["max"][key])) if k in (0, 1, 2) else None

    @device_call
    def nvmlDeviceGetClockInfo(self, dev, kind=None, out=None):
        v = self._clock(dev, kind, "current")
        return E_INVALID if v is None else self._put(out, v)

    @device_call
    def nvmlDeviceGetMaxClockInfo(self, dev, kind=None, out=None):
        v = self._clock(dev, kind, "max")
        return E_INVALID if v is None else self._put(out, v)

    @device_call
    def nvmlDeviceGetApplicationsClock(self, dev, kind=None, out=None):
        v = self._clock(dev, kind, "applications")
        return E_INVALID if v is None else self._put(out, v)

    @device_call
    def nvmlDeviceGetDefaultApplicationsClock(self, dev, kind=None, out=None):
        v = self._clock(dev, kind, "applications")
        return E_INVALID if v is None else self._put(out, v)

    @device_call
    def nvmlDeviceGetMaxCustomerBoostClock(self, dev, kind=None, out=None):
        v = self._clock(dev, kind, "max")
        return E_INVALID if v is None else self._put(out, v)

    @device_call
    def nvmlDeviceGetClock(self, dev, kind=None, clock_id=None, out=None):
        which = {0: "current", 1: "applications", 2: "applications", 3: "max"}.get(_int(clock_id))
        v = self._clock(dev, kind, which) if which else None
        return E_INVALID if v is None else self._put(out, v)

    @device_call
    def nvmlDeviceGetSupportedMemoryClocks(self, dev, count=None, arr=None):
        clocks = sorted(
            {int(dev.clocks["max"]["memory"]), int(dev.clocks["idle"]["memory"])}, reverse=True
        )
        return self._two_call(count, arr, clocks, _fill_value)

    @device_call
    def nvmlDeviceGetSupportedGraphicsClocks(self, dev, mem_clock=None, count=None, arr=None):
        hi, lo = int(dev.clocks["max"]["graphics"]), int(dev.clocks["idle"]["graphics"])
        return self._two_call(count, arr, list(range(hi, lo - 1, -15)), _fill_value)

    @device_call
    def nvmlDeviceGetPerformanceState(self, dev, out=None):
        return self._put(out, dev.state().pstate)

    @device_call
    def nvmlDeviceGetPowerState(self, dev, out=None):
        return self._put(out, dev.state().pstate)

    @device_call
    def nvmlDeviceGetCurrentClocksEventReasons(self, dev, out=None):
        return self._put(out, dev.state().reasons)

    @device_call
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, dev, out=None):
        return self._put(out, dev.state().reasons)

    @device_call
    def nvmlDeviceGetSupportedClocksEventReasons(self, dev, out=None):
        return self._put(out, dev.model.supported_reasons)

    @device_call
    def nvmlDeviceGetSupportedClocksThrottleReasons(self, dev, out=None):
        return self._put(out, dev.model.supported_reasons)

    @device_call
    def nvmlDeviceGetPowerUsage(self, dev, out=None):
        return self._put(out, int(dev.state().power_w * 1000))

    @device_call
    def nvmlDeviceGetTotalEnergyConsumption(self, dev, out=None):
        return self._put(out, int(dev.state().energy_j * 1000))

    @device_call
    def nvmlDeviceGetPowerManagementMode(self, dev, out=None):
        return self._put(out, 1)

    @device_call
    def nvmlDeviceGetPowerManagementLimit(self, dev, out=None):
        return self._put(out, int(dev.power["limit"] * 1000))

    @device_call
    def nvmlDeviceGetEnforcedPowerLimit(self, dev, out=None):
        return self._put(out, int(dev.power["limit"] * 1000))

    @device_call
    def nvmlDeviceGetPowerManagementDefaultLimit(self, dev, out=None):
        return self._put(out, int(dev.power["default"] * 1000))

    @device_call
    def nvmlDeviceGetPowerManagementLimitConstraints(self, dev, lo=None, hi=None):
        if self._put(lo, int(dev.power["min"] * 1000)) != OK:
            return E_INVALID
        return self._put(hi, int(dev.power["max"] * 1000))

    @device_call
    def nvmlDeviceGetTemperature(self, dev, sensor=None, out=None):
        if _int(sensor) != pynvml.NVML_TEMPERATURE_GPU:
            return E_INVALID
        return self._put(out, int(round(dev.state().temp_c)))

    @device_call
    def nvmlDeviceGetTemperatureV(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        if o.version != pynvml.nvmlTemperature_v1:
            return E_VERSION
        if o.sensorType != pynvml.NVML_TEMPERATURE_GPU:
            return E_INVALID
        o.temperature = int(round(dev.state().temp_c))
        return OK

    @device_call
    def nvmlDeviceGetTemperatureThreshold(self, dev, threshold=None, out=None):
        temps = dev.profile.get("temperature_c") or {}
        value = {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: temps.get("shutdown"),
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: temps.get("slowdown"),
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: temps.get("gpu_max", temps.get("slowdown")),
        }.get(_int(threshold))
        if value is None:
            return E_NS
        return self._put(out, int(value))

    @device_call
    def nvmlDeviceGetFanSpeed(self, dev, out=None):
        return self._put(out, dev.state().fan_pct or 0)

    @device_call
    def nvmlDeviceGetFanSpeed_v2(self, dev, fan=None, out=None):
        if _int(fan) not in (0, 1):
            return E_INVALID
        return self._put(out, dev.state().fan_pct or 0)

    @device_call
    def nvmlDeviceGetNumFans(self, dev, out=None):
        return self._put(out, 2)

    # == PCIe ===============================================================
    @device_call
    def nvmlDeviceGetCurrPcieLinkGeneration(self, dev, out=None):
        return self._put(out, dev.state().pcie_gen)

    @device_call
    def nvmlDeviceGetMaxPcieLinkGeneration(self, dev, out=None):
        return self._put(out, int(dev.pcie["max_gen"]))

    @device_call
    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, dev, out=None):
        return self._put(out, int(dev.pcie.get("device_max_gen", dev.pcie["max_gen"])))

    @device_call
    def nvmlDeviceGetCurrPcieLinkWidth(self, dev, out=None):
        return self._put(out, int(dev.pcie["current_width"]))

    @device_call
    def nvmlDeviceGetMaxPcieLinkWidth(self, dev, out=None):
        return self._put(out, int(dev.pcie["max_width"]))

    @device_call
    def nvmlDeviceGetPcieLinkMaxSpeed(self, dev, out=None):
        return self._put(
            out, {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000}[int(dev.pcie["max_gen"])]
        )

    @device_call
    def nvmlDeviceGetPcieSpeed(self, dev, out=None):
        return self._put(
            out, {1: 2500, 2: 5000, 3: 8000, 4: 16000, 5: 32000, 6: 64000}[dev.state().pcie_gen]
        )

    @device_call
    def nvmlDeviceGetPcieThroughput(self, dev, counter=None, out=None):
        c = _int(counter)
        st = dev.state()
        if c == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return self._put(out, st.pcie_tx_kbps)
        if c == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return self._put(out, st.pcie_rx_kbps)
        return E_INVALID

    @device_call
    def nvmlDeviceGetPcieReplayCounter(self, dev, out=None):
        return self._put(out, dev.pcie_replays)

    # == topology and P2P =====================================================
    def _peer(self, h):
        d = self.m.by_addr.get(_addr(h))
        if d is None or d.is_mig:
            return None
        return d

    @device_call
    def nvmlDeviceGetP2PStatus(self, dev, other=None, caps=None, out=None):
        peer = self._peer(other)
        c = _int(caps)
        if (
            dev.is_mig
            or peer is None
            or c is None
            or not 0 <= c <= pynvml.NVML_P2P_CAPS_INDEX_UNKNOWN
        ):
            return E_INVALID
        code = _gpu_guard(self.m, peer, "nvmlDeviceGetP2PStatus")
        if code is not None:
            return code
        if c == pynvml.NVML_P2P_CAPS_INDEX_UNKNOWN:
            return self._put(out, pynvml.NVML_P2P_STATUS_UNKNOWN)
        return self._put(out, self.m.topology.p2p(dev.index, peer.index, c))

    @device_call
    def nvmlDeviceGetTopologyCommonAncestor(self, dev, other=None, out=None):
        peer = self._peer(other)
        if dev.is_mig or peer is None:
            return E_INVALID
        code = _gpu_guard(self.m, peer, "nvmlDeviceGetTopologyCommonAncestor")
        if code is not None:
            return code
        return self._put(out, self.m.topology.level(dev.index, peer.index))

    @device_call
    def nvmlDeviceGetTopologyNearestGpus(self, dev, level=None, count=None, arr=None):
        lv = _int(level)
        near = [
            d.handle.addr
            for d in self.m.devices
            if d is not dev and self.m.topology.level(dev.index, d.index) <= lv
        ]
        return self._put_handles(count, arr, near)

    @device_call
    def nvmlDeviceOnSameBoard(self, dev, other=None, out=None):
        return self._put(out, 0)

    # == NVLink =============================================================
    def _link(self, dev, link) -> int | None:
        n = _int(link)
        if n is None or not 0 <= n < int(dev.nvlink["links"]):
            return None
        return n

    def _link_active(self, dev) -> bool:
        if dev.nvlink.get("topology") == "bridge":
            return self.m.topology.nvlink_peer(dev.index) is not None
        return True

    @device_call
    def nvmlDeviceGetNvLinkState(self, dev, link=None, out=None):
        if self._link(dev, link) is None:
            return E_INVALID
        return self._put(
            out,
            pynvml.NVML_FEATURE_ENABLED if self._link_active(dev) else pynvml.NVML_FEATURE_DISABLED,
        )

    @device_call
    def nvmlDeviceGetNvLinkVersion(self, dev, link=None, out=None):
        if self._link(dev, link) is None:
            return E_INVALID
        return self._put(out, int(dev.nvlink.get("version", 4)))

    @device_call
    def nvmlDeviceGetNvLinkCapability(self, dev, link=None, cap=None, out=None):
        if self._link(dev, link) is None or _int(cap) is None:
            return E_INVALID
        c = _int(cap)
        value = {pynvml.NVML_NVLINK_CAP_SLI_BRIDGE: 0}.get(c, 1)
        if c > pynvml.NVML_NVLINK_CAP_VALID:
            return E_INVALID
        return self._put(out, value if self._link_active(dev) else 0)

    @device_call
    def nvmlDeviceGetNvLinkRemotePciInfo_v2(self, dev, link=None, out=None):
        n = self._link(dev, link)
        if n is None:
            return E_INVALID
        if not self._link_active(dev):
            return E_NS
        peer = self.m.topology.nvlink_peer(dev.index)
        if peer is not None:
            p = self.m.devices[peer]
            return self._fill_pci(out, p.bus_id, p.pci_bus, p.pci_device_id, p.pci_subsystem_id)
        # Four NVSwitch chips per baseboard; each SPEC item is its own baseboard, so
        # GPUs of different items (models) never share a switch.
        item = self.m.topology.slots[dev.index].item
        switch_bus = 0xC0 + ((item % 4) * 0x10 + (n % 4) * 0x04)
        return self._fill_pci(
            out, f"00000000:{switch_bus:02X}:00.0".encode(), switch_bus, 0x22A310DE, 0x169910DE
        )

    @device_call
    def nvmlDeviceGetNvLinkRemoteDeviceType(self, dev, link=None, out=None):
        if self._link(dev, link) is None:
            return E_INVALID
        if not self._link_active(dev):
            return self._put(out, pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN)
        peer = self.m.topology.nvlink_peer(dev.index)
        return self._put(
            out,
            pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
            if peer is not None
            else pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH,
        )

    @device_call
    def nvmlDeviceGetNvLinkErrorCounter(self, dev, link=None, counter=None, out=None):
        if self._link(dev, link) is None:
            return E_INVALID
        return self._put(out, 0)

    # == field values ==========================================================
    @device_call
    def nvmlDeviceGetFieldValues(self, dev, count=None, values=None):
        n = _int(count)
        arr = _out(values)
        if arr is None or n is None or n < 0:
            return E_INVALID
        st = dev.state()
        now_us = int(self.m.clock.now() * 1e6)
        for i in range(n):
            fv = arr[i]
            kind, value = self._field(dev, st, fv.fieldId, fv.scopeId)
            fv.timestamp = now_us
            fv.latencyUsec = 0
            if kind is None:
                fv.nvmlReturn = value
                continue
            fv.nvmlReturn = OK
            fv.valueType = kind
            if kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT:
                fv.value.uiVal = int(value)
            elif kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
                fv.value.ullVal = int(value)
            else:
                fv.value.dVal = float(value)
        return OK

    def _field(self, dev, st, field_id, scope):
        ui, ull = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        if field_id in (pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, pynvml.NVML_FI_DEV_ENERGY):
            return ull, st.energy_j * 1000
        if field_id in (pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_FI_DEV_POWER_AVERAGE):
            return ui, st.power_w * 1000
        if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
            if str(dev.profile["memory"].get("type", "")).startswith("HBM"):
                return ui, st.temp_c + 6
            return None, E_NS
        if field_id == pynvml.NVML_FI_DEV_ECC_CURRENT:
            return (ui, 1 if dev.ecc.get("enabled") else 0) if dev.ecc else (None, E_NS)
        if field_id == pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER:
            return ui, dev.pcie_replays
        if field_id == pynvml.NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER:
            return ui, 0  # the replay counter never wraps in a simulated run
        bit = REASON_TIME_FIELDS.get(field_id)
        if bit is not None:
            if not dev.reason_counters:
                return None, E_NS
            return ull, st.reason_s[bit] * 1e9
        if field_id in (
            pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
            pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
        ):
            share = 0.12 if field_id == pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES else 0.2
            return ull, st.util_s / 100 * dev.model.pcie_kbps * 1000 * share
        nv = dev.nvlink if not dev.mig_enabled else None  # no NVLink queries in MIG mode
        if field_id == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            return (ui, nv["links"]) if nv else (None, E_NS)
        if field_id in (
            pynvml.NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON,
            pynvml.NVML_FI_DEV_NVLINK_GET_SPEED,
        ):
            return (ui, nv.get("speed_mbps", 25000)) if nv else (None, E_NS)
        if field_id in (
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX,
        ):
            if not nv:
                return None, E_NS
            total_kib = self._nvlink_bytes(dev, st.util_s) / 1024
            if field_id in (
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX,
                pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX,
            ):
                total_kib *= 1.06
            links = int(nv["links"])
            return ull, total_kib / links if scope < links else total_kib
        return None, E_NS

    def _nvlink_bytes(self, dev, util_s: float) -> float:
        """Bytes moved over all NVLinks since start, in one direction."""
        if not dev.nvlink or not self._link_active(dev):
            return 0.0
        gbps = float(dev.profile.get("load", {}).get("nvlink_gbps", 100))
        return util_s / 100 * gbps * 1e9

    # == ECC, retired pages, remapped rows ======================================
    @device_call
    def nvmlDeviceGetEccMode(self, dev, current=None, pending=None):
        gpu = dev.gpu if dev.is_mig else dev
        on = 1 if gpu.ecc and gpu.ecc.get("enabled") else 0
        if self._put(current, on) != OK:
            return E_INVALID
        return self._put(pending, on)

    @device_call
    def nvmlDeviceGetDefaultEccMode(self, dev, out=None):
        return self._put(out, 1)

    @device_call
    def nvmlDeviceGetTotalEccErrors(self, dev, err_type=None, counter=None, out=None):
        gpu = dev.gpu if dev.is_mig else dev
        key = (
            "corrected"
            if _int(err_type) == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
            else "uncorrected"
        )
        return self._put(out, gpu.ecc_counts[key])

    @device_call
    def nvmlDeviceGetMemoryErrorCounter(
        self, dev, err_type=None, counter=None, location=None, out=None
    ):
        gpu = dev.gpu if dev.is_mig else dev
        key = (
            "corrected"
            if _int(err_type) == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
            else "uncorrected"
        )
        loc = _int(location)
        if loc in (pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY, pynvml.NVML_MEMORY_LOCATION_DRAM):
            return self._put(out, gpu.ecc_counts[key])
        return self._put(out, 0)

    @device_call
    def nvmlDeviceGetRetiredPages(self, dev, cause=None, count=None, pages=None):
        return self._two_call(count, pages, [], _fill_value)

    @device_call
    def nvmlDeviceGetRetiredPages_v2(self, dev, cause=None, count=None, pages=None, times=None):
        return self._two_call(count, pages, [], _fill_value)

    @device_call
    def nvmlDeviceGetRetiredPagesPendingStatus(self, dev, out=None):
        return self._put(out, 0)

    @device_call
    def nvmlDeviceGetRemappedRows(self, dev, corr=None, unc=None, pending=None, failure=None):
        for out, value in (
            (corr, 0),
            (unc, dev.ecc_counts["uncorrected"]),
            (pending, 0),
            (failure, 0),
        ):
            if self._put(out, value) != OK:
                return E_INVALID
        return OK

    @device_call
    def nvmlDeviceGetRowRemapperHistogram(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        o.max = 2560 if str(dev.profile["memory"].get("type", "")).startswith("HBM") else 192
        return OK

    # == processes ================================================================
    def _procs(self, dev, count, arr):
        gpu = dev.gpu if dev.is_mig else dev
        procs = gpu.processes(dev.gi_id if dev.is_mig else None)
        return self._two_call(count, arr, procs, _fill_proc)

    @device_call
    def nvmlDeviceGetComputeRunningProcesses_v3(self, dev, count=None, arr=None):
        return self._procs(dev, count, arr)

    @device_call
    def nvmlDeviceGetComputeRunningProcesses_v2(self, dev, count=None, arr=None):
        return self._procs(dev, count, arr)

    @device_call
    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, dev, count=None, arr=None):
        return self._two_call(count, arr, [], _fill_proc)

    @device_call
    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, dev, count=None, arr=None):
        return self._two_call(count, arr, [], _fill_proc)

    @device_call
    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, dev, count=None, arr=None):
        return self._two_call(count, arr, [], _fill_proc)

    # == events (XID) ==========================================================
    @system_call()
    def nvmlEventSetCreate(self, out=None):
        es = _EventSet(self.m)
        self.m.event_sets[es.addr] = es
        return self._put_handle(out, es.addr)

    @device_call
    def nvmlDeviceRegisterEvents(self, dev, types=None, event_set=None):
        es = self.m.event_sets.get(_addr(event_set))
        mask = _int(types)
        if es is None or mask is None or dev.is_mig:
            return E_INVALID
        if mask & ~self._event_mask(dev):
            return E_NS
        old = es.registered.get(dev.index)
        es.registered[dev.index] = ((old[0] if old else 0) | mask, old[1] if old else self.m.now())
        return OK

    @system_call()
    def nvmlEventSetWait_v2(self, event_set=None, data=None, timeout_ms=None):
        es = self.m.event_sets.get(_addr(event_set))
        out = _out(data)
        if es is None or out is None:
            return E_INVALID
        timeout = (_int(timeout_ms) or 0) / 1000.0
        deadline = None
        while True:
            now = self.m.now()
            nxt = None
            for at, seq, gpu, code, gi_id, ci_id in self.m.xids:
                reg = es.registered.get(gpu)
                if (
                    reg is None
                    or not reg[0] & pynvml.nvmlEventTypeXidCriticalError
                    or seq in es.delivered
                ):
                    continue
                if at < reg[1]:
                    continue  # happened before the registration
                if at <= now:
                    es.delivered.add(seq)
                    dev = self.m.devices[gpu]
                    _set_field_ptr(out, "device", dev.handle.addr)
                    out.eventType = pynvml.nvmlEventTypeXidCriticalError
                    out.eventData = code
                    out.gpuInstanceId = gi_id
                    out.computeInstanceId = ci_id
                    return OK
                nxt = at
                break
            if self.m.clock.manual or timeout <= 0:
                return E_TIMEOUT
            if deadline is None:
                deadline = now + timeout
            if now >= deadline:
                return E_TIMEOUT
            wake = min(deadline, nxt) if nxt is not None else deadline
            self.m.clock.sleep(min(max(0.0, wake - now), 0.25))

    @system_call()
    def nvmlEventSetFree(self, event_set=None):
        if self.m.event_sets.pop(_addr(event_set), None) is None:
            return E_INVALID
        return OK

    # == MIG ====================================================================
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
        for p in (dev.mig or {}).get("gpu_instance_profiles") or []:
            if int(p["profile_id"]) == profile_index:
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
        p = self._gi_profile(dev, _int(profile_id))
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
        o.placement.start = 0
        o.placement.size = ci.gi.slices
        return OK

    # == virtualisation ============================================================
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
            tid
            for tid, t in dev.vgpu_types.items()
            if int(t["fb_mib"]) <= total - used and (not kinds or tid in kinds)
        ]
        return self._two_call(count, arr, creatable, _fill_value)

    @device_call
    def nvmlVgpuTypeGetMaxInstances(self, dev, type_id=None, out=None):
        t = dev.vgpu_types.get(_int(type_id))
        if t is None:
            return E_INVALID
        return self._put(out, int(t.get("max_instances", 1)))

    @device_call
    def nvmlDeviceGetVgpuUtilization(
        self, dev, timestamp=None, value_type=None, count=None, arr=None
    ):
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
        return (
            E_INVALID
            if self._type(type_id) is None
            else _put_str(buf, b"NVIDIA-RTX-Virtual-Workstation,5.0", None)
        )

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
            pynvml.NVML_GRID_LICENSE_STATE_LICENSED
            if licensed
            else pynvml.NVML_GRID_LICENSE_STATE_UNLICENSED
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

    # == GPM (Hopper) ==============================================================
    @device_call
    def nvmlGpmQueryDeviceSupport(self, dev, out=None):
        o = _out(out)
        if o is None:
            return E_INVALID
        if o.version != pynvml.NVML_GPM_SUPPORT_VERSION:
            return E_VERSION
        o.isSupportedDevice = 1 if (not dev.is_mig and dev.gpm) else 0
        return OK

    @system_call()
    def nvmlGpmSampleAlloc(self, out=None):
        s = _GpmSample()
        self.m.gpm_samples[s.addr] = s
        return self._put_handle(out, s.addr)

    @system_call()
    def nvmlGpmSampleFree(self, sample=None):
        if self.m.gpm_samples.pop(_addr(sample), None) is None:
            return E_INVALID
        return OK

    def _snap(self, dev, sample, gi_id=None):
        s = self.m.gpm_samples.get(_addr(sample))
        if s is None:
            return E_INVALID
        st = dev.state()
        share = 1.0
        if gi_id is not None:
            mig = next((m for m in dev.mig_devices if m.gi_id == gi_id), None)
            if mig is None:
                return E_NOT_FOUND
            share = mig.share
        s.gpu, s.gi = dev, gi_id
        s.snap = (
            st.t,
            st.util_s * share,
            st.mem_util_s * share,
            st.util * share,
            st.mem_util * share,
        )
        return OK

    @device_call
    def nvmlGpmSampleGet(self, dev, sample=None):
        if dev.is_mig:
            return E_INVALID
        return self._snap(dev, sample)

    @device_call
    def nvmlGpmMigSampleGet(self, dev, gi_id=None, sample=None):
        if dev.is_mig or not dev.mig_enabled:
            return E_INVALID
        return self._snap(dev, sample, _int(gi_id))

    @system_call()
    def nvmlGpmMetricsGet(self, arg=None):
        mg = _out(arg)
        if mg is None:
            return E_INVALID
        if mg.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            return E_VERSION
        s1 = self.m.gpm_samples.get(_addr(mg.sample1))
        s2 = self.m.gpm_samples.get(_addr(mg.sample2))
        if (
            s1 is None
            or s2 is None
            or s1.snap is None
            or s2.snap is None
            or s1.gpu is not s2.gpu
            or s1.gi != s2.gi
        ):
            return E_INVALID
        if mg.numMetrics > pynvml.NVML_GPM_METRIC_MAX:
            return E_INVALID
        dev = s1.gpu
        code = _gpu_guard(self.m, dev, "nvmlGpmMetricsGet")
        if code is not None:
            return code
        (t1, u1, m1, ui1, mi1), (t2, u2, m2, ui2, mi2) = sorted((s1.snap, s2.snap))
        dt = t2 - t1
        util = (u2 - u1) / dt if dt > 0 else (ui1 + ui2) / 2
        mem = (m2 - m1) / dt if dt > 0 else (mi1 + mi2) / 2
        mix = dev.model.mix
        pcie = dev.model.pcie_kbps * 1000 / (1 << 20)
        nvl = self._nvlink_bytes(dev, util) / (1 << 20) if dev.nvlink else 0.0
        for i in range(mg.numMetrics):
            metric = mg.metrics[i]
            mid = metric.metricId
            value = None
            if mid == pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL:
                value = mem
            elif mid == pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL:
                value = util
            elif mid in _GPM_SHARE:
                value = util * mix.get(_GPM_SHARE[mid], 0.0) if _GPM_SHARE[mid] != "busy" else util
            elif mid == pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC:
                value = pcie * util / 100 * 0.12
            elif mid == pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC:
                value = pcie * util / 100 * 0.2
            elif mid in (
                pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
                pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
            ):
                value = nvl if dev.nvlink and s1.gi is None else None
            elif dev.nvlink and 62 <= mid <= 61 + 2 * int(dev.nvlink["links"]) and s1.gi is None:
                value = nvl / int(dev.nvlink["links"])
            if value is None:
                metric.nvmlReturn = E_NS
                metric.value = 0.0
                continue
            metric.nvmlReturn = OK
            metric.value = float(min(value, 100.0) if mid < 20 else value)
            names = GPM_METRIC_NAMES.get(mid)
            if names:
                metric.metricInfo.shortName, metric.metricInfo.longName, metric.metricInfo.unit = (
                    names
                )
        return OK


def _bytes(a) -> bytes | None:
    if a is None:
        return None
    if isinstance(a, bytes):
        return a
    if isinstance(a, str):
        return a.encode()
    v = getattr(a, "value", None)
    return v if isinstance(v, bytes) else None


def _fill_value(slot, i, item, arr):
    arr[i] = item


def _fill_proc(slot, i, item, arr):
    pid, used, gi, ci = item
    slot.pid = pid
    slot.usedGpuMemory = used
    slot.gpuInstanceId = gi
    slot.computeInstanceId = ci


__all__ = ["FakeNvmlLib", "SimDevice", "SimMigDevice", "check_args"]
