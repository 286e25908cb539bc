"""How a C call is entered: the decorators every fake symbol wears.

Each counts the call (machine-wide and, once a handle is resolved, per GPU), checks its
arguments as ctypes would, answers UNINITIALIZED before nvmlInit and INVALID_ARGUMENT for a
handle it cannot resolve, and then applies the faults a test or scenario set up: a lost GPU
answers GPU_IS_LOST to everything, then a forced code (for that GPU or machine-wide), then, for
a MIG device handle, NOT_SUPPORTED unless the symbol is in MIG_HANDLE_CALLS, and last the
profile's fixed code for the symbol. Only then does the area's own code run. This is the path
every simulated call takes, so it is kept flat and cheap.
"""

from __future__ import annotations

import functools

from gpuagent.sim.fakelib.args import E_INVALID, E_LOST, E_NS, E_UNINIT, _addr, check_args
from gpuagent.sim.machine import MIG_HANDLE_CALLS, SYSTEM_SYMBOLS, SimDevice, SimMachine, call_slot


def device_call(fn=None, *, forced_on_mig_handles: bool = True):
    """First argument is a device handle: resolve it and apply lost/forced/unsupported answers.

    With ``forced_on_mig_handles=False`` a code forced on a GPU hits only the GPU's own handle;
    its MIG device handles still answer (the process lists: the parent's needs privileges, each
    MIG device lists its own instance's processes).
    """
    if fn is None:
        return functools.partial(device_call, forced_on_mig_handles=forced_on_mig_handles)
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
        if dev.is_mig:
            gpu = dev.gpu
            gpu.call_counts[slot] += 1
            if not forced_on_mig_handles:
                code = E_LOST if _is_lost(m, gpu) else None
            else:
                code = _lost_or_forced(m, gpu, name)
            if code is not None:
                return code
            if name not in MIG_HANDLE_CALLS:
                return E_NS
            code = dev.fixed.get(name)
        else:
            dev.call_counts[slot] += 1
            code = _gpu_guard(m, dev, name)
        if code is not None:
            return code
        return fn(self, dev, *args)

    return wrapper


def system_call(needs_init: bool = True):
    def decorate(fn):
        name = fn.__name__
        slot = call_slot(name)
        SYSTEM_SYMBOLS.add(name)  # a SPEC item's fault on it is forced machine-wide

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


def _is_lost(m: SimMachine, gpu: SimDevice) -> bool:
    if gpu.lost_at is None or m.now() < gpu.lost_at:
        return False
    return gpu.lost_until is None or m.now() < gpu.lost_until  # lost_until: a reset brought it back


def _lost_or_forced(m: SimMachine, gpu: SimDevice, name: str) -> int | None:
    """GPU_IS_LOST once the GPU is lost, else a code forced for this call, else None."""
    if gpu.lost_at is not None and _is_lost(m, gpu):  # no clock read for a GPU never lost
        return E_LOST
    forced = m.forced
    if forced:
        return forced.get((name, gpu.index), forced.get((name, None)))
    return None


def _gpu_guard(m: SimMachine, gpu: SimDevice, name: str) -> int | None:
    """_lost_or_forced, then the card's fixed code for the call."""
    code = _lost_or_forced(m, gpu, name)
    return code if code is not None else gpu.fixed.get(name)


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
