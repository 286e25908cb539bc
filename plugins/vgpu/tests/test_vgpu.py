"""vgpu collector on a simulated vGPU host and on bare-metal cards."""

from __future__ import annotations

import json

from gpuagent.context import AgentContext
from gpuagent.plugin_host import PluginHost
from gpuagent.plugins.vgpu import VgpuCollector
from gpuagent.sim.profile import load_profile

MIB = 1024 * 1024


def make(machine):
    return VgpuCollector(VgpuCollector.Config(), AgentContext(hostname="testhost", gpus=machine.gpus))


def instance_points(acc):
    return [p for p in acc.by_measurement("gpu_vgpu") if "vgpu_instance" in p.tags]


def test_l40s_vgpu_host_two_instances(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("l40s-vgpu:1")
    make(machine).collect(recording_accumulator)
    [gpu] = [p for p in recording_accumulator.by_measurement("gpu_vgpu") if "vgpu_instance" not in p.tags]
    assert gpu.fields["virtualization_mode"] == "host_vgpu"
    assert gpu.fields["host_vgpu_mode"] == "sriov"
    assert gpu.fields["active_instances"] == 2
    profile = load_profile("l40s-vgpu")["virtualization"]
    assert gpu.fields["supported_types"] == len(profile["vgpu_types"])
    assert 0 <= gpu.fields["creatable_types"] <= gpu.fields["supported_types"]

    instances = instance_points(recording_accumulator)
    assert len(instances) == 2
    types = {t["type_id"]: t for t in profile["vgpu_types"]}
    expected = {str(v["instance_id"]): v for v in profile["vgpu_instances"]}
    assert {p.tags["vgpu_instance"] for p in instances} == set(expected)
    for p in instances:
        want = expected[p.tags["vgpu_instance"]]
        vtype = types[want["type_id"]]
        assert p.fields["vgpu_type_name"] == p.tags["vgpu_type"] == vtype["name"]
        assert p.fields["vgpu_type_id"] == want["type_id"]
        assert p.fields["vm_id"] == want["vm_id"]
        assert p.fields["fb_used_bytes"] == want["fb_used_mib"] * MIB
        assert p.fields["fb_total_bytes"] == vtype["fb_mib"] * MIB
        assert p.fields["licensed"] is want["licensed"]
        assert 0 <= p.fields["sm_util_pct"] <= 100


def test_fb_used_above_4gib_is_not_truncated(simulated_fleet, tmp_path, recording_accumulator):
    # pynvml's own wrapper reads this unsigned long long into a 32-bit c_uint.
    profile = load_profile("l40s-vgpu")
    profile["virtualization"]["vgpu_instances"][0]["fb_used_mib"] = 20 * 1024
    path = tmp_path / "big-vgpu.json"
    path.write_text(json.dumps(profile))
    make(simulated_fleet(f"{path}:1")).collect(recording_accumulator)
    used = sorted(p.fields["fb_used_bytes"] for p in instance_points(recording_accumulator))
    assert used[-1] == 20 * 1024 * MIB


def test_bare_metal_cards_report_their_mode_only(simulated_fleet, recording_accumulator):
    make(simulated_fleet("l40s:1,h100-sxm:1")).collect(recording_accumulator)
    points = recording_accumulator.by_measurement("gpu_vgpu")
    for p in points:
        assert p.fields["virtualization_mode"] == "none"
        assert "active_instances" not in p.fields and "supported_types" not in p.fields
    assert len(points) == 2 and not instance_points(recording_accumulator)


def test_is_a_builtin_plugin():
    assert PluginHost(load_entry_points=False).load().collectors["vgpu"] is VgpuCollector
