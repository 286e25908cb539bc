"""power collector on the simulator: built-in profiles, captures, energy counter, NVML calls per cycle."""

from __future__ import annotations

import functools
import json

import pytest
from captures import capture_names

from gpuagent.plugins.power import PowerCollector
from gpuagent.sim import load_profile
from gpuagent.testing import IDENTITY_TAGS as IDENTITY
from gpuagent.testing import assert_no_sentinels as assert_clean
from gpuagent.testing import make_collector

collector = functools.partial(make_collector, cls=PowerCollector)


@pytest.mark.parametrize("profile", ["l40s", "h100-sxm", "rtx4090"])
def test_power_on_each_profile(profile, simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet(profile, scenario="training")
    sim_clock.advance(30)
    collector(machine).collect(recording_accumulator)
    (point,) = recording_accumulator.by_measurement("gpu_power")
    assert IDENTITY <= set(point.tags)
    f = point.fields
    assert_clean(f)
    limits = load_profile(profile)["power_w"]
    assert f["power_limit_w"] == f["enforced_power_limit_w"] == float(limits["limit"])
    assert f["default_power_limit_w"] == float(limits["default"])
    assert f["min_power_limit_w"] == float(limits["min"]) and f["max_power_limit_w"] == float(limits["max"])
    assert 0 < f["power_w"] <= f["enforced_power_limit_w"]
    assert isinstance(f["energy_j"], float) and f["energy_j"] > 0
    assert 0 < f["temperature_c"] < f["temperature_slowdown_c"] < f["temperature_shutdown_c"]
    # HBM has a memory sensor, GDDR does not; only the GeForce card has a fan.
    assert ("memory_temperature_c" in f) is (profile == "h100-sxm")
    assert ("fan_speed_pct" in f) is (profile == "rtx4090")


def test_energy_never_decreases_and_matches_power(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s:1,h100-sxm:1,rtx4090:1", scenario="mixed")
    power = collector(machine)
    last: dict[str, tuple[float, float]] = {}
    for step in range(40):
        sim_clock.advance(1 + step % 7)
        recording_accumulator.clear()
        power.collect(recording_accumulator)
        for p in recording_accumulator.by_measurement("gpu_power"):
            gpu, energy, limit = (
                p.tags["gpu"],
                p.fields["energy_j"],
                p.fields["enforced_power_limit_w"],
            )
            if gpu in last:
                t0, e0 = last[gpu]
                assert energy >= e0, (gpu, e0, energy)
                # The average power over the interval lies between 0 and the limit.
                assert (energy - e0) / (sim_clock.now() - t0) <= limit + 1e-6
            last[gpu] = (sim_clock.now(), energy)
    assert len(last) == 3


def test_energy_falls_back_to_its_own_call_without_field_values(simulated_fleet, nvml_calls, recording_accumulator):
    machine = simulated_fleet("h100-sxm")
    machine.force("nvmlDeviceGetFieldValues", "NOT_SUPPORTED")
    power = collector(machine)
    calls = nvml_calls()
    power.collect(recording_accumulator)
    power.collect(recording_accumulator)
    for f in recording_accumulator.fields("gpu_power"):
        assert f["energy_j"] > 0
        assert "memory_temperature_c" not in f  # only a field value carries it
    # The cycle batch and the T.Limit thresholds (read once): each refused once, not asked again.
    assert calls["nvmlDeviceGetFieldValues"] == 2
    assert calls["nvmlDeviceGetTotalEnergyConsumption"] == 2


def test_temperature_through_the_older_call_on_older_drivers(simulated_fleet, nvml_calls, recording_accumulator):
    machine = simulated_fleet("l40s")
    machine.force("nvmlDeviceGetTemperatureV", "FUNCTION_NOT_FOUND")
    power = collector(machine)
    calls = nvml_calls()
    power.collect(recording_accumulator)
    power.collect(recording_accumulator)
    assert all(f["temperature_c"] > 0 for f in recording_accumulator.fields("gpu_power"))
    assert calls["nvmlDeviceGetTemperatureV"] == 1 and calls["nvmlDeviceGetTemperature"] == 2


def test_zero_threshold_is_left_out(simulated_fleet, recording_accumulator, tmp_path):
    # NVML answers 0 degC for a threshold the card does not have: not a threshold, left out.
    profile = load_profile("l40s")
    profile["name"] = "l40s-no-gpu-max"
    profile["temperature_c"]["gpu_max"] = 0
    path = tmp_path / "l40s-no-gpu-max.json"
    path.write_text(json.dumps(profile))
    machine = simulated_fleet(str(path))
    collector(machine).collect(recording_accumulator)
    (f,) = recording_accumulator.fields("gpu_power")
    assert "temperature_gpu_max_c" not in f
    assert f["temperature_shutdown_c"] == profile["temperature_c"]["shutdown"]


@pytest.mark.parametrize("profile, bound", [("l40s", 6), ("h100-sxm", 6), ("rtx4090", 6)])
def test_nvml_calls_per_cycle(profile, bound, simulated_fleet, two_cycles):
    power = collector(simulated_fleet(profile, scenario="training"))
    first, calls = two_cycles(power, advance=10)
    # Steady state: power, management limit, enforced limit, temperature, fan (only where the
    # card has one), one field-values call for energy and memory temperature.
    assert sum(calls.values()) <= bound, dict(calls)
    assert calls["nvmlDeviceGetFieldValues"] == 1
    assert "nvmlDeviceGetPowerManagementDefaultLimit" not in calls and "nvmlDeviceGetTemperatureThreshold" not in calls
    assert first <= bound + 7, first


@pytest.mark.parametrize("capture", capture_names())
def test_power_on_captured_profiles(capture, captured_run, recording_accumulator):
    profile = captured_run(capture, collector)
    (point,) = recording_accumulator.by_measurement("gpu_power")
    assert point.tags["model"] == profile["product_name"]
    f = point.fields
    assert_clean(f)
    assert f["power_limit_w"] == float(profile["power_w"]["limit"])
    assert 0 < f["power_w"] <= f["enforced_power_limit_w"]
    assert f["energy_j"] > 0
    assert ("fan_speed_pct" in f) is (profile.get("fan_pct") is not None)
