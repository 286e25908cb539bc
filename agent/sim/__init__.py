"""Simulated GPU fleet at the libnvidia-ml boundary.

``install(spec)`` builds a SimMachine from a fleet SPEC and installs a pure-
Python libnvidia-ml (FakeNvmlLib) as ``pynvml.nvmlLib``; pynvml's own
wrappers then run unchanged against it. ``uninstall()`` puts NVML back to
"not loaded". See docs/simulator.md.
"""

from __future__ import annotations

import threading

import pynvml

from gpuagent.sim.clock import ManualClock, MonotonicClock
from gpuagent.sim.fakelib import FakeNvmlLib
from gpuagent.sim.load import SCENARIOS
from gpuagent.sim.machine import SimDevice, SimMachine, SimMigDevice
from gpuagent.sim.profile import BUILTIN_NAMES, load_profile

_lock = threading.Lock()
_installed: SimMachine | None = None


def install(spec: str, seed: int = 0, clock=None, scenario: str | None = None) -> SimMachine:
    """Build the machine for ``spec`` and make it pynvml's libnvidia-ml. Returns the SimMachine."""
    global _installed
    machine = spec if isinstance(spec, SimMachine) else SimMachine(spec, seed=seed, clock=clock, scenario=scenario)
    with _lock:
        with pynvml.libLoadLock:
            pynvml.nvmlLib = FakeNvmlLib(machine)
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlLib_refcount = 0
        _installed = machine
    return machine


def uninstall() -> None:
    """Forget the simulator: nvmlLib back to None (NVML not loaded), cache cleared."""
    global _installed
    with _lock:
        with pynvml.libLoadLock:
            pynvml.nvmlLib = None  # a real library, if wanted, is loaded again by the next nvmlInit
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlLib_refcount = 0
        _installed = None


def installed() -> SimMachine | None:
    """The machine currently installed, if any."""
    return _installed


__all__ = [
    "BUILTIN_NAMES",
    "SCENARIOS",
    "FakeNvmlLib",
    "ManualClock",
    "MonotonicClock",
    "SimDevice",
    "SimMachine",
    "SimMigDevice",
    "install",
    "installed",
    "load_profile",
    "uninstall",
]
