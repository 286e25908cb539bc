"""`inspect --json --simulate <imported capture>` (no scenario: the captured idle run) says what
the capture says, fact by fact, for every capture in ../shared/captures.

The capture's statement is the parsed ``nvidia-smi -q`` / ``-q -x`` text (facts_from_text /
facts_from_xml, the parse only); what is compared is what the agent reads from the simulated
card. A fact the capture does not state (N/A, masked) is skipped; one the profile could not take
must be named in its ``not_in_capture`` list.
"""

from __future__ import annotations

import json
import re

import pynvml
import pytest
from captures import CAPTURES, capture_names

from gpuagent.sim.capture_import import _num, facts_from_text, facts_from_xml

MIB = 1 << 20


def _facts(name: str) -> dict:
    text = (CAPTURES / name).read_text(errors="replace")
    return facts_from_xml(text) if text.lstrip().startswith("<") else facts_from_text(text)


def _stated(value):
    """The capture's number, or None where it says N/A (nothing to compare)."""
    return _num(value)


@pytest.fixture
def inspected(request, tmp_path, invoke):
    name = request.param
    if name is None:
        pytest.skip(f"no nvidia-smi captures at {CAPTURES} (they live in ../shared/captures)")
    profile_path = tmp_path / "imported.json"
    assert invoke("sim", "import", str(CAPTURES / name), "-o", str(profile_path)).exit_code == 0
    result = invoke("inspect", "--json", "--simulate", str(profile_path))
    assert result.exit_code == 0, result.output
    return name, json.loads(profile_path.read_text()), json.loads(result.stdout)


def _check(mismatches: list, fact: str, stated, shown, tolerance: float = 0.0) -> None:
    if stated is None:
        return
    if shown is None or abs(float(shown) - float(stated)) > tolerance:
        mismatches.append(f"{fact}: capture {stated!r}, inspect {shown!r}")


