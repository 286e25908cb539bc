"""Fixtures shared by the built-in plugins' tests."""

from collections import Counter

import pynvml
import pytest


@pytest.fixture
def nvml_calls(simulated_fleet, monkeypatch):
    """Start counting the C symbols pynvml calls on the installed simulator (after simulated_fleet)."""

    def start() -> Counter:
        calls: Counter = Counter()
        lib = pynvml.nvmlLib

        class CountingLib:
            def __getattr__(self, name):
                fn = getattr(lib, name)

                def call(*args):
                    calls[name] += 1
                    return fn(*args)

                return call

        monkeypatch.setattr(pynvml, "nvmlLib", CountingLib())
        pynvml._nvmlGetFunctionPointer_cache.clear()
        return calls

    return start


@pytest.fixture
def gpm_warmup_on_sim_clock(sim_clock, monkeypatch):
    """The GPM collectors' first-run warm-up waits with time.sleep, which the manual simulator
    clock does not see: make that wait move the simulator's clock instead, so the two samples
    lie the warm-up apart in simulated time (the driver refuses samples 100 ms or less apart)."""
    from types import SimpleNamespace

    from gpuagent.gpus import gpm

    # One warm-up for memory, nvlink and mig: GpmSamplers.warm_up in gpuagent.gpus.gpm.
    monkeypatch.setattr(gpm, "time", SimpleNamespace(sleep=sim_clock.advance))
    return sim_clock


@pytest.fixture
def two_cycles(nvml_calls, sim_clock, recording_accumulator):
    """two_cycles(collector, advance=10) -> (NVML calls of its first run in all, the calls by
    name of its second run `advance` simulated seconds later): the per-cycle cost the plugins'
    tests bound (the first run adds the static reads)."""

    def run(collector, advance: float = 10.0) -> tuple[int, Counter]:
        calls = nvml_calls()
        collector.collect(recording_accumulator)
        first = sum(calls.values())
        calls.clear()
        sim_clock.advance(advance)
        collector.collect(recording_accumulator)
        return first, calls

    return run


@pytest.fixture
def captured_run(tmp_path, simulated_fleet, sim_clock, recording_accumulator):
    """captured_run(capture, make) -> the capture's profile, after one run of the collector
    `make(machine)` builds on that profile, 30 s into a training load (the points are in
    recording_accumulator). A capture of None skips the test (tests/captures.py)."""
    from captures import capture_profile

    def run(capture, make) -> dict:
        spec, profile = capture_profile(capture, tmp_path)
        machine = simulated_fleet(spec, scenario="training")
        sim_clock.advance(30)
        make(machine).collect(recording_accumulator)
        return profile

    return run
