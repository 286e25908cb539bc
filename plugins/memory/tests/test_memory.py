"""memory collector on the simulator: FB/BAR1, DRAM bandwidth and peak, L2, GPM, NVML calls per cycle."""

from __future__ import annotations

import functools
import json

import pynvml
import pytest
from captures import capture_names, capture_profile

from gpuagent.gpus import specs
from gpuagent.plugins.memory import GPM_METRICS, MemoryCollector
from gpuagent.sim import load_profile
from gpuagent.testing import IDENTITY_TAGS as IDENTITY
from gpuagent.testing import assert_no_sentinels as assert_clean
from gpuagent.testing import make_collector

GPM_FIELDS = set(GPM_METRICS.values()) - {"dram_bw_util_pct"}
MIB = 1 << 20

# The first-run GPM warm-up moves the manual simulator clock (the driver wants > 100 ms).
pytestmark = pytest.mark.usefixtures("gpm_warmup_on_sim_clock")


collector = functools.partial(make_collector, cls=MemoryCollector)


def one_cycle(machine, acc, **config) -> dict:
    collector(machine, **config).collect(acc)
    (point,) = acc.by_measurement("gpu_memory")
    assert IDENTITY <= set(point.tags)
    assert_clean(point.fields)
    return point.fields


@pytest.mark.parametrize("profile", ["l40s", "h100-sxm", "rtx4090"])
def test_framebuffer_bar1_and_utilisation(profile, simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet(profile, scenario="training")
    sim_clock.advance(30)
    f = one_cycle(machine, recording_accumulator)
    mem = load_profile(profile)["memory"]
    assert f["fb_total_bytes"] == mem["total_mib"] * MIB
    assert f["fb_reserved_bytes"] == mem["reserved_mib"] * MIB
    # The v2 struct: total = reserved + used + free.
    assert f["fb_used_bytes"] + f["fb_free_bytes"] + f["fb_reserved_bytes"] == f["fb_total_bytes"]
    assert f["fb_used_bytes"] > 0  # training holds memory
    assert f["bar1_total_bytes"] == mem["bar1_total_mib"] * MIB
    assert f["bar1_used_bytes"] + f["bar1_free_bytes"] == f["bar1_total_bytes"]
    assert 0 < f["gpu_util_pct"] <= 100 and 0 < f["memory_util_pct"] <= 100
    assert f["bus_width_bits"] == mem["bus_width_bits"]


def test_l40s_l2_and_peak_bandwidth(simulated_fleet, recording_accumulator):
    f = one_cycle(simulated_fleet("l40s", scenario="training"), recording_accumulator)
    assert f["l2_cache_bytes"] == 100663296
    assert f["l2_cache_source"] == "spec"  # simulated: never the real CUDA driver
    assert f["dram_peak_gbps"] == pytest.approx(864, rel=0.01)
    assert f["dram_peak_source"] == "nvml"
    assert f["bus_width_bits"] == 384
    # Ada has no GPM: no DRAM bandwidth field; the memory busy time keeps its own name.
    assert not {"dram_bw_util_pct", "dram_bw_gbps", "dram_bw_source"} & set(f)
    assert 0 < f["memory_util_pct"] <= 100
    assert not GPM_FIELDS & set(f)


def test_h100_dram_bandwidth_from_gpm_on_the_first_run(simulated_fleet, recording_accumulator):
    f = one_cycle(simulated_fleet("h100-sxm", scenario="training"), recording_accumulator)
    assert f["dram_bw_source"] == "gpm"
    assert 0 < f["dram_bw_util_pct"] <= 100
    assert GPM_FIELDS <= set(f), GPM_FIELDS - set(f)
    assert all(0 <= f[name] <= 100 for name in GPM_FIELDS)
    assert f["dram_peak_gbps"] == pytest.approx(3352, rel=0.01)
    assert f["dram_bw_gbps"] == pytest.approx(f["dram_bw_util_pct"] / 100 * f["dram_peak_gbps"], rel=1e-6)
    assert f["l2_cache_bytes"] == 50 * MIB


def test_gpm_keeps_reporting_across_cycles(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("h100-sxm:2", scenario="training")
    memory = collector(machine)
    for _ in range(3):
        sim_clock.advance(10)
        recording_accumulator.clear()
        memory.collect(recording_accumulator)
        for f in recording_accumulator.fields("gpu_memory"):
            assert f["dram_bw_source"] == "gpm" and GPM_FIELDS <= set(f)
    memory.close()


def test_gpm_samples_too_close_cost_only_that_cycles_gpm_fields(simulated_fleet, sim_clock, recording_accumulator):
    # nvml.h: GPM samples must be more than 100 ms apart; closer, the driver refuses the metrics
    # (NOT_READY in the simulator). That cycle loses its GPM fields, never the point.
    machine = simulated_fleet("h100-sxm", scenario="training")
    memory = collector(machine, gpm_warmup=0.1)
    memory.collect(recording_accumulator)
    (f,) = recording_accumulator.fields("gpu_memory")
    assert f["fb_used_bytes"] > 0 and 0 < f["memory_util_pct"] <= 100
    assert f["dram_peak_gbps"] > 0
    assert not ({"dram_bw_util_pct", "dram_bw_gbps", "dram_bw_source"} | GPM_FIELDS) & set(f)
    refusals = [
        (call, count)
        for _collector, call, code, count, _gpus in machine.gpus[0].errors.snapshot()
        if code == pynvml.NVML_ERROR_NOT_READY
    ]
    assert refusals == [("nvmlGpmMetricsGet", 1)]
    # Asked again next cycle: the metrics are back.
    sim_clock.advance(10)
    recording_accumulator.clear()
    memory.collect(recording_accumulator)
    (f,) = recording_accumulator.fields("gpu_memory")
    assert f["dram_bw_source"] == "gpm" and GPM_FIELDS <= set(f)
    memory.close()


def test_h100_without_gpm_has_no_dram_bandwidth(simulated_fleet, recording_accumulator):
    f = one_cycle(simulated_fleet("h100-sxm", scenario="training"), recording_accumulator, gpm=False)
    assert not {"dram_bw_util_pct", "dram_bw_gbps", "dram_bw_source"} & set(f)
    assert 0 < f["memory_util_pct"] <= 100
    assert not GPM_FIELDS & set(f)


def test_rtx4090_has_no_gpm_field(simulated_fleet, recording_accumulator):
    f = one_cycle(simulated_fleet("rtx4090", scenario="training"), recording_accumulator)
    assert not GPM_FIELDS & set(f)
    assert not {"dram_bw_util_pct", "dram_bw_gbps", "dram_bw_source"} & set(f)
    assert f["l2_cache_bytes"] == 72 * MIB
    assert f["dram_peak_gbps"] == pytest.approx(1008, rel=0.01)


def test_bus_width_and_peak_from_the_table_when_nvml_lacks_them(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("l40s")
    machine.force("nvmlDeviceGetMemoryBusWidth", "NOT_SUPPORTED")
    f = one_cycle(machine, recording_accumulator)
    assert f["bus_width_bits"] == 384
    assert f["dram_peak_gbps"] == 864.0 and f["dram_peak_source"] == "spec"


def test_unknown_card_has_no_l2_and_no_spec_figures(simulated_fleet, recording_accumulator, tmp_path):
    profile = load_profile("l40s")
    profile.update(name="mystery", product_name="NVIDIA Mystery GPU", pci_device_id="0x2FFF10DE")
    path = tmp_path / "mystery.json"
    path.write_text(json.dumps(profile))
    machine = simulated_fleet(str(path))
    machine.force("nvmlDeviceGetMemoryBusWidth", "NOT_SUPPORTED")
    f = one_cycle(machine, recording_accumulator)
    assert specs.lookup(0x2FFF10DE, "NVIDIA Mystery GPU") is None
    for name in (
        "l2_cache_bytes",
        "l2_cache_source",
        "bus_width_bits",
        "dram_peak_gbps",
        "dram_bw_gbps",
    ):
        assert name not in f, name
    assert f["memory_util_pct"] >= 0  # what NVML does report stays


def test_memory_info_v1_on_old_drivers(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("l40s", scenario="training")
    machine.force("nvmlDeviceGetMemoryInfo_v2", "FUNCTION_NOT_FOUND")
    f = one_cycle(machine, recording_accumulator)
    assert "fb_reserved_bytes" not in f
    assert f["fb_total_bytes"] > 0 and f["fb_used_bytes"] > 0


# + encoder and decoder utilisation (the decoder from GPM on the H100): issue 32.
@pytest.mark.parametrize("profile, bound", [("l40s", 5), ("h100-sxm", 6), ("rtx4090", 5)])
def test_nvml_calls_per_cycle(profile, bound, simulated_fleet, two_cycles):
    memory = collector(simulated_fleet(profile, scenario="training"))
    first, calls = two_cycles(memory, advance=10)
    # Steady state: memory info v2, BAR1, utilisation; GPM cards add one sample and one metrics call.
    assert sum(calls.values()) <= bound, dict(calls)
    for static in (
        "nvmlDeviceGetMemoryBusWidth",
        "nvmlDeviceGetMaxClockInfo",
        "nvmlGpmQueryDeviceSupport",
    ):
        assert static not in calls
    # First cycle adds the static reads (PCI info, bus width, max memory clock, GPM support) and,
    # on GPM cards, two sample allocations and the priming sample.
    assert first <= bound + 7, first
    memory.close()


@pytest.mark.parametrize("capture", capture_names())
def test_memory_on_captured_profiles(capture, tmp_path, simulated_fleet, sim_clock, recording_accumulator):
    spec, profile = capture_profile(capture, tmp_path)
    machine = simulated_fleet(spec, scenario="training")
    sim_clock.advance(30)
    f = one_cycle(machine, recording_accumulator)
    assert recording_accumulator.points[0].tags["model"] == profile["product_name"]
    assert f["fb_total_bytes"] == profile["memory"]["total_mib"] * MIB
    known = specs.lookup(int(profile["pci_device_id"], 16), profile["product_name"])
    if known is not None:
        assert f["l2_cache_bytes"] == known.l2_cache_bytes
        assert f["dram_peak_gbps"] == pytest.approx(known.peak_dram_gbps, rel=0.01)
    else:  # e.g. the RTX 4080 SUPER: not in the table, so no L2 figure rather than a guess
        assert "l2_cache_bytes" not in f
    assert (f.get("dram_bw_source") == "gpm") is bool(profile.get("gpm"))


@pytest.mark.parametrize("profile", ["h100-sxm", "l40s", "a100-sxm4"])
def test_video_engines_and_the_new_gpm_metrics(profile, simulated_fleet, sim_clock, recording_accumulator):
    """GPU-level encoder on every card; decoder by its call without GPM, NVDEC/NVJPG/NVOFA and the
    graphics/integer/HMMA/IMMA/DFMA pipes from GPM on Hopper (issue 32)."""
    machine = simulated_fleet(f"{profile}:1", scenario="training")
    memory = collector(machine)
    memory.collect(recording_accumulator)
    sim_clock.advance(10)
    memory.collect(recording_accumulator)
    f = recording_accumulator.by_measurement("gpu_memory")[-1].fields
    assert f["encoder_util_pct"] == 0  # no simulated workload encodes video
    new_gpm = {
        "graphics_active_pct",
        "integer_active_pct",
        "hmma_tensor_active_pct",
        "imma_tensor_active_pct",
        "dfma_tensor_active_pct",
    }
    engines = {"nvdec_active_pct", "nvjpg_active_pct", "nvofa_active_pct"}
    if profile == "h100-sxm":
        assert "decoder_util_pct" not in f
        assert all(f[name] == 0.0 for name in engines)
        assert new_gpm <= set(f) and f["graphics_active_pct"] > 50 and f["hmma_tensor_active_pct"] > 0
    else:
        assert f["decoder_util_pct"] == 0
        assert not (new_gpm | engines) & set(f)


def test_a_lost_gpus_gpm_samples_are_freed(simulated_fleet, sim_clock, recording_accumulator):
    # Each GPM GPU holds two NVML samples; a GPU off the bus gives its samples back at the next
    # run (the memory collector's own set-up once kept them until the agent stopped).
    machine = simulated_fleet("h100-sxm:2", scenario="training")
    memory = collector(machine)
    memory.collect(recording_accumulator)
    assert len(machine.gpm_samples) == 4
    machine.lose_gpu(1)
    for _ in range(2):
        sim_clock.advance(10)
        memory.collect(recording_accumulator)
    assert len(machine.gpm_samples) == 2 and len(memory._gpm) == 1
    memory.close()
    assert not machine.gpm_samples


@pytest.mark.parametrize(
    "profile, calls",
    [
        ("h100-sxm", {"nvmlDeviceGetEncoderUtilization"}),
        ("l40s", {"nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetDecoderUtilization"}),
    ],
)
def test_video_engines_every_30_s_on_the_scheduler_ticks(
    profile, calls, simulated_fleet, sim_clock, recording_accumulator
):
    # Issue 42: read every third run of a 10 s cycle (nvml_read.SLOW_READING_S), not every run;
    # a one-off read (no tick: inspect) always reads them.
    from gpuagent.gpus.nvml_read import current_tick

    machine = simulated_fleet(profile, scenario="training")
    memory = collector(machine)
    asked = []
    for tick in range(4):  # t = 0, 10, 20, 30 (the first run after start reads)
        before = machine.calls
        token = current_tick.set(("test", tick))
        try:
            memory.collect(recording_accumulator)
        finally:
            current_tick.reset(token)
        asked.append({c: n for c, n in (machine.calls - before).items() if c in calls})
        sim_clock.advance(10)
    memory.collect(recording_accumulator)
    memory.close()
    points = [p.fields for p in recording_accumulator.by_measurement("gpu_memory")]
    assert [dict.fromkeys(calls, 1) if t in (0, 3) else {} for t in range(4)] == asked
    names = {"encoder_util_pct"} | ({"decoder_util_pct"} if len(calls) == 2 else set())
    assert [names <= set(p) for p in points] == [True, False, False, True, True]
    assert not any(names & set(p) for p in points[1:3])
