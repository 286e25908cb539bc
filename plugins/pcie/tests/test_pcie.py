"""pcie collector on the simulator: link state, throughput, counters, NVML calls per cycle."""

from __future__ import annotations

import functools

import pytest
from captures import capture_names

from gpuagent.plugins.pcie import COUNTER_WRAP, PcieCollector, WrappedCounters
from gpuagent.sim import load_profile
from gpuagent.testing import IDENTITY_TAGS as IDENTITY
from gpuagent.testing import assert_no_sentinels as assert_clean
from gpuagent.testing import make_collector

collector = functools.partial(make_collector, cls=PcieCollector)


@pytest.mark.parametrize("profile", ["l40s", "h100-sxm", "rtx4090"])
def test_pcie_on_each_profile(profile, simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet(profile, scenario="training")
    sim_clock.advance(30)
    collector(machine).collect(recording_accumulator)
    (point,) = recording_accumulator.by_measurement("gpu_pcie")
    assert IDENTITY <= set(point.tags)
    f = point.fields
    assert_clean(f)
    pcie = load_profile(profile)["pcie"]
    assert f["max_link_gen"] == pcie["max_gen"] and f["max_link_width"] == pcie["max_width"]
    assert 1 <= f["link_gen"] <= f["max_link_gen"] and 1 <= f["link_width"] <= f["max_link_width"]
    # KB/s from NVML, bytes/s in the field.
    assert f["tx_bytes_per_s"] > 0 and f["tx_bytes_per_s"] % 1024 == 0
    assert f["rx_bytes_per_s"] > 0 and f["rx_bytes_per_s"] % 1024 == 0
    assert f["replays_total"] >= 0


def test_idle_gpu_drops_its_link_generation(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s", scenario="idle")
    sim_clock.advance(30)
    collector(machine).collect(recording_accumulator)
    (f,) = recording_accumulator.fields("gpu_pcie")
    assert f["link_gen"] == load_profile("l40s")["pcie"]["idle_gen"] < f["max_link_gen"]


def test_counters_never_decrease(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("h100-sxm:2", scenario="training")
    pcie = collector(machine)
    last: dict[tuple[str, str], int] = {}
    for _ in range(10):
        sim_clock.advance(7)
        recording_accumulator.clear()
        pcie.collect(recording_accumulator)
        for p in recording_accumulator.by_measurement("gpu_pcie"):
            for name in ("replays_total", "tx_bytes_total", "rx_bytes_total"):
                if name in p.fields:
                    key = (p.tags["gpu"], name)
                    assert p.fields[name] >= last.get(key, 0), key
                    last[key] = p.fields[name]
    assert last


def test_each_wrap_seen_adds_2_to_the_32():
    counters = WrappedCounters()
    raw = [COUNTER_WRAP - 10, 5, 100, 3, 3]
    totals = [counters.total("GPU-a", "tx_bytes_total", r) for r in raw]
    assert totals == [
        COUNTER_WRAP - 10,
        COUNTER_WRAP + 5,
        COUNTER_WRAP + 100,
        2 * COUNTER_WRAP + 3,
        2 * COUNTER_WRAP + 3,
    ]
    # Each GPU and field wraps on its own.
    assert counters.total("GPU-b", "tx_bytes_total", 7) == 7
    assert counters.total("GPU-a", "rx_bytes_total", 1) == 1


def test_slower_default_interval_and_throughput_switch(simulated_fleet, nvml_calls, recording_accumulator):
    assert PcieCollector.default_interval == 30.0
    machine = simulated_fleet("l40s")
    pcie = collector(machine, throughput=False)
    calls = nvml_calls()
    pcie.collect(recording_accumulator)
    (f,) = recording_accumulator.fields("gpu_pcie")
    assert "tx_bytes_per_s" not in f and "rx_bytes_per_s" not in f
    assert f["link_gen"] >= 1
    assert "nvmlDeviceGetPcieThroughput" not in calls


@pytest.mark.parametrize("profile, bound", [("l40s", 5), ("h100-sxm", 5), ("rtx4090", 5)])
def test_nvml_calls_per_cycle(profile, bound, simulated_fleet, two_cycles):
    pcie = collector(simulated_fleet(profile, scenario="training"))
    first, calls = two_cycles(pcie, advance=30)
    # Steady state: current gen and width, TX and RX throughput, one field-values call (counters).
    assert sum(calls.values()) <= bound, dict(calls)
    assert calls["nvmlDeviceGetPcieThroughput"] == 2
    assert "nvmlDeviceGetMaxPcieLinkGeneration" not in calls and "nvmlDeviceGetMaxPcieLinkWidth" not in calls
    assert first <= bound + 3, first


@pytest.mark.parametrize("capture", capture_names())
def test_pcie_on_captured_profiles(capture, captured_run, recording_accumulator):
    profile = captured_run(capture, collector)
    (point,) = recording_accumulator.by_measurement("gpu_pcie")
    assert point.tags["model"] == profile["product_name"]
    assert_clean(point.fields)
    assert point.fields["max_link_gen"] == profile["pcie"]["max_gen"]
    assert point.fields["max_link_width"] == profile["pcie"]["max_width"]
