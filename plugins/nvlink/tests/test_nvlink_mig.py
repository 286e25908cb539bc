"""nvlink collector on MIG-enabled GPUs: NVLink queries are refused in MIG mode, so no link points."""

from __future__ import annotations

import pytest

from gpuagent.context import AgentContext
from gpuagent.plugins.nvlink import NvlinkCollector


def make(machine):
    return NvlinkCollector(
        NvlinkCollector.Config(gpm_warmup="10ms"), AgentContext(hostname="testhost", gpus=machine.gpus)
    )


@pytest.mark.parametrize("profile", ["h100-sxm-mig", "a100-sxm4-mig"])
def test_mig_gpus_emit_no_nvlink_points(profile, simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet(f"{profile}:2", scenario="training")
    collector = make(machine)
    try:
        for _ in range(2):
            collector.collect(recording_accumulator)
            sim_clock.advance(10)
    finally:
        collector.close()
    assert recording_accumulator.by_measurement("gpu_nvlink") == []
    # The probe stops at link 0 and is not repeated: one NvLinkState call per GPU in all.
    assert machine.calls["nvmlDeviceGetNvLinkState"] == 2


def test_mig_gpu_next_to_nvlink_gpus(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("h100-sxm-mig:1,h100-sxm:2")
    collector = make(machine)
    try:
        collector.collect(recording_accumulator)
    finally:
        collector.close()
    gpus = {p.tags["gpu"] for p in recording_accumulator.by_measurement("gpu_nvlink")}
    assert gpus == {"1", "2"}
    links = [p for p in recording_accumulator.by_measurement("gpu_nvlink") if "link" in p.tags]
    assert len(links) == 36 and all(p.fields["active"] for p in links)
