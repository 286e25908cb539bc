"""A collector whose first run waits until a file exists: the /readyz test holds the first
collection back with it (as a slow first NVML read would) and lets it go."""

from __future__ import annotations

import os
import time

import gpuagent


class GatedConfig(gpuagent.CollectorConfig):
    gate: str


class Gated(gpuagent.Collector):
    name = "gated"
    Config = GatedConfig

    def collect(self, acc):
        deadline = time.monotonic() + 50
        while not os.path.exists(self.config.gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        acc.add_fields("gated", {"opened": True})


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(Gated)
