"""`inspect --json --simulate <imported capture>` (no scenario: the captured idle run) says what
the capture says, fact by fact, for every capture in ../shared/captures.

The capture's statement is the parsed ``nvidia-smi -q`` / ``-q -x`` text (facts_from_text /
facts_from_xml, the parse only); what is compared is what the agent reads from the simulated
card. A fact the capture does not state (N/A, masked) is skipped; one the profile could not take
must be named in its ``not_in_capture`` list.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

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
    _check(bad, "target temperature", _stated(f.get("temp_target")), power.get("temperature_target_c"))
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


# -- round 3 (issue 44): every stated fact of each class, in inspect and in the stream --------

_SEEN: dict[str, tuple] = {}


@pytest.fixture
def seen(request, gpuagent_cli, tmp_path_factory, monkeypatch):
    """(capture name, its parsed facts, profile, profile path, `sim import --json` report,
    `inspect --json` document, stream: measurement -> [(tags, fields)] of `run --once --test`),
    once per capture for the module."""
    from click.testing import CliRunner
    from lineprotocol_parser import parse_line

    name = request.param
    if name is None:
        pytest.skip(f"no nvidia-smi captures at {CAPTURES} (they live in ../shared/captures)")
    if name not in _SEEN:
        pids = [p["pid"] for p in _facts(name)["idle"]["processes"]]
        alive = {pid for pid in pids if os.path.exists(f"/proc/{pid}")}  # a thread id too
        monkeypatch.delenv("GPUAGENT_CONFIG", raising=False)
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
        runner = CliRunner()
        path = tmp_path_factory.mktemp("profile") / "imported.json"
        imported = runner.invoke(gpuagent_cli, ["sim", "import", str(CAPTURES / name), "-o", str(path), "--json"])
        assert imported.exit_code == 0, imported.output
        doc = runner.invoke(gpuagent_cli, ["inspect", "--json", "--simulate", str(path)])
        assert doc.exit_code == 0, doc.output
        alive |= {pid for pid in pids if os.path.exists(f"/proc/{pid}")}  # a thread id too
        ran = runner.invoke(gpuagent_cli, ["run", "--once", "--test", "--simulate", str(path)])
        assert ran.exit_code == 0, ran.output
        stream: dict[str, list] = {}
        for line in ran.stdout.splitlines():
            if line and not line.startswith("#"):
                measurement, tags, fields, _ = parse_line(line)
                stream.setdefault(measurement, []).append((tags, fields))
        report = json.loads(imported.stdout)
        # Captured pids that are (or were, during the reads) live processes of this host: /proc names those.
        alive |= {pid for pid in pids if os.path.exists(f"/proc/{pid}")}  # a thread id too
        facts = _facts(name)
        facts["host_pids"] = alive
        _SEEN[name] = (
            name,
            facts,
            json.loads(path.read_text()),
            str(path),
            report,
            json.loads(doc.stdout),
            stream,
        )
    return _SEEN[name]


def _gpu_point(stream: dict, measurement: str) -> dict:
    """The fields of GPU 0's own point of a measurement (the one with the fewest tags)."""
    points = [p for p in stream.get(measurement, []) if p[0].get("gpu") == "0"]
    assert points, f"no {measurement} point in the stream"
    return min(points, key=lambda p: len(p[0]))[1]


ALL = capture_names()


@pytest.mark.parametrize("seen", ALL, indirect=True)
def test_bar1_in_use_is_the_captures(seen):
    name, f, profile, _, _, doc, stream = seen
    stated = f["idle"]["bar1_used_mib"]
    assert stated is not None, f"{name}: every shared capture states BAR1 in use"
    assert doc["gpus"][0]["gpu_memory"]["bar1_used_bytes"] == stated * MIB
    assert _gpu_point(stream, "gpu_memory")["bar1_used_bytes"] == stated * MIB


UTIL_FIELDS = {
    "gpu": "gpu_util_pct",
    "memory": "memory_util_pct",
    "encoder": "encoder_util_pct",
    "decoder": "decoder_util_pct",
}


