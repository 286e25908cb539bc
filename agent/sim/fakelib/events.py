"""Events: event sets, registering a device for event types, waiting, and freeing.

Only XID critical errors are ever delivered, from the machine's XID schedule (faults and
inject_xid add to it); a registered GPU that is lost answers GPU_IS_LOST once per set. An event is delivered once per set and only if it happened after the
device was registered. A wait sleeps on the machine's clock, at most 0.25 s at a time, until
the next XID or the timeout; with a manual clock it never blocks and answers TIMEOUT at once.
"""

from __future__ import annotations

import ctypes
from ctypes import addressof

import pynvml

from gpuagent.sim.fakelib.args import (
    E_INVALID,
    E_LOST,
    E_NS,
    E_TIMEOUT,
    OK,
    NvmlCalls,
    _addr,
    _int,
    _out,
    _set_field_ptr,
)
from gpuagent.sim.fakelib.calls import device_call, system_call
from gpuagent.sim.fakelib.identity import _event_mask
from gpuagent.sim.machine import SimMachine


class _EventSet:
    def __init__(self, m: SimMachine):
        self.handle_buf = ctypes.create_string_buffer(8)
        self.addr = addressof(self.handle_buf)
        self.registered: dict[int, tuple[int, float]] = {}  # gpu -> (mask, since)
        self.delivered: set[int] = set()
        self.lost_told: set[int] = set()  # lost GPUs this set has answered GPU_IS_LOST for


class EventCalls(NvmlCalls):
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
        if mask & ~_event_mask(dev):
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
                if reg is None or not reg[0] & pynvml.nvmlEventTypeXidCriticalError or seq in es.delivered:
                    continue
                if at < reg[1]:
                    continue  # happened before the registration
                if gi_id != 0xFFFFFFFF and self.m.devices[gpu].unprivileged:
                    # nvml.h (nvmlEventSetWait_v2): "In absence of required privileges, only the
                    # events which affect all the instances (i.e. whole device) are reported."
                    continue
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
            for gpu in es.registered:
                dev = self.m.devices[gpu]
                if dev.lost_at is not None and dev.lost_at <= now and gpu not in es.lost_told:
                    # nvml.h lists GPU_IS_LOST for nvmlEventSetWait_v2 ("if a GPU has fallen off
                    # the bus"). Told once per set, after the events already due (XID 79 first),
                    # so a waiter still hears from the set's other GPUs.
                    es.lost_told.add(gpu)
                    return E_LOST
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