@pytest.mark.parametrize("inspected", capture_names(), indirect=True)
def test_inspect_says_what_the_capture_says(inspected):
    name, profile, doc = inspected
    f = _facts(name)
    idle = f["idle"]
    gpu = doc["gpus"][0]
    clocks, power, memory = gpu["gpu_clocks"], gpu["gpu_power"], gpu["gpu_memory"]
    pcie, health = gpu["gpu_pcie"], gpu["gpu_health"]
    bad: list[str] = []
    lacking = profile.get("not_in_capture") or []

    # identity and versions
    if gpu["name"] != f["product_name"]:
        bad.append(f"name: capture {f['product_name']!r}, inspect {gpu['name']!r}")
    uuid = f.get("uuid") or ""
    if re.match(r"^GPU-[0-9a-f-]{36}$", uuid) and set(uuid[4:]) - {"0", "-"}:  # unmasked
        if gpu["uuid"] != uuid:
            bad.append(f"uuid: capture {uuid}, inspect {gpu['uuid']}")
    if gpu["pci_bus_id"] != f["bus_id"].upper():
        bad.append(f"bus id: capture {f['bus_id']}, inspect {gpu['pci_bus_id']}")
    if doc["driver"]["driver_version"] != f["driver_version"]:
        bad.append(f"driver: capture {f['driver_version']}, inspect {doc['driver']['driver_version']}")
    cuda = str(f["cuda_version"]).split("[")[0].strip()
    if doc["driver"]["cuda_driver_version"] != cuda:
        bad.append(f"CUDA: capture {cuda}, inspect {doc['driver']['cuda_driver_version']}")
    if not doc["driver"]["nvml_version"].startswith(cuda.split(".")[0] + "." + f["driver_version"]):
        bad.append(f"NVML version {doc['driver']['nvml_version']} for CUDA {cuda}")

    # memory and BAR1 (MiB as nvidia-smi prints them)
    _check(bad, "FB total", _stated(f["memory_total"]), memory["fb_total_bytes"] / MIB)
    _check(bad, "FB reserved", _stated(f["memory_reserved"]), memory["fb_reserved_bytes"] / MIB, 1)
    _check(bad, "FB used", idle["memory_used_mib"], memory["fb_used_bytes"] / MIB, 1)
    _check(bad, "BAR1 total", _stated(f["bar1_total"]), memory["bar1_total_bytes"] / MIB)

    # power: the draw nvmlDeviceGetPowerUsage gives (average on Ampere but GA100 and newer)
    draw = profile["captured"]["idle"]["power_w"]
    assert draw in (idle["power_average_w"], idle["power_instant_w"])
    _check(bad, "power draw", draw, power["power_w"], 0.01)
    _check(bad, "power limit", _stated(f["power_limit"]), power["power_limit_w"], 0.01)
    _check(bad, "default limit", _stated(f["power_default"]), power["default_power_limit_w"], 0.01)
    _check(bad, "min limit", _stated(f["power_min"]), power["min_power_limit_w"], 0.01)
    _check(bad, "max limit", _stated(f["power_max"]), power["max_power_limit_w"], 0.01)

    # clocks and P-state
    for key in ("graphics", "sm", "memory", "video"):
        _check(bad, f"{key} clock", idle["clocks"][key], clocks[f"{key}_clock_mhz"])
        _check(bad, f"max {key} clock", _stated(f[f"max_{key}"]), clocks[f"max_{key}_clock_mhz"])
    _check(bad, "P-state", idle["pstate"], clocks["pstate"])

    # utilisation, the GPU-level video engines (decoder by its call on cards without GPM)
    _check(bad, "GPU utilisation", idle["util"]["gpu"], memory.get("gpu_util_pct"))
    _check(bad, "memory utilisation", idle["util"]["memory"], memory.get("memory_util_pct"))
    _check(bad, "encoder", idle["util"]["encoder"], memory.get("encoder_util_pct"))
    if not profile.get("gpm"):
        _check(bad, "decoder", idle["util"]["decoder"], memory.get("decoder_util_pct"))

    # fan and temperatures, thresholds and margins
    _check(bad, "fan", idle["fan_pct"], power["fan_speed_pct"])
    _check(bad, "GPU temperature", idle["temp_c"], power["temperature_c"])
    _check(bad, "memory temperature", idle["memory_temp_c"], power["memory_temperature_c"])
    _check(bad, "slowdown", _stated(f["temp_slowdown"]), power["temperature_slowdown_c"])
    _check(bad, "shutdown", _stated(f["temp_shutdown"]), power["temperature_shutdown_c"])
    _check(bad, "max operating", _stated(f["temp_gpu_max"]), power["temperature_gpu_max_c"])
    _check(bad, "memory max operating", _stated(f["temp_mem_max"]), power["temperature_memory_max_c"])
    tl = {k: _stated(v) for k, v in (f.get("tlimit") or {}).items()}
    if tl.get("margin") is not None:
        # "GPU T.Limit Temp" is the margin; the thresholds lie at current + margin - T.Limit value.
        base = idle["temp_c"] + tl["margin"]
        _check(bad, "thermal margin", tl["margin"], power.get("thermal_margin_c"))
        for key, field in (
            ("shutdown", "temperature_shutdown_c"),
            ("slowdown", "temperature_slowdown_c"),
            ("gpu_max", "temperature_gpu_max_c"),
        ):
            if tl.get(key) is not None:
                _check(bad, f"{key} (from T.Limit {tl[key]})", base - tl[key], power[field])
                assert key in profile["temperature_c"].get("thresholds_derived_from_tlimit", [])

    # ECC, PCIe
    ecc = f.get("ecc_mode")
    if ecc and _stated(ecc) is None and ecc.lower() in ("enabled", "disabled"):
        if health.get("ecc_enabled") != (ecc.lower() == "enabled"):
            bad.append(f"ECC: capture {ecc}, inspect {health.get('ecc_enabled')}")
    _check(bad, "PCIe max gen", _stated(f["pcie_max_gen"]), pcie["max_link_gen"])
    _check(bad, "PCIe gen", _stated(f["pcie_current_gen"]), pcie["link_gen"])
    _check(bad, "PCIe max width", _stated(f["pcie_max_width"]), pcie["max_link_width"])
    _check(bad, "PCIe width", _stated(f["pcie_current_width"]), pcie["link_width"])

    # MIG devices, by the names `nvidia-smi -L` gives them
    listed = f.get("mig_list_names") or []
    if listed:
        shown = [p["mig_profile"] for p in gpu["gpu_mig"]["points"]]
        if shown != listed:
            bad.append(f"MIG devices: capture {listed}, inspect {shown}")

    assert not bad, f"{name} (not_in_capture: {lacking}):\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("inspected", capture_names(), indirect=True)
@pytest.mark.slow
def test_processes_and_identity_are_the_captures(inspected, simulated_fleet, tmp_path):
    """The processes the idle run lists (graphics ones too), with their names and memory, and
    the remapper histogram's bank count; through pynvml on the imported profile."""
    name, profile, _ = inspected
    idle = _facts(name)["idle"]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile))
    simulated_fleet(str(path))
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    seen = {}
    for call, kind in (
        (pynvml.nvmlDeviceGetComputeRunningProcesses, "C"),
        (pynvml.nvmlDeviceGetGraphicsRunningProcesses, "G"),
    ):
        for p in call(h):
            seen.setdefault(p.pid, set()).add(kind)
            stated = next(q for q in idle["processes"] if q["pid"] == p.pid)
            if stated["used_mib"] is not None:
                assert p.usedGpuMemory >> 20 == stated["used_mib"]
            assert pynvml.nvmlSystemGetProcessName(p.pid) == stated["name"]
    expected = {q["pid"]: set(q["type"].split("+")) for q in idle["processes"]}
    assert seen == expected
    hist = _stated(_facts(name).get("histogram_max"))
    if hist is not None and profile.get("remapped_rows"):
        assert pynvml.nvmlDeviceGetRowRemapperHistogram(h).max == hist
        # "Correctable Error 0, Uncorrectable Error 0, Pending No, Remapping Failure Occurred No"
        assert tuple(pynvml.nvmlDeviceGetRemappedRows(h)) == (0, 0, 0, 0)
