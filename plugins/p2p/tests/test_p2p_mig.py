"""p2p collector with MIG-enabled GPUs: no NVLink (queries refused in MIG mode), no P2P, PCIe topology kept."""

from __future__ import annotations

import pytest

from gpuagent.context import AgentContext
from gpuagent.plugins.p2p import P2pCollector


@pytest.mark.parametrize("profile", ["h100-sxm-mig", "a100-sxm4-mig"])
def test_mig_gpus_have_pcie_topology_and_no_nvlink(profile, simulated_fleet, recording_accumulator):
    machine = simulated_fleet(f"{profile}:2")
    P2pCollector(P2pCollector.Config(), AgentContext(hostname="testhost", gpus=machine.gpus)).collect(
        recording_accumulator
    )
    points = recording_accumulator.by_measurement("gpu_p2p")
    assert sorted((p.tags["gpu"], p.tags["peer_gpu"]) for p in points) == [("0", "1"), ("1", "0")]
    for p in points:
        f = p.fields
        assert f["nvlink_count"] == 0
        assert f["topology"] == f["pcie_topology"] == "PIX"  # same PCIe switch, not "NV12"/"NV18"
        assert not any(f[f"{cap}_ok"] for cap in ("read", "write", "nvlink", "atomics", "prop"))
        assert f["nvlink_status"] == "not_supported"
