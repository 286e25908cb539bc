"""Clocks: current, maximum, application, default and boost clocks per clock domain, the
supported clock tables, performance state, and the clock-event (throttle) reasons.

Current clocks, P-state and the active reasons follow the load model (an imported capture's
idle run: the reasons it shows Active); maximum, idle and
application clocks come from the profile. The current "ClocksEvent" names and the older
"ClocksThrottle" names answer the same, so callers of either get the same reasons.
"""

from __future__ import annotations

from gpuagent.sim.fakelib.args import E_INVALID, E_NS, NvmlCalls, _fill_value, _int
from gpuagent.sim.fakelib.calls import device_call

CLOCK_NAMES = {0: "graphics", 1: "sm", 2: "memory", 3: "video"}  # nvmlClockType_t


class ClockCalls(NvmlCalls):
    def _clock(self, dev, kind, which: str):
        k = _int(kind)
        names = CLOCK_NAMES
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
        # Every GeForce capture prints "Max Customer Boost Clocks / Graphics: N/A" (RTX 2080
        # SUPER, 3060, 3080, 4080 SUPER, GTX 1660 Ti); an imported card that says N/A lists it
        # in "unsupported"; the datacenter captures (H100, L40S, A100) show the max clock.
        gpu = dev.gpu if dev.is_mig else dev
        if gpu.profile.get("brand") == "GeForce":
            return E_NS
        v = self._clock(dev, kind, "max")
        return E_INVALID if v is None else self._put(out, v)

    @device_call
    def nvmlDeviceGetClock(self, dev, kind=None, clock_id=None, out=None):
        which = {0: "current", 1: "applications", 2: "applications", 3: "max"}.get(_int(clock_id))
        v = self._clock(dev, kind, which) if which else None
        return E_INVALID if v is None else self._put(out, v)

    @device_call
    def nvmlDeviceGetSupportedMemoryClocks(self, dev, count=None, arr=None):
        clocks = sorted({int(dev.clocks["max"]["memory"]), int(dev.clocks["idle"]["memory"])}, reverse=True)
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

    @staticmethod
    def _reasons(dev) -> int:
        # An imported capture's idle run: the reasons it shows Active (all Not Active: 0), as stated.
        stated = (dev.model.captured_idle or {}).get("reasons")
        return dev.state().reasons if stated is None else int(stated)

    @device_call
    def nvmlDeviceGetCurrentClocksEventReasons(self, dev, out=None):
        return self._put(out, self._reasons(dev))

    @device_call
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, dev, out=None):
        return self._put(out, self._reasons(dev))

    @device_call
    def nvmlDeviceGetSupportedClocksEventReasons(self, dev, out=None):
        return self._put(out, dev.model.supported_reasons)

    @device_call
    def nvmlDeviceGetSupportedClocksThrottleReasons(self, dev, out=None):
        return self._put(out, dev.model.supported_reasons)
