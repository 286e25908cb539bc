"""`gpuagent sim record` on a real GPU: the profile loads in the simulator and reports the same static facts.

Also checks the `nvidia-smi -q` importer against the recording, where
nvidia-smi is present. `pytest -m gpu`; skips without a driver.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from gpuagent import sim
from gpuagent.sim.clock import ManualClock
from gpuagent.sim.profile import validate
from gpuagent.sim.record import record

pytestmark = pytest.mark.gpu


def static_facts(p: dict) -> dict:
    """What a simulated device must report exactly as the real one did (the load model aside)."""
    mig = p.get("mig")
    return {
        **{
            k: p.get(k)
            for k in (
                "product_name", "architecture", "pci_device_id", "pci_subsystem_id", "serial",
                "board_part_number", "vbios_version", "ecc", "remapped_rows", "retired_pages", "gpm",
                "clocks_event_reasons_supported",
            )
        },
        "memory": {k: p["memory"][k] for k in ("total_mib", "reserved_mib", "bar1_total_mib", "bus_width_bits")},
        "clocks_max": p["clocks_mhz"]["max"],
        "applications": p["clocks_mhz"]["applications"],
        "power": {k: float(p["power_w"][k]) for k in ("limit", "default", "min", "max")},
        "pcie": {k: p["pcie"][k] for k in ("max_gen", "max_width", "current_width")},
        "fan": p.get("fan_pct") is not None,
        "nvlink": {k: p["nvlink"][k] for k in ("links", "version", "topology")} if p.get("nvlink") else None,
        "mig": None if mig is None else {
            "enabled": mig["enabled"],
            "max_devices": mig["max_devices"],
            "profiles": sorted(
                (q["profile_id"], q["name"], q["slices"], q["sm_count"], q["memory_mib"])
                for q in mig["gpu_instance_profiles"]
            ),
            "instances": len(mig["instances"]),
        },
        "virt_mode": p["virtualization"]["mode"],
    }  # fmt: skip


@pytest.fixture(scope="module")
def recorded(real_gpus, tmp_path_factory):
    """GPU 0 recorded by the command an operator runs: (profile dict, path of its JSON)."""
    path = tmp_path_factory.mktemp("record") / "gpu0-profile.json"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuagent", "sim", "record", "-o", str(path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(path.read_text()), path


def test_recorded_profile_is_valid_and_real(recorded):
    profile, path = recorded
    validate(dict(profile), str(path))
    assert profile["product_name"].startswith("NVIDIA")
    assert profile["architecture"] != "unknown"
    assert profile["memory"]["total_mib"] > 1024
    assert profile["power_w"]["limit"] > 50
    assert "recorded" in profile["source"]


def test_simulating_the_recording_reports_the_same_static_facts(recorded):
    profile, path = recorded
    sim.install(str(path), clock=ManualClock(), scenario="idle")
    try:
        again = record(0)  # through the simulator now
    finally:
        sim.uninstall()
    assert static_facts(again) == static_facts(profile)


def test_nvidia_smi_capture_imports_to_the_same_facts(recorded, tmp_path):
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("no nvidia-smi on PATH to capture")
    from gpuagent.sim.capture_import import import_capture

    profile, _ = recorded
    capture = tmp_path / "nvidia-smi-q.txt"
    capture.write_text(
        subprocess.run([smi, "-q", "-i", "0"], capture_output=True, text=True, timeout=60, check=True).stdout
    )
    imported = import_capture(str(capture))
    assert imported["product_name"] == profile["product_name"]
    assert int(imported["pci_device_id"], 16) == int(profile["pci_device_id"], 16)
    assert imported["memory"]["total_mib"] == profile["memory"]["total_mib"]
    assert abs(float(imported["power_w"]["limit"]) - float(profile["power_w"]["limit"])) <= 1
    for clock in ("sm", "memory"):
        assert imported["clocks_mhz"]["max"][clock] == profile["clocks_mhz"]["max"][clock], clock
