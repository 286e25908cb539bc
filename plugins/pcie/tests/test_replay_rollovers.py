"""pcie collector: the replay rollover counter comes with the replay counter."""

from __future__ import annotations

import pytest

from gpuagent.context import AgentContext
from gpuagent.gpus.nvml import NvmlSession
from gpuagent.plugins.pcie import PcieCollector


@pytest.mark.parametrize("profile", ["l40s:1", "h100-sxm:1", "rtx4090:1", "a100-sxm4-mig:1"])
def test_replay_rollovers_reported_next_to_replays(profile, simulated_fleet, recording_accumulator):
    machine = simulated_fleet(profile)
    machine.add_pcie_replays(0, 3)
    session = NvmlSession(gpus=machine.gpus, simulated=True, machine=machine)
    pcie = PcieCollector(
        PcieCollector.Config(throughput=False),
        AgentContext(hostname="testhost", gpus=machine.gpus, nvml=session),
    )
    pcie.collect(recording_accumulator)
    (f,) = recording_accumulator.fields("gpu_pcie")
    assert f["replays_total"] == 3
    assert f["replay_rollovers_total"] == 0
    # both come from the one field-values call, not a call of their own
    assert "nvmlDeviceGetPcieReplayCounter" not in machine.calls
