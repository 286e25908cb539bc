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