@pytest.mark.parametrize("seen", ALL, indirect=True)
def test_utilisation_the_capture_says_na_is_absent_and_the_rest_is_as_stated(seen):
    name, f, profile, path, _, doc, stream = seen
    idle = f["idle"]
    shown = doc["gpus"][0]["gpu_memory"]
    streamed = _gpu_point(stream, "gpu_memory")
    for key, field in UTIL_FIELDS.items():
        if key in idle["util_na"]:
            assert shown.get(field) is None and field not in streamed, f"{name}: {key} is N/A in the capture"
        elif idle["util"][key] is not None and not (key == "decoder" and profile.get("gpm")):
            assert shown.get(field) == idle["util"][key] == streamed.get(field), f"{name}: {key}"
    # jpeg and OFA reach no collector: NVML answers them as the capture says.
    from gpuagent import sim

    machine = sim.install(path, scenario="idle")
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        for key, call in (("jpeg", pynvml.nvmlDeviceGetJpgUtilization), ("ofa", pynvml.nvmlDeviceGetOfaUtilization)):
            if key in idle["util_na"]:
                with pytest.raises(pynvml.NVMLError_NotSupported):
                    call(h)
            elif idle["util"][key] is not None:
                assert call(h)[0] == idle["util"][key]
        pynvml.nvmlShutdown()
    finally:
        sim.uninstall()
    assert machine


REASON_FIELDS = {
    "sw_power_cap": "sw_power_cap_time_ns",
    "sync_boost": "sync_boost_time_ns",
    "sw_thermal_slowdown": "sw_thermal_slowdown_time_ns",
    "hw_thermal_slowdown": "hw_thermal_slowdown_time_ns",
    "hw_power_brake": "hw_power_brake_slowdown_time_ns",
}


@pytest.mark.parametrize("seen", ALL, indirect=True)
def test_clock_event_reasons_and_their_counters_are_the_captures(seen):
    name, f, _, _, _, doc, stream = seen
    clocks, streamed = doc["gpus"][0]["gpu_clocks"], _gpu_point(stream, "gpu_clocks")
    mask = f["idle"]["reasons"]
    assert mask is not None, f"{name}: every shared capture states each reason"
    # The supported mask may hide a bit the capture shows Active; none of the captures does.
    assert clocks["clock_event_reasons"] == mask == streamed["clock_event_reasons"]
    assert clocks["idle"] is bool(mask & 0x1)
    for key, us in (f.get("reason_counters_us") or {}).items():
        if us is not None:  # the idle run never caps: the counters stand where the capture's did
            assert clocks[REASON_FIELDS[key]] == us * 1000 == streamed[REASON_FIELDS[key]], f"{name}: {key}"


@pytest.mark.parametrize("seen", ALL, indirect=True)
def test_pcie_throughput_is_the_captures(seen):
    name, f, *_, stream = seen
    pcie = _gpu_point(stream, "gpu_pcie")
    for key, field in (("pcie_tx_kbps", "tx_bytes_per_s"), ("pcie_rx_kbps", "rx_bytes_per_s")):
        stated = f["idle"][key]
        assert stated is not None, f"{name}: every shared capture states {key}"
        assert pcie[field] == stated * 1024, f"{name}: {key}"
    replays = _stated(f["pcie_replays"])
    assert replays is not None, f"{name}: every shared capture states the replay counter"
    assert pcie["replays_total"] == replays


@pytest.mark.parametrize("seen", ALL, indirect=True)
def test_serial_and_board_id_are_the_captures_on_every_gpu(seen, simulated_fleet):
    """A stated serial as stated (a masked one on each GPU alike, as a box of masked cards shows;
    digits keep their leading zeros), N/A answers NOT_SUPPORTED; the board id as stated."""
    name, f, profile, path, _, _, stream = seen
    serial = f["serial"]
    streamed = _gpu_point(stream, "gpu_info")
    simulated_fleet(f"{path}:2", scenario="idle")
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1)]
    if serial is None or _stated(serial) is None and serial.strip() in ("N/A", ""):
        for h in handles:
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlDeviceGetSerial(h)
        assert "serial" not in streamed
    else:
        assert pynvml.nvmlDeviceGetSerial(handles[0]) == serial == streamed["serial"]
        second = pynvml.nvmlDeviceGetSerial(handles[1])
        if set(serial) == {"0"}:
            assert second == serial  # masked: the same mask
        elif serial.isdigit():
            assert second == f"{int(serial) + 1:0{len(serial)}d}" and len(second) == len(serial)
    assert pynvml.nvmlDeviceGetBoardId(handles[0]) == int(f["board_id"], 16)


