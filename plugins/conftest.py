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

    from gpuagent import gpm

    # One warm-up for memory, nvlink and mig: GpmSamplers.warm_up in gpuagent.gpm.
    monkeypatch.setattr(gpm, "time", SimpleNamespace(sleep=sim_clock.advance))
    return sim_clock
