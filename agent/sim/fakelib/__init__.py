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

FakeNvmlLib is assembled from one class of calls per NVML area, each in its
own module (system, identity, memory, utilization, clocks, power_thermal, pcie,
topology, nvlink, fields, health, processes, events, mig, vgpu, gpm); args
holds the return codes and the ctypes argument handling they share, and calls
the decorators every call enters through.
"""

from __future__ import annotations

import functools

# The area modules are imported in this order on purpose: each C symbol gets its
# call-count slot when its module is loaded, and machine.calls lists symbols in
# slot order, so this keeps the order the single-module library had. Constants
# and decorators it had at top level are re-exported (hence the noqa: F401).
# isort: off
from gpuagent.sim.fakelib.system import ERROR_STRINGS, SystemCalls, _ErrorString  # noqa: F401
from gpuagent.sim.fakelib.identity import IdentityCalls
from gpuagent.sim.fakelib.memory import MemoryCalls
from gpuagent.sim.fakelib.utilization import UtilizationCalls
from gpuagent.sim.fakelib.clocks import ClockCalls
from gpuagent.sim.fakelib.power_thermal import PowerThermalCalls
from gpuagent.sim.fakelib.pcie import PcieCalls
from gpuagent.sim.fakelib.topology import TopologyCalls
from gpuagent.sim.fakelib.nvlink import NvLinkCalls
from gpuagent.sim.fakelib.fields import REASON_TIME_FIELDS, FieldValueCalls  # noqa: F401
from gpuagent.sim.fakelib.health import HealthCalls
from gpuagent.sim.fakelib.processes import ProcessCalls
from gpuagent.sim.fakelib.events import EventCalls
from gpuagent.sim.fakelib.mig import MigCalls
from gpuagent.sim.fakelib.vgpu import VgpuCalls
from gpuagent.sim.fakelib.gpm import GPM_METRIC_NAMES, GpmCalls  # noqa: F401
from gpuagent.sim.fakelib.health_faults import HealthFaultCalls

# isort: on

from gpuagent.sim.fakelib.args import (  # noqa: F401
    E_INVALID,
    E_LOST,
    E_NOT_FOUND,
    E_NS,
    E_SIZE,
    E_TIMEOUT,
    E_UNINIT,
    E_VERSION,
    NA32,
    OK,
    check_args,
)
from gpuagent.sim.fakelib.calls import device_call, owned_call, system_call  # noqa: F401
from gpuagent.sim.machine import SimDevice, SimMachine, SimMigDevice


class FakeNvmlLib(
    HealthFaultCalls,  # first: its field handlers answer the health field ids before FieldValueCalls'
    SystemCalls,
    IdentityCalls,
    MemoryCalls,
    UtilizationCalls,
    ClockCalls,
    PowerThermalCalls,
    PcieCalls,
    TopologyCalls,
    NvLinkCalls,
    FieldValueCalls,
    HealthCalls,
    ProcessCalls,
    EventCalls,
    MigCalls,
    VgpuCalls,
    GpmCalls,
):
    """The stand-in for ``pynvml.nvmlLib``; one per SimMachine."""

    def __new__(cls, machine: SimMachine):
        exported = getattr(machine, "exported_symbols", None)
        if exported is not None and cls is FakeNvmlLib:
            cls = _library_exporting(frozenset(exported))
        return super().__new__(cls)

    def __init__(self, machine: SimMachine):
        self.m = machine
        machine.size_call_counts()  # every symbol has its slot once this package is loaded
        self.nvmlErrorString = _ErrorString(machine)

    def __repr__(self) -> str:
        return f"<FakeNvmlLib {self.m!r}>"


class _NotExported:
    """A symbol the driver's libnvidia-ml does not export: looking it up fails as dlsym does,
    and pynvml answers FUNCTION_NOT_FOUND (captures' README, `nvml-symbols`)."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj, owner=None):
        raise AttributeError(self.name)


@functools.cache
def _library_exporting(exported: frozenset[str]) -> type[FakeNvmlLib]:
    """FakeNvmlLib with every nvml* symbol outside ``exported`` hidden."""
    hidden = {
        name: _NotExported(name)
        for name in dir(FakeNvmlLib)
        if name.startswith("nvml") and name not in exported and name != "nvmlErrorString"
    }
    return type("FakeNvmlLibOfDriver", (FakeNvmlLib,), hidden)


__all__ = ["FakeNvmlLib", "SimDevice", "SimMigDevice", "check_args"]