@pytest.mark.parametrize("seen", ALL, indirect=True)
def test_pci_device_id_and_target_temperature_are_the_captures(seen, simulated_fleet):
    name, f, profile, path, _, doc, _ = seen
    assert doc["gpus"][0]["pci_device_id"] == str(f["pci_device_id"]).upper().replace("0X", "0x")
    simulated_fleet(path, scenario="idle")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    target = _stated(f.get("temp_target"))
    if target is None:  # "GPU Target Temperature : N/A" (or no such line)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetTemperatureThreshold(h, pynvml.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR)
    else:
        assert pynvml.nvmlDeviceGetTemperatureThreshold(h, pynvml.NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR) == target


@pytest.mark.parametrize("seen", ALL, indirect=True)
def test_mig_devices_memory_in_use_and_engines_are_the_captures(seen, simulated_fleet):
    name, f, profile, path, _, doc, stream = seen
    devices = f["mig_devices"]
    if not devices:
        assert doc["gpus"][0]["gpu_mig"] is None or not doc["gpus"][0]["gpu_mig"]["points"]
        return
    used = f["idle"]["mig_used_mib"]
    shown = sorted(doc["gpus"][0]["gpu_mig"]["points"], key=lambda p: p["mig_index"])
    assert [p["fb_used_bytes"] for p in shown] == [u * MIB for u in used]
    streamed = {int(t["mig_index"]) if "mig_index" in t else fl.get("mig_index"): fl for t, fl in stream["gpu_mig"]}
    assert [streamed[n]["fb_used_bytes"] for n in range(len(used))] == [u * MIB for u in used]
    simulated_fleet(path, scenario="idle")
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    for n, d in enumerate(devices):
        attrs = pynvml.nvmlDeviceGetAttributes_v2(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, n))
        got = {
            "ce_count": attrs.sharedCopyEngineCount,
            "encoder_count": attrs.sharedEncoderCount,
            "decoder_count": attrs.sharedDecoderCount,
            "ofa_count": attrs.sharedOfaCount,
            "jpeg_count": attrs.sharedJpegCount,
        }
        assert got == {k: d[k] for k in got}, f"{name}: MIG device {n}"


@pytest.mark.parametrize("seen", ALL, indirect=True)
def test_processes_reach_inspect_and_the_stream_with_their_names(seen):
    """pid, type, name and memory as the capture lists them; the name is NVML's (the captured
    one) unless the pid is a live process of this host (then /proc's, as on a real machine: the
    agent cannot tell a simulated process from the host's own with that pid)."""
    name, f, _, _, _, doc, stream = seen
    stated = f["idle"]["processes"]
    shown = {p["pid"]: p for p in doc["gpus"][0]["gpu_process"]["points"]}
    streamed = {int(t["pid"]): fl for t, fl in stream.get("gpu_process", []) if t.get("gpu") == "0"}
    assert set(shown) == set(streamed) == {p["pid"] for p in stated}, name
    for p in stated:
        # A host process (or thread: /proc/TID answers too) may take the pid between the fixture's
        # look and the run (a test server beside this one): /proc's name then, so it must be live now.
        host_pid = p["pid"] in f["host_pids"] or os.path.exists(f"/proc/{p['pid']}")
        if not host_pid or shown[p["pid"]]["name"] == p["name"]:
            assert shown[p["pid"]]["name"] == p["name"] == streamed[p["pid"]].get("name"), f"{name}: pid {p['pid']}"
        assert shown[p["pid"]]["type"] == p["type"] == streamed[p["pid"]]["type"]
        mem = None if p["used_mib"] is None else p["used_mib"] * MIB
        assert shown[p["pid"]]["used_memory_bytes"] == mem == streamed[p["pid"]].get("used_memory_bytes")


@pytest.mark.parametrize("seen", ALL, indirect=True)
def test_sim_import_reports_every_class_and_what_it_could_not_read(seen):
    name, f, profile, _, report, _, _ = seen
    rows = {r["class"]: r for r in report["classes"]}
    want = {"identity", "memory", "power", "clocks", "clock-event reasons", "temperatures", "utilisation", "PCIe"}
    assert want | {"processes"} <= set(rows)
    assert ("MIG" in rows) == bool(f["mig_devices"])
    assert report["not_in_capture"] == profile["not_in_capture"]
    # What the capture says N/A is reported as such, never as read.
    assert set(rows["utilisation"]["n/a"]) == set(f["idle"]["util_na"])
    assert "BAR1 in use" in rows["memory"]["read"] and "active reasons" in rows["clock-event reasons"]["read"]
    if _stated(f.get("temp_target")) is None:
        assert "target" not in rows["temperatures"]["read"]


# -- edited captures: what no shared capture shows -----------------------------------------------

RTX2080 = "linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt"


