"""Power and thermals: power draw, energy counter, power limits and constraints, temperature
(plain and versioned), temperature thresholds, and fans.

Draw, energy, temperature and fan speed follow the load model; limits and thresholds come from
the profile. Power is answered in milliwatts and energy in millijoules, as NVML does. A
threshold the profile does not give answers NOT_SUPPORTED.
"""

from __future__ import annotations

import pynvml

from gpuagent.sim.fakelib.args import (
    _GET,
    _SET,
    E_INVALID,
    E_NS,
    E_VERSION,
    OK,
    NvmlCalls,
    _int,
    _out,
    _version,
)
from gpuagent.sim.fakelib.calls import device_call


class PowerThermalCalls(NvmlCalls):
    @device_call
    def nvmlDeviceGetPowerUsage(self, dev, out=None):
        return self._put(out, int(dev.state().power_w * 1000))

    @device_call
    def nvmlDeviceGetTotalEnergyConsumption(self, dev, out=None):
        return self._put(out, int(dev.state().energy_j * 1000))

    @device_call
    def nvmlDeviceGetPowerManagementMode(self, dev, out=None):
        # nvml.h: DEPRECATED(13.0); every capture from driver 590 on prints "Power Management:
        # Requested functionality has been deprecated" (H100 590.48.01, L40S 595.80, RTX 2080
        # SUPER 595.71.05 and 610.62), i.e. NVML_ERROR_DEPRECATED.
        if int(self.m.driver_version.split(b".")[0] or 0) >= 590:
            return pynvml.NVML_ERROR_DEPRECATED
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
        if _GET(o, "version") != pynvml.nvmlTemperature_v1:
            return E_VERSION
        if _GET(o, "sensorType") != pynvml.NVML_TEMPERATURE_GPU:
            return E_INVALID
        _SET(o, "temperature", int(round(dev.state().temp_c)))
        return OK

    @device_call
    def nvmlDeviceGetTemperatureThreshold(self, dev, threshold=None, out=None):
        temps = dev.profile.get("temperature_c") or {}
        # An imported capture gives max operating (gpu_max) itself; a built-in profile without
        # it answers its slowdown threshold there, as before.
        value = {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: temps.get("shutdown"),
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: temps.get("slowdown"),
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: temps.get("gpu_max", temps.get("slowdown")),
            pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: temps.get("memory_max"),
            # nvidia-smi's "GPU Target Temperature" (nvml.h: the acoustic threshold currently set).
            pynvml.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR: temps.get("target"),
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

    @device_call
    def nvmlDeviceGetTargetFanSpeed(self, dev, fan=None, out=None):
        # Exported by the 590 driver (the H100 capture's nvml-symbols); the simulated fan is
        # always at its target. Fan-less cards answer NOT_SUPPORTED (FAN_CALLS).
        if _int(fan) not in (0, 1):
            return E_INVALID
        return self._put(out, dev.state().fan_pct or 0)

    @device_call
    def nvmlDeviceGetFanSpeedRPM(self, dev, out=None):
        # Exported by the 590 driver, but no capture shows an RPM: NOT_SUPPORTED rather than an
        # invented speed (fan-less cards answer it through FAN_CALLS).
        return E_NS

    @device_call
    def nvmlDeviceGetMarginTemperature(self, dev, out=None):
        # nvml.h: "thermal margin temperature (distance to nearest slowdown threshold)",
        # versioned struct; NOT_SUPPORTED where the platform has none (thermal_margin: pre-Ada).
        o = _out(out)
        if o is None:
            return E_INVALID
        if _version(o) != pynvml.nvmlMarginTemperature_v1:
            return E_VERSION
        margin = thermal_margin(dev, dev.state().temp_c)
        if margin is None:
            return E_NS
        _SET(o, "marginTemperature", int(round(margin)))
        return OK


# nvml.h: the TLIMIT fields "are supported on Ada and later architectures".
TLIMIT_ARCHS = ("Ada Lovelace", "Ada", "Hopper", "Blackwell")


def tlimit_base(dev) -> float | None:
    """The absolute temperature T.Limit 0 stands for (max operating): a capture's current
    temperature plus its "GPU T.Limit Temp", else the profile's gpu_max (or slowdown) on Ada and
    newer; None before Ada."""
    temps = dev.profile.get("temperature_c") or {}
    if dev.profile.get("architecture") not in TLIMIT_ARCHS:
        return None
    tl = temps.get("tlimit") or {}
    if tl.get("margin") is not None and temps.get("idle") is not None:
        return float(temps["idle"]) + float(tl["margin"]) - float(tl.get("gpu_max", 0))
    base = temps.get("gpu_max", temps.get("slowdown"))
    return None if base is None else float(base)


def thermal_margin(dev, temp_c: float) -> float | None:
    """Degrees left before T.Limit 0 (what nvidia-smi prints as "GPU T.Limit Temp")."""
    base = tlimit_base(dev)
    return None if base is None else base - temp_c


def tlimit_threshold(dev, key: str) -> float | None:
    """A threshold on the T.Limit scale (the capture's "-8 C" for shutdown), or derived from the
    absolute one as base - threshold; None where the card has neither."""
    base = tlimit_base(dev)
    if base is None:
        return None
    temps = dev.profile.get("temperature_c") or {}
    tl = temps.get("tlimit") or {}
    if key in tl:
        return float(tl[key])
    if key == "gpu_max":
        return 0.0
    absolute = temps.get(key)
    return None if absolute is None or key == "memory_max" else base - float(absolute)
