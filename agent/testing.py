"""pytest fixtures for gpuagent and its plugin authors (auto-loaded via the pytest11 entry point).

    def test_my_collector(simulated_fleet, sim_clock, recording_accumulator):
        machine = simulated_fleet("l40s:2,h100-sxm:1", seed=1, scenario="training")
        sim_clock.advance(10)
        for gpu in machine.gpus:             # gpuagent.Gpu objects, NVML initialised
            MyCollector(...).collect_gpu(recording_accumulator, gpu)
        assert recording_accumulator.fields("my_measurement")

- ``sim_clock``: a ManualClock (starts at 0, moves only with ``advance``).
- ``simulated_fleet(spec, seed=0, scenario=None, clock=None)``: installs the
  simulator (driven by ``sim_clock`` unless another clock is given), calls
  nvmlInit, and returns the SimMachine with ``machine.gpus`` filled with
  gpuagent.Gpu objects. Shut down and uninstalled at teardown.
- ``recording_accumulator``: an Accumulator with helpers to look points up.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuagent.collector import Collector
from gpuagent.pipeline.accumulator import Accumulator


class RecordingAccumulator(Accumulator):
    """An Accumulator whose points tests can query."""

    __slots__ = ()

    def measurements(self) -> list[str]:
        return sorted({p.measurement for p in self.points})

    def by_measurement(self, measurement: str) -> list[Any]:
        return [p for p in self.points if p.measurement == measurement]

    def fields(self, measurement: str, **tags: str) -> list[dict[str, Any]]:
        """Field dicts of the points of ``measurement`` whose tags include ``tags``."""
        return [
            dict(p.fields)
            for p in self.by_measurement(measurement)
            if all(p.tags.get(k) == str(v) for k, v in tags.items())
        ]

    def field(self, measurement: str, name: str, **tags: str) -> list[Any]:
        return [f[name] for f in self.fields(measurement, **tags) if name in f]

    def clear(self) -> None:
        self.points.clear()


@pytest.fixture
def sim_clock():
    from gpuagent.sim.clock import ManualClock

    return ManualClock()


@pytest.fixture
def simulated_fleet(sim_clock) -> Iterator[Any]:
    import pynvml

    from gpuagent import sim
    from gpuagent.gpus.gpu import Gpu

    started: list[Any] = []

    def factory(spec: str, seed: int = 0, scenario: str | None = None, clock: Any = None):
        if started:
            _teardown()
        machine = sim.install(spec, seed=seed, clock=clock or sim_clock, scenario=scenario)
        started.append(machine)
        pynvml.nvmlInit()
        machine.gpus = [Gpu(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
        return machine

    def _teardown() -> None:
        started.clear()
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
        sim.uninstall()

    yield factory
    if started:
        _teardown()


@pytest.fixture
def recording_accumulator() -> RecordingAccumulator:
    return RecordingAccumulator(default_tags={"host": "testhost"})


# -- helpers for collector tests ----------------------------------------------

IDENTITY_TAGS = frozenset({"host", "gpu", "uuid", "model", "pci_bus_id", "arch"})
NVML_SENTINELS = frozenset({0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFFFFFFFFFF})
# Fields whose NVML value is signed (nvml.h's T.Limit thresholds and the thermal margin).
SIGNED_FIELD_SUFFIXES = ("_tlimit_c", "thermal_margin_c")


def make_collector(machine: Any, cls: type[Collector], hostname: str = "testhost", **config: Any) -> Any:
    """A collector of class ``cls`` over a simulated machine's GPUs, its table given as keywords."""
    from gpuagent.context import AgentContext
    from gpuagent.gpus.nvml import NvmlSession

    session = NvmlSession(gpus=machine.gpus, simulated=True, machine=machine)
    context = AgentContext(hostname=hostname, gpus=machine.gpus, nvml=session)
    return cls(cls.Config(**config), context)


def assert_no_sentinels(fields: dict[str, Any]) -> None:
    """Fail on NVML's "not available" numbers (0xFFFFFFFF …) or negatives leaking into fields."""
    for name, value in fields.items():
        signed = name.endswith(SIGNED_FIELD_SUFFIXES)  # T.Limit values and margins may be negative
        assert not (
            isinstance(value, int)
            and not isinstance(value, bool)
            and ((value < 0 and not signed) or value in NVML_SENTINELS)
        ), f"{name}={value} is a sentinel"
