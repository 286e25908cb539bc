"""health collector: XIDs from a MIG instance carry its gi_id / ci_id tags; whole-GPU ones do not."""

from __future__ import annotations

from gpuagent.context import AgentContext
from gpuagent.plugins.health import HealthCollector


def test_xid_points_carry_mig_instance_tags(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("h100-sxm-mig:1,a100-sxm4-mig:1")
    collector = HealthCollector(
        HealthCollector.Config(event_wait="100ms"), AgentContext(hostname="testhost", gpus=machine.gpus)
    )
    try:
        collector.collect(recording_accumulator)
        now = sim_clock.now()
        machine.inject_xid(0, 43, at=now + 1, gi_id=2, ci_id=0)
        machine.inject_xid(1, 31, at=now + 2, gi_id=1)
        machine.inject_xid(1, 48, at=now + 3)
        sim_clock.advance(10)
        recording_accumulator.clear()
        collector.collect(recording_accumulator)
    finally:
        collector.close()
    xids = [p for p in recording_accumulator.by_measurement("gpu_health") if "xid" in p.fields]
    got = [(p.tags["gpu"], p.fields["xid"], p.tags.get("gi_id"), p.tags.get("ci_id")) for p in xids]
    assert got == [("0", 43, "2", "0"), ("1", 31, "1", None), ("1", 48, None, None)]
    assert xids[0].tags["uuid"] == machine.gpus[0].uuid
