"""record(simulate(profile)) reproduces the profile's static facts."""

import pytest

from gpuagent import sim
from gpuagent.sim.clock import ManualClock
from gpuagent.sim.profile import BUILTIN_NAMES, load_profile
from gpuagent.sim.record import record

STATIC_KEYS = (
    "product_name",
    "architecture",
    "pci_device_id",
    "pci_subsystem_id",
    "serial",
    "board_part_number",
    "vbios_version",
    "ecc",
    "remapped_rows",
    "retired_pages",
    "gpm",
    "clocks_event_reasons_supported",
)


def static_facts(p):
    mig = p.get("mig")
    virt = p["virtualization"]
    return {
        **{k: p.get(k) for k in STATIC_KEYS},
        "memory": {k: p["memory"][k] for k in ("total_mib", "reserved_mib", "bar1_total_mib", "bus_width_bits")},
        "clocks_max": p["clocks_mhz"]["max"],
        "applications": p["clocks_mhz"]["applications"],
        "power": {k: float(p["power_w"][k]) for k in ("limit", "default", "min", "max")},
        "pcie": {k: p["pcie"][k] for k in ("max_gen", "max_width", "current_width")},
        "fan": p.get("fan_pct") is not None,
        "nvlink": {k: p["nvlink"][k] for k in ("links", "version", "topology")} if p.get("nvlink") else None,
        "mig": None
        if mig is None
        else {
            "enabled": mig["enabled"],
            "max_devices": mig["max_devices"],
            "profiles": sorted(
                (q["profile_id"], q["name"], q["slices"], q["sm_count"], q["memory_mib"])
                for q in mig["gpu_instance_profiles"]
            ),
            "instances": [
                (
                    i["gi_id"],
                    i["ci_id"],
                    i["profile_id"],
                    i["profile"],
                    i["sm_count"],
                    i["memory_mib"],
                )
                for i in mig["instances"]
            ],
        },
        "virt_mode": virt["mode"],
        "vgpu_types": sorted((t["type_id"], t["name"], t["fb_mib"]) for t in virt.get("vgpu_types") or []),
        "vgpu_instances": sorted(
            (v["instance_id"], v["type_id"], v["vm_id"], v["fb_used_mib"]) for v in virt.get("vgpu_instances") or []
        ),
    }


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_record_of_simulated_builtin_reproduces_static_facts(name):
    sim.install(name, clock=ManualClock(), scenario="idle")
    try:
        recorded = record(0)
    finally:
        sim.uninstall()
    original = load_profile(name)
    expected = static_facts(original)
    if (original.get("mig") or {}).get("enabled"):
        expected["nvlink"] = None  # NVLink queries are refused in MIG mode: a recording sees none
    assert static_facts(recorded) == expected
    # and what the card does not support survives the round trip
    for symbol in ("nvmlDeviceGetFanSpeed", "nvmlDeviceGetSerial", "nvmlDeviceGetUtilizationRates"):
        assert (symbol in recorded["unsupported"]) == (
            symbol in original["unsupported"]
            or (symbol == "nvmlDeviceGetFanSpeed" and not original["fan_pct"])
            or (symbol == "nvmlDeviceGetSerial" and not original["serial"])
        )


def test_recorded_profile_simulates_again(tmp_path):
    import json

    import pynvml

    sim.install("h100-sxm-mig", clock=ManualClock())
    try:
        recorded = record(0)
    finally:
        sim.uninstall()
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(recorded))
    sim.install(f"{path}:2", clock=ManualClock())
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(1)
        assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
        assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]
        pynvml.nvmlShutdown()
    finally:
        sim.uninstall()
