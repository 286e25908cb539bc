"""p2p collector on simulated fleets: who can reach whom, and over what."""

from __future__ import annotations

import ctypes
import re

import pynvml
import pytest

from gpuagent.context import AgentContext
from gpuagent.plugin_host import PluginHost
from gpuagent.plugins.p2p import P2P_CAPS, P2pCollector, caps_index, normalize_bus_id

CAPS = ("read", "write", "nvlink", "atomics", "prop")
STATUSES = {
    "ok",
    "chipset_not_supported",
    "gpu_not_supported",
    "topology_not_supported",
    "disabled_by_regkey",
    "not_supported",
    "unknown",
}


def collect(machine, acc):
    collector = P2pCollector(P2pCollector.Config(), AgentContext(hostname="testhost", gpus=machine.gpus))
    collector.collect(acc)
    return acc.by_measurement("gpu_p2p")


def test_caps_indices_are_plain_ints_even_where_pynvml_has_tuples():
    # nvidia-ml-py defines NVML_P2P_CAPS_INDEX_READ = 0, (a tuple); ctypes refuses it.
    assert caps_index((0,)) == 0
    assert caps_index(3) == 3
    pynvml_indices = {
        "read": pynvml.NVML_P2P_CAPS_INDEX_READ,
        "write": pynvml.NVML_P2P_CAPS_INDEX_WRITE,
        "nvlink": pynvml.NVML_P2P_CAPS_INDEX_NVLINK,
        "atomics": pynvml.NVML_P2P_CAPS_INDEX_ATOMICS,
        "prop": pynvml.NVML_P2P_CAPS_INDEX_PROP,
    }
    for cap, index in P2P_CAPS.items():
        assert type(index) is int
        assert index == caps_index(pynvml_indices[cap])


def test_the_pynvml_tuple_is_refused_and_ours_is_taken(simulated_fleet):
    machine = simulated_fleet("l40s:2")
    a, b = (g.handle for g in machine.gpus)
    if isinstance(pynvml.NVML_P2P_CAPS_INDEX_READ, tuple):
        with pytest.raises(ctypes.ArgumentError):  # as ctypes refuses it on hardware
            pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_READ)
    assert pynvml.nvmlDeviceGetP2PStatus(a, b, P2P_CAPS["read"]) == pynvml.NVML_P2P_STATUS_OK


def test_rtx4090_pair_has_no_p2p_at_all(simulated_fleet, recording_accumulator):
    points = collect(simulated_fleet("rtx4090:2"), recording_accumulator)
    assert len(points) == 2
    for p in points:
        for cap in CAPS:
            assert p.fields[f"{cap}_status"] != "ok", (cap, p.fields)
            assert p.fields[f"{cap}_status"] in STATUSES
            assert p.fields[f"{cap}_ok"] is False
        assert p.fields["nvlink_count"] == 0
        assert not p.fields["topology"].startswith("NV")


def test_l40s_pair_reads_and_writes_over_pcie_not_nvlink(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("l40s:2")
    points = collect(machine, recording_accumulator)
    assert {(p.tags["gpu"], p.tags["peer_gpu"]) for p in points} == {("0", "1"), ("1", "0")}
    for p in points:
        assert p.fields["read_status"] == "ok" and p.fields["read_ok"] is True
        assert p.fields["write_status"] == "ok" and p.fields["write_ok"] is True
        assert p.fields["nvlink_status"] != "ok" and p.fields["nvlink_ok"] is False
        assert p.fields["topology"] in {"PIX", "PXB", "PHB", "NODE", "SYS"}
        assert p.fields["topology"] == p.fields["pcie_topology"]
        peer = machine.gpus[int(p.tags["peer_gpu"])]
        assert p.tags["peer_uuid"] == peer.uuid != p.tags["uuid"]


def test_h100_sxm8_all_56_ordered_pairs_over_nvlink(simulated_fleet, recording_accumulator):
    points = collect(simulated_fleet("h100-sxm:8"), recording_accumulator)
    pairs = {(p.tags["gpu"], p.tags["peer_gpu"]) for p in points}
    assert len(points) == len(pairs) == 56
    assert all(a != b for a, b in pairs)
    for p in points:
        assert p.fields["nvlink_status"] == "ok" and p.fields["nvlink_ok"] is True
        assert re.fullmatch(r"NV\d+", p.fields["topology"]), p.fields["topology"]
        assert int(p.fields["topology"][2:]) == p.fields["nvlink_count"] > 0
        assert p.fields["pcie_topology"] in {"PIX", "PXB", "PHB", "NODE", "SYS"}


def test_lost_gpu_is_left_out_and_the_rest_still_pair(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("l40s:3")
    machine.lose_gpu(1)
    machine.gpus[1].mark_lost("test")
    points = collect(machine, recording_accumulator)
    assert {(p.tags["gpu"], p.tags["peer_gpu"]) for p in points} == {("0", "2"), ("2", "0")}


def test_single_gpu_emits_nothing(simulated_fleet, recording_accumulator):
    assert collect(simulated_fleet("h100-sxm:1"), recording_accumulator) == []


def test_runs_every_few_minutes_by_default_and_is_a_builtin_plugin():
    assert P2pCollector.default_interval >= 60
    host = PluginHost(load_entry_points=False).load()
    assert host.collectors["p2p"] is P2pCollector


def test_bus_ids_compare_across_domain_widths():
    assert normalize_bus_id("00000000:C0:00.0") == normalize_bus_id("0000:c0:00.0")


def test_h100_pcie_bridge_pairs_count_their_direct_links(simulated_fleet, recording_accumulator):
    points = collect(simulated_fleet("h100-pcie:4"), recording_accumulator)
    assert len(points) == 12
    bridged = [p for p in points if p.fields["nvlink_ok"]]
    unbridged = [p for p in points if not p.fields["nvlink_ok"]]
    assert bridged and unbridged
    for p in bridged:
        assert p.fields["topology"] == f"NV{p.fields['nvlink_count']}" and p.fields["nvlink_count"] > 0
    for p in unbridged:
        assert p.fields["nvlink_count"] == 0 and p.fields["topology"] == p.fields["pcie_topology"]
    # A bridge joins both directions of the same pair.
    assert {(p.tags["gpu"], p.tags["peer_gpu"]) for p in bridged} == {
        (p.tags["peer_gpu"], p.tags["gpu"]) for p in bridged
    }
