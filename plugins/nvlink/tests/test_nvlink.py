"""nvlink collector on simulated fleets: per-link state, remote end, capabilities, GPM throughput."""

from __future__ import annotations

import pytest

from gpuagent.context import AgentContext
from gpuagent.plugin_host import PluginHost
from gpuagent.plugins.nvlink import NvlinkCollector

# The first-run GPM warm-up moves the manual simulator clock (the driver wants > 100 ms).
pytestmark = pytest.mark.usefixtures("gpm_warmup_on_sim_clock")


def make(machine):
    return NvlinkCollector(NvlinkCollector.Config(), AgentContext(hostname="testhost", gpus=machine.gpus))


def link_points(acc):
    return [p for p in acc.by_measurement("gpu_nvlink") if "link" in p.tags]


def summary_points(acc):
    return [p for p in acc.by_measurement("gpu_nvlink") if "link" not in p.tags]


def test_h100_sxm_reports_18_active_links_and_gpm_throughput(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("h100-sxm:2", scenario="training")
    collector = make(machine)
    collector.collect(recording_accumulator)
    links = link_points(recording_accumulator)
    assert len(links) == 36
    assert {p.tags["link"] for p in links} == {str(n) for n in range(18)}
    for p in links:
        f = p.fields
        assert f["active"] is True and f["state"] == "active"
        assert isinstance(f["version"], int) and f["version"] > 0
        assert f["version_name"] == "4.0"  # Hopper: NVLink 4
        assert f["remote_pci_bus_id"].count(":") == 2
        assert f["cap_p2p_supported"] is True
        assert isinstance(f["cap_sysmem_access"], bool)
        # The first run primes GPM and waits gpm_warmup, so even a single run has throughput.
        assert f["rx_bytes_per_sec"] >= 0 and f["tx_bytes_per_sec"] >= 0
    summary = summary_points(recording_accumulator)
    assert [(p.fields["links"], p.fields["links_active"]) for p in summary] == [(18, 18), (18, 18)]
    assert all(p.fields["total_rx_bytes_per_sec"] > 0 for p in summary)

    recording_accumulator.clear()
    sim_clock.advance(10)
    collector.collect(recording_accumulator)
    assert len(link_points(recording_accumulator)) == 36
    for p in summary_points(recording_accumulator):
        assert p.fields["total_rx_bytes_per_sec"] > 0 and p.fields["total_tx_bytes_per_sec"] > 0
    collector.close()


def test_gpm_can_be_turned_off(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("h100-sxm:1")
    collector = NvlinkCollector(NvlinkCollector.Config(gpm=False), AgentContext(hostname="testhost", gpus=machine.gpus))
    collector.collect(recording_accumulator)
    assert len(link_points(recording_accumulator)) == 18
    assert not any(k.endswith("_bytes_per_sec") for p in recording_accumulator.points for k in p.fields)


def test_a100_links_without_gpm_fields(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("a100-sxm4:1")
    collector = make(machine)
    for _ in range(2):
        collector.collect(recording_accumulator)
        sim_clock.advance(10)
    links = link_points(recording_accumulator)
    assert links and all(p.fields["active"] for p in links)
    assert {p.fields["version_name"] for p in links} == {"3.0"}  # Ampere: NVLink 3
    # No GPM: throughput from NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_* between two runs (issue 32);
    # the first run has no earlier counters, the second has a rate per link and for all links.
    n = len(links) // 2
    first, second = links[:n], links[n:]
    assert not any(k.endswith("_bytes_per_sec") for p in first for k in p.fields)
    assert all(p.fields["rx_bytes_per_sec"] > 0 and p.fields["tx_bytes_per_sec"] > 0 for p in second)
    total = summary_points(recording_accumulator)[-1].fields
    assert total["total_rx_bytes_per_sec"] == pytest.approx(sum(p.fields["rx_bytes_per_sec"] for p in second), rel=1e-6)


def test_throughput_counters_cost_one_call_a_run(simulated_fleet, sim_clock, nvml_calls, recording_accumulator):
    machine = simulated_fleet("a100-sxm4:1")
    collector = make(machine)
    collector.collect(recording_accumulator)
    calls = nvml_calls()
    sim_clock.advance(30)
    collector.collect(recording_accumulator)
    # the link states' batch and the throughput counters' batch
    assert calls["nvmlDeviceGetFieldValues"] == 2


def test_cards_without_nvlink_emit_nothing(simulated_fleet, recording_accumulator):
    make(simulated_fleet("l40s:1,rtx4090:1")).collect(recording_accumulator)
    assert recording_accumulator.points == []


def test_is_a_builtin_plugin():
    assert PluginHost(load_entry_points=False).load().collectors["nvlink"] is NvlinkCollector
