"""clocks collector: the per-reason clock-event time counters (*_time_ns) on the simulator."""

from __future__ import annotations

import json

import pytest

from gpuagent.context import AgentContext
from gpuagent.nvml import NvmlSession
from gpuagent.plugins.clocks import ClocksCollector
from gpuagent.sim import load_profile

TIME_FIELDS = (
    "sw_power_cap_time_ns",
    "sync_boost_time_ns",
    "sw_thermal_slowdown_time_ns",
    "hw_thermal_slowdown_time_ns",
    "hw_power_brake_slowdown_time_ns",
)
STEP_S = 5


def make(machine):
    session = NvmlSession(gpus=machine.gpus, simulated=True, machine=machine)
    return ClocksCollector(
        ClocksCollector.Config(),
        AgentContext(hostname="testhost", gpus=machine.gpus, nvml=session),
    )


def capped(tmp_path, name: str, limit_w: float) -> str:
    """The built-in profile with its enforced power limit lowered to ``limit_w``."""
    profile = load_profile(name)
    profile["name"] = f"{name}-capped"
    profile["power_w"]["limit"] = limit_w
    path = tmp_path / f"{name}-capped.json"
    path.write_text(json.dumps(profile))
    return str(path)


@pytest.mark.parametrize("name, limit_w", [("l40s", 250), ("h100-sxm", 450)])
def test_reason_time_counters_grow_under_a_power_cap(
    name, limit_w, tmp_path, simulated_fleet, sim_clock, recording_accumulator
):
    machine = simulated_fleet(capped(tmp_path, name, limit_w), scenario="training")
    clocks = make(machine)
    seen = []
    for _ in range(24):  # two minutes, a cycle every 5 s
        sim_clock.advance(STEP_S)
        recording_accumulator.clear()
        clocks.collect(recording_accumulator)
        (f,) = recording_accumulator.fields("gpu_clocks")
        for field in TIME_FIELDS:
            assert isinstance(f[field], int) and f[field] >= 0, field
        seen.append(f)
    cap = [f["sw_power_cap_time_ns"] for f in seen]
    assert cap == sorted(cap)  # a counter
    for before, after in zip(seen, seen[1:], strict=False):
        grew = after["sw_power_cap_time_ns"] - before["sw_power_cap_time_ns"]
        assert grew <= STEP_S * 10**9
        if before["sw_power_cap"] and after["sw_power_cap"]:
            assert grew > 0
    # Capped most of the time: the counter tracks the clock, not just a few ticks.
    assert cap[-1] - cap[0] > 0.5 * (len(seen) - 1) * STEP_S * 10**9
    # Nothing in the model raises the other reasons on a healthy card.
    assert {f["hw_power_brake_slowdown_time_ns"] for f in seen} == {0}


def test_counters_absent_on_geforce_and_not_asked_again(
    simulated_fleet, sim_clock, recording_accumulator, tmp_path
):
    # GeForce captures from Turing on show the counters; a card that refuses them (older
    # GeForce, say) is a 4090 profile told so.
    refusing = load_profile("rtx4090")
    refusing["clocks_event_reason_counters"] = False
    (tmp_path / "refusing.json").write_text(json.dumps(refusing))
    machine = simulated_fleet(f"{tmp_path / 'refusing.json'}:1,l40s:1", scenario="training")
    clocks = make(machine)
    clocks.collect(recording_accumulator)
    machine.reset_calls()
    sim_clock.advance(10)
    recording_accumulator.clear()
    clocks.collect(recording_accumulator)
    geforce = recording_accumulator.fields("gpu_clocks", gpu="0")[0]
    l40s = recording_accumulator.fields("gpu_clocks", gpu="1")[0]
    assert not any(field in geforce for field in TIME_FIELDS), geforce
    assert "sw_power_cap" in geforce  # the current-reason booleans still come
    assert all(field in l40s for field in TIME_FIELDS)
    # The 4090 refused every counter on the first cycle: no field-values call for it since.
    per_gpu = machine.calls_by_gpu
    assert per_gpu[0]["nvmlDeviceGetFieldValues"] == 0
    assert per_gpu[1]["nvmlDeviceGetFieldValues"] == 1
