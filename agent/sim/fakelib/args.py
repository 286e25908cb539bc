"""How a C call's arguments are taken and answered: NVML return codes, ctypes' argument checks,
and the writers that put an answer through the caller's output arguments.

pynvml calls libnvidia-ml without argtypes, so ctypes converts each argument on its own and
refuses what it cannot pass; check_args refuses the same things with ctypes' own messages, so a
wrapper misuse fails here as it would on hardware. Handles are opaque pointers and outputs come
back through byref()/pointer arguments and ctypes arrays, so _addr/_out/_int read them whatever
form the caller used, and NvmlCalls (the base of every area's calls) writes answers the way the
C library does, including the two-call "ask for the count, then the array" pattern.
"""

from __future__ import annotations

import ctypes
from ctypes import addressof, c_void_p

import pynvml

from gpuagent.sim.machine import SimMachine

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

_CArg = type(ctypes.byref(ctypes.c_int()))
_CTYPES_BASES = (ctypes._SimpleCData, ctypes.Structure, ctypes.Union, ctypes.Array, ctypes._Pointer)
_PASSABLE: set[type] = {int, bool, bytes, str, type(None), _CArg}
_Pointer = ctypes._Pointer
_POINTER_TYPES: set[type] = set()  # the handle types seen that are ctypes pointers


# Plain ctypes attribute access, past pynvml's printable-structure hooks (a str/bytes check on
# every read and write): the same for the numbers and bytes the fake library reads and writes.
_GET = ctypes.Structure.__getattribute__
_SET = ctypes.Structure.__setattr__


def _version(o):
    """``o.version``, None if it has none (getattr(o, "version", None) without the hook)."""
    try:
        return _GET(o, "version")
    except AttributeError:
        return None


def check_args(args: tuple) -> None:
    """Refuse what ctypes refuses for a function without argtypes."""
    for a in args:  # the common case: types already seen, ints in range
        t = type(a)
        if t is int:
            if not -0x8000000000000000 <= a <= 0xFFFFFFFFFFFFFFFF:
                break
        elif t not in _PASSABLE:
            break
    else:
        return
    _check_args(args)


def _check_args(args: tuple) -> None:
    for i, a in enumerate(args, 1):
        t = type(a)
        if t in _PASSABLE:
            if t is int and not -0x8000000000000000 <= a <= 0xFFFFFFFFFFFFFFFF:
                raise ctypes.ArgumentError(f"argument {i}: OverflowError: int too long to convert")
            continue
        if isinstance(a, _CTYPES_BASES) or hasattr(a, "_as_parameter_"):
            _PASSABLE.add(t)
            continue
        raise ctypes.ArgumentError(f"argument {i}: TypeError: Don't know how to convert parameter {i}")


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
    if isinstance(a, _Pointer):
        return a.contents if a else None
    return a


def _addr(h) -> int | None:
    """Address held by an opaque handle argument."""
    t = type(h)
    # A set lookup, not isinstance(h, _Pointer) (ctypes' metaclass makes that ~4x slower).
    if t not in _POINTER_TYPES and isinstance(h, _Pointer):
        _POINTER_TYPES.add(t)
    if t in _POINTER_TYPES:
        try:
            return addressof(h.contents)
        except ValueError:  # NULL
            return None
    if t is int:
        return h
    if t is _CArg:
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
    _SET(slot, "pid", pid)
    _SET(slot, "usedGpuMemory", used)
    _SET(slot, "gpuInstanceId", gi)
    _SET(slot, "computeInstanceId", ci)


class NvmlCalls:
    """Base of the per-area call classes FakeNvmlLib is assembled from: the machine they
    answer for and the writers shared by every area."""

    m: SimMachine

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
