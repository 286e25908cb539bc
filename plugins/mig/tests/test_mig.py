"""mig collector on simulated MIG GPUs, built-in and imported from real nvidia-smi captures."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest
from captures import CAPTURES

from gpuagent.context import AgentContext
from gpuagent.plugin_host import PluginHost
from gpuagent.plugins.mig import GPM_FIELDS, MigCollector
from gpuagent.plugins.mig.names import rounded_name as profile_name_from_attributes

MIB = 1024 * 1024

# The first-run GPM warm-up moves the manual simulator clock (the driver wants > 100 ms).
pytestmark = pytest.mark.usefixtures("gpm_warmup_on_sim_clock")
H100_MIG_CAPTURE = CAPTURES / "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
A100_MIG_CAPTURE = CAPTURES / "telegraf-a100-sxm4-v12.xml"


def make(machine):
    return MigCollector(MigCollector.Config(), AgentContext(hostname="testhost", gpus=machine.gpus))


def instance_points(acc):
    return [p for p in acc.by_measurement("gpu_mig") if "gi_id" in p.tags]


def gpu_points(acc):
    return [p for p in acc.by_measurement("gpu_mig") if "gi_id" not in p.tags]


def run_twice(machine, clock, acc):
    """Two runs a few seconds apart (GPM needs two samples); the points of the second."""
    collector = make(machine)
    collector.collect(acc)
    clock.advance(5)
    acc.clear()
    collector.collect(acc)
    collector.close()
    return acc


def test_h100_mig_two_3g_instances_with_gpm(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("h100-sxm-mig:1", scenario="training")
    acc = run_twice(machine, sim_clock, recording_accumulator)
    [gpu] = gpu_points(acc)
    assert gpu.fields["mig_mode_current"] is True and gpu.fields["mig_mode_pending"] is True
    assert gpu.fields["max_mig_devices"] == 7 and gpu.fields["mig_devices"] == 2
    instances = instance_points(acc)
    assert len(instances) == 2
    assert len({p.tags["gi_id"] for p in instances}) == 2
    assert len({p.tags["mig_uuid"] for p in instances}) == 2
    for p in instances:
        assert p.tags["mig_profile"] == "3g.40gb"
        assert p.tags["mig_uuid"].startswith("MIG-")
        assert p.tags["ci_id"] == "0"
        assert p.tags["uuid"] == machine.gpus[0].uuid
        # The 3g.40gb profile of an H100 80GB: 40448 MiB, as nvidia-smi shows it.
        assert p.fields["fb_total_bytes"] == 40448 * MIB
        assert 0 <= p.fields["fb_used_bytes"] <= p.fields["fb_total_bytes"]
        assert p.fields["gi_slices"] == 3
        for field in GPM_FIELDS:
            assert 0.0 <= p.fields[field] <= 100.0, field


def test_a100_mig_same_without_gpm(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("a100-sxm4-mig:1", scenario="training")
    acc = run_twice(machine, sim_clock, recording_accumulator)
    instances = instance_points(acc)
    assert len(instances) == 2
    assert len({p.tags["gi_id"] for p in instances}) == 2
    for p in instances:
        assert p.tags["mig_profile"] == "3g.40gb"
        # A100 80GB's 3g.40gb slice.
        assert p.fields["fb_total_bytes"] == pytest.approx(40 * 1024 * MIB, rel=0.03)
        assert not set(GPM_FIELDS) & set(p.fields)


def test_gpm_fields_on_the_first_run_after_a_warmup_and_can_be_turned_off(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("h100-sxm-mig:1", scenario="training")
    make(machine).collect(recording_accumulator)
    instances = instance_points(recording_accumulator)
    assert len(instances) == 2 and all(set(GPM_FIELDS) <= set(p.fields) for p in instances)
    recording_accumulator.clear()
    off = MigCollector(MigCollector.Config(gpm=False), AgentContext(hostname="testhost", gpus=machine.gpus))
    off.collect(recording_accumulator)
    instances = instance_points(recording_accumulator)
    assert len(instances) == 2 and not any(set(GPM_FIELDS) & set(p.fields) for p in instances)


def test_mig_off_and_no_mig(simulated_fleet, recording_accumulator):
    make(simulated_fleet("h100-sxm:1,l40s:1")).collect(recording_accumulator)
    points = recording_accumulator.by_measurement("gpu_mig")
    # The H100 (MIG-capable, off) reports its mode; the L40S (no MIG) nothing.
    assert [p.tags["gpu"] for p in points] == ["0"]
    assert points[0].fields["mig_mode_current"] is False and points[0].fields["mig_devices"] == 0


def test_lost_gpu_is_skipped(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("h100-sxm-mig:2")
    machine.lose_gpu(0)
    collector = make(machine)
    collector.collect(recording_accumulator)
    assert machine.gpus[0].lost
    assert {p.tags["gpu"] for p in recording_accumulator.by_measurement("gpu_mig")} == {"1"}
    recording_accumulator.clear()
    collector.collect(recording_accumulator)
    assert len(instance_points(recording_accumulator)) == 2


def test_profile_names_from_attributes():
    attrs = SimpleNamespace(gpuInstanceSliceCount=3, computeInstanceSliceCount=3, memorySizeMB=40448)
    assert profile_name_from_attributes(attrs) == "3g.40gb"
    attrs = SimpleNamespace(gpuInstanceSliceCount=1, computeInstanceSliceCount=1, memorySizeMB=9984)
    assert profile_name_from_attributes(attrs) == "1g.10gb"
    attrs = SimpleNamespace(gpuInstanceSliceCount=3, computeInstanceSliceCount=1, memorySizeMB=40448)
    assert profile_name_from_attributes(attrs) == "1c.3g.40gb"


# -- profiles imported from real captures ------------------------------------


def _h100_capture_devices(text: str) -> list[tuple[int, int]]:
    """(GPU instance id, FB total MiB) of each MIG device in the first `nvidia-smi -q` section."""
    start = text.index("# $ nvidia-smi -q\n")
    section = text[start:]
    section = section[: section.index("\n# $ ", 10)] if "\n# $ " in section[10:] else section
    devices = re.findall(
        r"GPU Instance ID\s*:\s*(\d+).*?Shared FB Memory Usage\s*\n\s*Total\s*:\s*(\d+) MiB", section, re.S
    )
    return [(int(gi), int(mib)) for gi, mib in devices]


def _a100_capture_devices(text: str) -> list[tuple[int, int]]:
    root = ET.fromstring(text)
    return [
        (int(m.findtext("gpu_instance_id", "")), int(m.findtext("fb_memory_usage/total", "").split()[0]))
        for m in root.iter("mig_device")
    ]


@pytest.mark.parametrize(
    "capture, read_devices",
    [(H100_MIG_CAPTURE, _h100_capture_devices), (A100_MIG_CAPTURE, _a100_capture_devices)],
    ids=["h100-mig-text", "a100-mig-xml"],
)
def test_imported_capture_gives_the_instances_it_shows(
    capture, read_devices, simulated_fleet, tmp_path, recording_accumulator
):
    if not capture.is_file():
        pytest.skip(f"capture {capture.name} not found under {CAPTURES} (the shared captures folder)")
    from gpuagent.sim.capture_import import import_capture

    expected = read_devices(capture.read_text())
    assert len(expected) == 4  # both captures show four MIG devices
    profile_path = tmp_path / "imported.json"
    profile_path.write_text(json.dumps(import_capture(capture)))
    machine = simulated_fleet(f"{profile_path}:1")
    make(machine).collect(recording_accumulator)
    [gpu] = gpu_points(recording_accumulator)
    assert gpu.fields["mig_mode_current"] is True and gpu.fields["mig_devices"] == 4
    got = sorted(
        (int(p.tags["gi_id"]), p.fields["fb_total_bytes"] // MIB) for p in instance_points(recording_accumulator)
    )
    assert got == sorted(expected)
    for p in instance_points(recording_accumulator):
        assert re.fullmatch(r"\d+g\.\d+gb", p.tags["mig_profile"])


def test_is_a_builtin_plugin():
    assert PluginHost(load_entry_points=False).load().collectors["mig"] is MigCollector


def test_imported_h100_capture_names_profiles_as_nvidia_smi_does(simulated_fleet, tmp_path, recording_accumulator):
    if not H100_MIG_CAPTURE.is_file():
        pytest.skip(f"capture {H100_MIG_CAPTURE.name} not found under {CAPTURES} (the shared captures folder)")
    from gpuagent.sim.capture_import import import_capture

    text = H100_MIG_CAPTURE.read_text()
    # `nvidia-smi -L`: "  MIG 3g.40gb     Device  0: (UUID: ...)"
    listed = {int(i): name for name, i in re.findall(r"MIG (\S+)\s+Device\s+(\d+):", text)}
    assert listed == {0: "3g.40gb", 1: "2g.20gb", 2: "1g.10gb", 3: "1g.10gb"}
    profile_path = tmp_path / "h100-mig.json"
    profile_path.write_text(json.dumps(import_capture(H100_MIG_CAPTURE)))
    make(simulated_fleet(f"{profile_path}:1")).collect(recording_accumulator)
    got = {p.fields["mig_index"]: p.tags["mig_profile"] for p in instance_points(recording_accumulator)}
    assert got == listed
