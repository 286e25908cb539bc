"""clocks collector: the per-reason clock-event time counters (*_time_ns) on the simulator."""

from __future__ import annotations

import json

import pytest

from gpuagent.context import AgentContext
from gpuagent.gpus.nvml import NvmlSession
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


def test_counters_absent_on_geforce_and_not_asked_again(simulated_fleet, sim_clock, recording_accumulator, tmp_path):
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


@pytest.mark.parametrize("name", ["h100-sxm", "l40s", "a100-sxm4", "rtx4090"])
def test_violation_counters_dcgm_reads(name, simulated_fleet, sim_clock, recording_accumulator):
    """Board limit, low utilisation and reliability violation times (NVML_FI_DEV_PERF_POLICY_*),
    in the cycle's field batch: counters, 0 on a simulated card nothing holds back (issue 32)."""
    from gpuagent.plugins.clocks import ClocksCollector
    from gpuagent.testing import make_collector

    machine = simulated_fleet(f"{name}:1", scenario="training")
    sim_clock.advance(30)
    calls_before = machine.calls["nvmlDeviceGetFieldValues"]
    make_collector(machine, ClocksCollector).collect(recording_accumulator)
    assert machine.calls["nvmlDeviceGetFieldValues"] - calls_before == 1  # no call of their own
    (point,) = recording_accumulator.by_measurement("gpu_clocks")
    for field in ("board_limit_violation_time_ns", "low_util_violation_time_ns", "reliability_violation_time_ns"):
        assert point.fields[field] == 0


def test_no_violation_counters_before_turing(tmp_path, simulated_fleet, recording_accumulator):
    from captures import CAPTURES, capture_profile

    from gpuagent.plugins.clocks import ClocksCollector
    from gpuagent.testing import make_collector

    if not (CAPTURES / "telegraf-quadro-p2000-v12.xml").exists():
        pytest.skip(f"no Quadro P2000 capture at {CAPTURES} (it lives in ../shared/captures)")
    path, _ = capture_profile("telegraf-quadro-p2000-v12.xml", tmp_path)
    machine = simulated_fleet(path)
    make_collector(machine, ClocksCollector).collect(recording_accumulator)
    (point,) = recording_accumulator.by_measurement("gpu_clocks")
    assert not {f for f in point.fields if f.endswith("_violation_time_ns")}
