"""clocks collector on the simulator: built-in profiles, captures, power cap, NVML calls per cycle."""

from __future__ import annotations

import functools
import json

import pynvml
import pytest
from captures import capture_names

from gpuagent.plugins.clocks import REASONS, ClocksCollector
from gpuagent.plugins.power import PowerCollector
from gpuagent.sim import load_profile
from gpuagent.testing import IDENTITY_TAGS as IDENTITY
from gpuagent.testing import assert_no_sentinels as assert_clean
from gpuagent.testing import make_collector

CLOCK_FIELDS = [f"{p}{c}_clock_mhz" for p in ("", "max_") for c in ("graphics", "sm", "memory", "video")]


collector = functools.partial(make_collector, cls=ClocksCollector)


@pytest.mark.parametrize("profile", ["l40s", "h100-sxm", "rtx4090"])
def test_clocks_on_each_profile(profile, simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet(profile, scenario="training")
    sim_clock.advance(30)
    collector(machine).collect(recording_accumulator)
    (point,) = recording_accumulator.by_measurement("gpu_clocks")
    assert IDENTITY <= set(point.tags)
    f = point.fields
    assert_clean(f)
    for name in CLOCK_FIELDS:
        assert f[name] > 0, name
    for stem in ("graphics", "sm", "memory", "video"):
        assert f[f"{stem}_clock_mhz"] <= f[f"max_{stem}_clock_mhz"]
    expected_max = load_profile(profile)["clocks_mhz"]["max"]
    assert f["max_sm_clock_mhz"] == expected_max["sm"]
    assert f["max_memory_clock_mhz"] == expected_max["memory"]
    assert 0 <= f["pstate"] <= 15
    # One boolean per reason the card supports, and only those.
    supported = f["clock_event_reasons_supported"]
    for bit, name in REASONS.items():
        if supported & bit:
            assert f[name] is bool(f["clock_event_reasons"] & bit)
        else:
            assert name not in f
    # The mask is the profile's, from the captures: 0x1FF ("clocks_event_reasons.supported") in
    # the L40S 595.80, H100 590.48.01 and GeForce 595.71.05 captures, so all three carry sync_boost.
    profile_mask = load_profile(profile)["clocks_event_reasons_supported"]
    assert supported == profile_mask
    sync_boost = pynvml.nvmlClocksEventReasonSyncBoost
    assert ("sync_boost" in f) is bool(profile_mask & sync_boost)


def test_applications_clocks_missing_where_unsupported(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("l40s:1,a100-sxm4:1")
    collector(machine).collect(recording_accumulator)
    l40s, a100 = (
        recording_accumulator.fields("gpu_clocks", gpu="0"),
        recording_accumulator.fields("gpu_clocks", gpu="1"),
    )
    assert "applications_sm_clock_mhz" not in l40s[0]
    assert "applications_graphics_clock_mhz" not in l40s[0]
    assert a100[0]["applications_graphics_clock_mhz"] > 0
    assert a100[0]["applications_memory_clock_mhz"] > 0


def test_sw_power_cap_while_power_sits_at_the_limit(simulated_fleet, sim_clock, recording_accumulator, tmp_path):
    # A 250 W cap on an L40S under training (demand ~375 W): power is held at the cap.
    profile = load_profile("l40s")
    profile["name"] = "l40s-capped"
    profile["power_w"]["limit"] = 250
    path = tmp_path / "l40s-capped.json"
    path.write_text(json.dumps(profile))
    machine = simulated_fleet(str(path), scenario="training")
    clocks, power = collector(machine), collector(machine, cls=PowerCollector)
    at_limit = 0
    for _ in range(60):
        sim_clock.advance(5)
        recording_accumulator.clear()
        clocks.collect(recording_accumulator)
        power.collect(recording_accumulator)
        (c,) = recording_accumulator.fields("gpu_clocks")
        (p,) = recording_accumulator.fields("gpu_power")
        assert p["enforced_power_limit_w"] == 250.0
        assert p["power_w"] <= 250.0 + 1e-6
        if p["power_w"] >= 249.5:
            at_limit += 1
            assert c["sw_power_cap"] is True, (p, c)
            assert c["clock_event_reasons"] & pynvml.nvmlClocksEventReasonSwPowerCap
            assert c["sm_clock_mhz"] < c["max_sm_clock_mhz"]
    assert at_limit >= 10


def test_unsupported_call_is_missing_and_not_asked_again(simulated_fleet, nvml_calls, recording_accumulator):
    machine = simulated_fleet("h100-sxm")
    machine.force("nvmlDeviceGetClockInfo", "NOT_SUPPORTED")
    clocks = collector(machine)
    calls = nvml_calls()
    clocks.collect(recording_accumulator)
    clocks.collect(recording_accumulator)
    for f in recording_accumulator.fields("gpu_clocks"):
        assert "sm_clock_mhz" not in f and "graphics_clock_mhz" not in f
        assert f["max_sm_clock_mhz"] > 0
    assert calls["nvmlDeviceGetClockInfo"] == 4  # once per clock type, on the first cycle only


def test_throttle_spelling_on_drivers_before_r535(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s", scenario="training")
    machine.force("nvmlDeviceGetSupportedClocksEventReasons", "FUNCTION_NOT_FOUND")
    machine.force("nvmlDeviceGetCurrentClocksEventReasons", "FUNCTION_NOT_FOUND")
    sim_clock.advance(30)
    collector(machine).collect(recording_accumulator)
    (f,) = recording_accumulator.fields("gpu_clocks")
    assert f["clock_event_reasons_supported"] == load_profile("l40s")["clocks_event_reasons_supported"]
    assert "clock_event_reasons" in f and "sw_power_cap" in f


def test_lost_gpu_is_skipped_and_the_others_still_report(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s:3")
    clocks = collector(machine)
    clocks.collect(recording_accumulator)
    machine.lose_gpu(1)
    sim_clock.advance(1)
    recording_accumulator.clear()
    clocks.collect(recording_accumulator)
    assert sorted(p.tags["gpu"] for p in recording_accumulator.by_measurement("gpu_clocks")) == [
        "0",
        "2",
    ]


@pytest.mark.parametrize("profile, bound", [("l40s", 9), ("h100-sxm", 9), ("rtx4090", 9)])
def test_nvml_calls_per_cycle(profile, bound, simulated_fleet, two_cycles):
    clocks = collector(simulated_fleet(profile, scenario="training"))
    first, calls = two_cycles(clocks, advance=10)
    steady = sum(calls.values())
    # Steady state: 4 current clocks, 2 applications clocks (not asked again where refused),
    # P-state, current reasons, field values for the reason time counters.
    assert steady <= bound, dict(calls)
    assert "nvmlDeviceGetMaxClockInfo" not in calls and "nvmlDeviceGetSupportedClocksEventReasons" not in calls
    assert first <= bound + 6, first


@pytest.mark.parametrize("capture", capture_names())
def test_clocks_on_captured_profiles(capture, captured_run, recording_accumulator):
    profile = captured_run(capture, collector)
    (point,) = recording_accumulator.by_measurement("gpu_clocks")
    assert point.tags["model"] == profile["product_name"]
    assert_clean(point.fields)
    assert point.fields["max_sm_clock_mhz"] == profile["clocks_mhz"]["max"]["sm"]
    assert point.fields["max_memory_clock_mhz"] == profile["clocks_mhz"]["max"]["memory"]
    assert "clock_event_reasons" in point.fields


def test_a_zero_mhz_clock_is_a_reading(simulated_fleet, sim_clock, recording_accumulator, tmp_path):
    """A card at P8 may park graphics and SM at 0 MHz: the collector reports 0, not "no reading"."""
    profile = load_profile("rtx4090")
    profile["clocks_mhz"]["idle"].update(graphics=0, sm=0)
    path = tmp_path / "parked.json"
    path.write_text(json.dumps(profile))
    machine = simulated_fleet(str(path), scenario="idle")
    sim_clock.advance(30)
    collector(machine).collect(recording_accumulator)
    (point,) = recording_accumulator.by_measurement("gpu_clocks")
    assert point.fields["graphics_clock_mhz"] == 0 and point.fields["sm_clock_mhz"] == 0
    assert point.fields["memory_clock_mhz"] > 0
