"""`gpuagent sim` commands and the gpuagent.testing fixtures."""

import json

import pynvml
import pytest
from captures import CAPTURES
from click.testing import CliRunner

from gpuagent import sim
from gpuagent.sim.cli import sim_group
from gpuagent.sim.clock import ManualClock
from gpuagent.testing import RecordingAccumulator


def test_sim_list():
    result = CliRunner().invoke(sim_group, ["list"])
    assert result.exit_code == 0
    for name in (
        "l40s",
        "rtx4090",
        "a100-sxm4",
        "h100-pcie",
        "h100-sxm",
        "h200",
        "a100-sxm4-mig",
        "h100-sxm-mig",
        "l40s-vgpu",
    ):
        assert f"\n{name} " in "\n" + result.output
    assert "864GB/s" in result.output
    data = json.loads(CliRunner().invoke(sim_group, ["list", "--json"]).output)
    assert {p["name"]: p["peak_dram_gbps"] for p in data["profiles"]}["h200"] == 4800


def test_sim_import_writes_profile(tmp_path):
    capture = CAPTURES / "telegraf-a100-sxm4-v12.xml"
    if not capture.exists():
        pytest.skip(f"capture not available (expected under {CAPTURES})")
    out = tmp_path / "a100.json"
    result = CliRunner().invoke(sim_group, ["import", str(capture), "-o", str(out)])
    assert result.exit_code == 0, result.output
    profile = json.loads(out.read_text())
    assert profile["product_name"] == "NVIDIA A100-SXM4-80GB" and len(profile["mig"]["instances"]) == 4
    result = CliRunner().invoke(sim_group, ["import", str(tmp_path / "a100.json"), "-o", str(tmp_path / "y.json")])
    assert result.exit_code != 0


def test_sim_record_on_the_simulator(tmp_path):
    out = tmp_path / "rec.json"
    sim.install("l40s-vgpu", clock=ManualClock())
    try:
        result = CliRunner().invoke(sim_group, ["record", "-o", str(out)])
    finally:
        sim.uninstall()
    assert result.exit_code == 0, result.output
    profile = json.loads(out.read_text())
    assert profile["product_name"] == "NVIDIA L40S" and profile["virtualization"]["mode"] == "host_vgpu"


def test_sim_record_without_driver_is_one_line_error(tmp_path):
    sim.uninstall()
    result = CliRunner().invoke(sim_group, ["record", "-o", str(tmp_path / "x.json")])
    assert result.exit_code != 0


def test_fixtures(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s:2,h100-sxm:1", seed=3, scenario="training")
    assert machine.clock is sim_clock and len(machine.gpus) == 3
    e1 = [g.query(pynvml.nvmlDeviceGetTotalEnergyConsumption) for g in machine.gpus]
    sim_clock.advance(10)
    for gpu in machine.gpus:
        recording_accumulator.add_fields(
            "gpu_power",
            {"power_w": gpu.query(pynvml.nvmlDeviceGetPowerUsage) / 1000},
            tags=gpu.tags,
        )
    e2 = [g.query(pynvml.nvmlDeviceGetTotalEnergyConsumption) for g in machine.gpus]
    assert all(b > a for a, b in zip(e1, e2, strict=True))
    assert isinstance(recording_accumulator, RecordingAccumulator)
    assert recording_accumulator.measurements() == ["gpu_power"]
    assert len(recording_accumulator.field("gpu_power", "power_w", model="NVIDIA L40S")) == 2
    assert recording_accumulator.fields("gpu_power", gpu=2)[0]["power_w"] > 100


def test_fixture_reinstall_in_one_test(simulated_fleet):
    simulated_fleet("l40s:1")
    machine = simulated_fleet("rtx4090:2")
    assert pynvml.nvmlDeviceGetCount() == 2 and machine.gpus[0].name == "NVIDIA GeForce RTX 4090"