def _edited(tmp_path, name: str, edit) -> str:
    """An edited copy of a shared capture, imported; the profile's path."""
    source = CAPTURES / name
    if not source.exists():
        pytest.skip(f"capture {name} not available")
    capture = tmp_path / name
    capture.write_text(edit(source.read_text(errors="replace")))
    from gpuagent.sim.capture_import import import_capture

    path = tmp_path / "edited.json"
    path.write_text(json.dumps(import_capture(capture)))
    return str(path)


def test_a_captured_zero_mhz_clock_is_reported_as_zero(tmp_path, invoke):
    from lineprotocol_parser import parse_line

    def park(text: str) -> str:  # the idle run (P8) with graphics and SM parked at 0 MHz
        head, sep, rest = text.partition(
            "    Clocks\n        Graphics                                       : 300 MHz\n"
        )
        assert sep, "the 2080 SUPER capture's idle Clocks block moved"
        rest = rest.replace(
            "        SM                                             : 300 MHz", "        SM  : 0 MHz", 1
        )
        return head + "    Clocks\n        Graphics                                       : 0 MHz\n" + rest

    path = _edited(tmp_path, RTX2080, park)
    doc = json.loads(invoke("inspect", "--json", "--simulate", path).stdout)
    clocks = doc["gpus"][0]["gpu_clocks"]
    assert (clocks["graphics_clock_mhz"], clocks["sm_clock_mhz"], clocks["memory_clock_mhz"]) == (0, 0, 405)
    ran = invoke("run", "--once", "--test", "--simulate", path)
    point = next(parse_line(line)[2] for line in ran.stdout.splitlines() if line.startswith("gpu_clocks,"))
    assert point["graphics_clock_mhz"] == 0 and point["sm_clock_mhz"] == 0


def test_processes_in_another_layout_are_reported_unread_not_none(tmp_path, invoke):
    def relayout(text: str) -> str:  # a layout the importer does not read (no "Process ID" lines)
        return text.replace(
            "        Process ID                        : 1696", "        PID                               : 1696"
        )

    source = CAPTURES / RTX2080
    if not source.exists():
        pytest.skip(f"capture {RTX2080} not available")
    capture = tmp_path / "relayout.txt"
    capture.write_text(relayout(source.read_text(errors="replace")))
    result = invoke("sim", "import", str(capture), "-o", str(tmp_path / "p.json"), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = {r["class"]: r for r in report["classes"]}
    assert rows["processes"]["read"] == [] and rows["processes"]["not stated"]
    assert any(n.startswith("processes") for n in report["not_in_capture"])
    # The text report says so too, in a few lines.
    text = invoke("sim", "import", str(capture), "-o", str(tmp_path / "p.json")).stderr
    assert "processes (a layout the importer does not read)" in text
    assert len(text.splitlines()) <= 16


def test_a_redacted_pci_device_id_is_no_plausible_number(tmp_path, invoke):
    def redact(text: str) -> str:
        return text.replace(": 0x1E8110DE", ": [REDACTED]")

    path = _edited(tmp_path, RTX2080, redact)
    profile = json.loads(Path(path).read_text())
    lacking = profile["not_in_capture"]
    assert "PCI device id" in lacking
    assert any(n.startswith("memory bus width") and "not stated" in n for n in lacking)
    doc = json.loads(invoke("inspect", "--json", "--simulate", path).stdout)
    gpu = doc["gpus"][0]
    assert gpu["pci_device_id"] is None  # not 0x000010DE
    assert gpu["not_in_capture"] == lacking
    text = invoke("inspect", "--simulate", path).stdout
    assert "Not in the capture" in text and "PCI device id" in text


def test_inspect_text_lists_the_processes_with_their_names(invoke, tmp_path):
    name = "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt"
    if not (CAPTURES / name).exists():
        pytest.skip(f"capture {name} not available")

    stated = _facts(name)["idle"]["processes"]
    alive = {p["pid"] for p in stated if os.path.exists(f"/proc/{p['pid']}")}
    path = tmp_path / "p.json"
    assert invoke("sim", "import", str(CAPTURES / name), "-o", str(path)).exit_code == 0
    text = invoke("inspect", "--simulate", str(path)).stdout
    alive |= {
        p["pid"] for p in stated if os.path.exists(f"/proc/{p['pid']}")
    }  # a host process of that pid: /proc's name
    for p in stated:
        line = f"Process {p['pid']}  {p['type']}  "
        assert line in text
        if p["pid"] not in alive:
            assert f"{line}{p['name']}  {p['used_mib']} MiB" in text
