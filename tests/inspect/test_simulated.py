"""`gpuagent inspect` on simulated fleets: the facts, the human view, --json, --gpu, --line-protocol."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import jsonschema
import pynvml
import pytest
from captures import CAPTURES

from gpuagent.commands import facts as facts_mod
from gpuagent.commands.inspect import WIDTH, render_text
from gpuagent.gpus.gpu import as_str
from gpuagent.gpus.nvml import NvmlSession
from gpuagent.plugin_host import load_host
from gpuagent.sim.profile import BUILTIN_NAMES

HERE = Path(__file__).parent
MIXED = "l40s:2,rtx4090:2,h100-sxm:4"
UPDATE = bool(os.environ.get("GPUAGENT_UPDATE_SNAPSHOTS"))


def gather(session, **kwargs):
    """The facts as inspect reads them: through the built-in plugins' collectors."""
    return facts_mod.gather(session, plugins=load_host(entry_points=False), **kwargs)


def session_for(machine, spec: str) -> NvmlSession:
    """The NvmlSession open_nvml would give, for a machine the simulated_fleet fixture installed."""
    session = NvmlSession(gpus=machine.gpus, simulated=True, machine=machine, spec=spec)
    session.driver_version = as_str(pynvml.nvmlSystemGetDriverVersion())
    session.nvml_version = as_str(pynvml.nvmlSystemGetNVMLVersion())
    session.cuda_driver_version = pynvml.nvmlSystemGetCudaDriverVersion_v2()
    return session


@pytest.fixture
def mixed_facts(simulated_fleet):
    machine = simulated_fleet(MIXED, seed=7)
    return gather(session_for(machine, MIXED), hostname="testhost")


def blocks(text: str) -> dict[int, str]:
    """GPU index -> its block of the human view."""
    parts = re.split(r"^(?=GPU \d+  )", text, flags=re.MULTILINE)
    return {int(p.split()[1]): p for p in parts if p.startswith("GPU ")}


def matrix(text: str) -> dict[tuple[int, int], str]:
    """(row GPU, column GPU) -> cell of the P2P matrix, read back from the text."""
    lines = text.split("P2P matrix")[1].splitlines()[1:]
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"GPU\d+", header)]
    columns = [int(header[s:].split()[0][3:]) for s in starts]
    cells = {}
    for line in lines[1:]:
        if not re.match(r"GPU\d+ ", line):
            break
        row = int(line.split()[0][3:])
        for col, start, end in zip(columns, starts, [*starts[1:], None], strict=True):
            cells[(row, col)] = line[start:end].strip()
    return cells


# -- the mixed fleet of the issue -------------------------------------------------


def test_mixed_fleet_names_all_eight_cards_with_their_l2(mixed_facts):
    text = render_text(mixed_facts)
    by_gpu = blocks(text)
    assert sorted(by_gpu) == list(range(8))
    expected = ["NVIDIA L40S"] * 2 + ["NVIDIA GeForce RTX 4090"] * 2 + ["NVIDIA H100 80GB HBM3"] * 4
    l2 = ["96 MiB"] * 2 + ["72 MiB"] * 2 + ["50 MiB"] * 4  # MiB, as probe and compare
    for index, (name, size) in enumerate(zip(expected, l2, strict=True)):
        block = by_gpu[index]
        assert block.startswith(f"GPU {index}  {name}  "), block
        assert re.search(rf"L2 cache\s+{size}\b", block), block
    assert [g["gpu_memory"]["l2_cache_bytes"] >> 20 for g in mixed_facts["gpus"]] == [96, 96, 72, 72, 50, 50, 50, 50]
    assert max(len(line) for line in text.splitlines()) <= WIDTH


def test_mixed_fleet_p2p_matrix(mixed_facts):
    cells = matrix(render_text(mixed_facts))
    assert len(cells) == 64
    # RTX 4090 pair: no P2P at all.
    assert cells[(2, 3)].endswith(" -") and cells[(3, 2)].endswith(" -")
    # L40S pair: P2P over PCIe (read and write, no NVLink).
    assert cells[(0, 1)].split()[1] == "RW" and not cells[(0, 1)].startswith("NV")
    # H100 SXM: NVLink between every pair.
    for a in range(4, 8):
        for b in range(4, 8):
            if a != b:
                assert re.fullmatch(r"NV\d+ R?W?N", cells[(a, b)]), cells[(a, b)]
    for i in range(8):
        assert cells[(i, i)] == "X"
    kinds = {(p["gpu"], p["peer_gpu"]): p["p2p"] for p in mixed_facts["p2p"]}
    assert kinds[(2, 3)] == "none" and kinds[(0, 1)] == "pcie" and kinds[(4, 5)] == "nvlink"
    assert kinds[(0, 4)] == "none"  # different models, different sockets


def test_mixed_fleet_peak_bandwidth_and_bus_width(mixed_facts):
    peak = [round(g["gpu_memory"]["dram_peak_gbps"]) for g in mixed_facts["gpus"]]
    assert peak == [864] * 2 + [1008] * 2 + [3352] * 4
    assert [g["gpu_memory"]["bus_width_bits"] for g in mixed_facts["gpus"]] == [384] * 4 + [5120] * 4


def pinned(doc: dict) -> dict:
    """The facts with every load-model reading replaced by a fixed value: the snapshot is about layout."""
    for gpu in doc["gpus"]:
        if gpu["lost"]:
            continue
        mem = gpu["gpu_memory"]
        mem["fb_used_bytes"] = mem["fb_total_bytes"] // 4
        mem["fb_free_bytes"] = mem["fb_total_bytes"] - mem["fb_used_bytes"]
        clocks = gpu["gpu_clocks"]
        clocks["sm_clock_mhz"] = clocks["max_sm_clock_mhz"]
        clocks["memory_clock_mhz"] = clocks["max_memory_clock_mhz"]
        clocks["pstate"] = 0
        for reason in facts_mod.REASON_WORDS:
            if reason in clocks:
                clocks[reason] = reason == "sw_power_cap" and bool(gpu["index"] % 2)
        gpu["gpu_power"]["power_w"] = 123.4
        gpu["gpu_power"]["temperature_c"] = 55
        gpu["gpu_pcie"]["link_gen"] = gpu["gpu_pcie"]["max_link_gen"]
        # The simulated processes are this test's own (pid, name and memory vary by run).
        for n, process in enumerate(gpu["gpu_process"]["points"]):
            process.update(pid=4200 + n, name="python3", used_memory_bytes=8 << 30)
    return doc


def test_mixed_fleet_snapshot(mixed_facts):
    """The layout of the human view on the issue's fleet (load-model readings pinned)."""
    text = render_text(pinned(mixed_facts))
    path = HERE / "snapshots" / "mixed_fleet.txt"
    if UPDATE or not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        if not UPDATE:
            pytest.fail(f"snapshot {path} did not exist; written now, check it and rerun")
    assert text == path.read_text(), f"layout changed; if intended, rerun with GPUAGENT_UPDATE_SNAPSHOTS=1 ({path})"


def test_same_seed_same_time_same_facts(simulated_fleet):
    from gpuagent.sim import ManualClock

    runs = []
    for _ in range(2):
        clock = ManualClock()
        machine = simulated_fleet("l40s:1,h100-sxm:1", seed=3, scenario="training", clock=clock)
        clock.advance(30)
        runs.append(gather(session_for(machine, "x"), hostname="h"))
    assert runs[0] == runs[1]
    assert runs[0]["gpus"][0]["gpu_power"]["power_w"] > 100  # under load, not idle


# -- MIG, vGPU, a lost GPU -------------------------------------------------------


def test_mig_instances_listed(simulated_fleet):
    machine = simulated_fleet("h100-sxm-mig:1")
    doc = gather(session_for(machine, "h100-sxm-mig:1"), hostname="h")
    jsonschema.validate(doc, facts_mod.schema())
    mig = doc["gpus"][0]["gpu_mig"]
    assert mig["mig_mode_current"] is True and len(mig["points"]) == 2 == mig["mig_devices"]
    assert all(i["mig_profile"] and i["mig_profile"].startswith("3g.") for i in mig["points"])
    text = render_text(doc)
    assert re.search(r"MIG\s+on, 2 instances", text)
    assert len(re.findall(r"^  MIG \d: 3g\.", text, flags=re.MULTILINE)) == 2


def test_vgpus_listed(simulated_fleet):
    machine = simulated_fleet("l40s-vgpu:1")
    doc = gather(session_for(machine, "l40s-vgpu:1"), hostname="h")
    jsonschema.validate(doc, facts_mod.schema())
    virt = doc["gpus"][0]["gpu_vgpu"]
    assert virt["virtualization_mode"] == "host_vgpu" and len(virt["points"]) == 2
    text = render_text(doc)
    assert re.search(r"Virtualisation\s+vGPU host.*, 2 vGPUs", text)
    assert len(re.findall(r"^  vGPU \d+: ", text, flags=re.MULTILINE)) == 2


def test_gpu_lost_in_the_middle_shows_as_lost_and_the_rest_print(simulated_fleet):
    machine = simulated_fleet("l40s:3")
    # GPU 1 answers its identity and memory, then falls off the bus when asked for power.
    machine.force("nvmlDeviceGetPowerUsage", "GPU_IS_LOST", gpu=1)
    doc = gather(session_for(machine, "l40s:3"), hostname="h")
    jsonschema.validate(doc, facts_mod.schema())
    assert [g["lost"] for g in doc["gpus"]] == [False, True, False]
    assert "gpu_memory" not in doc["gpus"][1]
    assert {(p["gpu"], p["peer_gpu"]) for p in doc["p2p"]} == {(0, 2), (2, 0)}
    text = render_text(doc)
    by_gpu = blocks(text)
    assert "LOST" in by_gpu[1].splitlines()[0]
    assert "L2 cache" in by_gpu[0] and "L2 cache" in by_gpu[2]


def test_gpu_lost_from_the_cli(invoke):
    result = invoke("inspect", "--simulate", "l40s:3@force=nvmlDeviceGetPowerUsage:GPU_IS_LOST:2")
    assert result.exit_code == 0, result.output
    by_gpu = blocks(result.stdout)
    assert "LOST" in by_gpu[2].splitlines()[0]
    assert "96 MiB" in by_gpu[0] and "96 MiB" in by_gpu[1]


# -- the command: --json, --gpu, --line-protocol -----------------------------------


def test_builtin_profiles_are_the_ones_sim_list_shows(invoke):
    result = invoke("sim", "list", "--json")
    assert result.exit_code == 0, result.output
    assert [p["name"] for p in json.loads(result.stdout)["profiles"]] == list(BUILTIN_NAMES)


@pytest.mark.parametrize("name", BUILTIN_NAMES)
@pytest.mark.slow
def test_json_validates_for_every_builtin_profile(invoke, name):
    result = invoke("inspect", "--simulate", f"{name}:2", "--json")
    assert result.exit_code == 0, f"{name}: {result.output}"
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, facts_mod.schema())
    assert doc["host"]["simulate_spec"] == f"{name}:2"
    assert len(doc["gpus"]) == 2 and not any(g["lost"] for g in doc["gpus"])
    assert doc["gpus"][0]["gpu_memory"]["l2_cache_bytes"], f"{name}: no L2 size"
    assert len(doc["p2p"]) == 2
    assert any(p["name"] == "host" and p["status"] == "loaded" for p in doc["plugins"])


@pytest.mark.slow
def test_json_validates_for_profiles_imported_from_captures(invoke, tmp_path):
    if not CAPTURES.is_dir():
        pytest.skip(f"real nvidia-smi captures not found at {CAPTURES} (they live in ../shared/captures)")
    captures = sorted(p for p in CAPTURES.iterdir() if p.suffix in (".txt", ".xml"))
    if not captures:
        pytest.skip(f"no .txt/.xml capture in {CAPTURES}")
    schema = facts_mod.schema()
    for capture in captures:
        profile = tmp_path / f"{capture.stem}.json"
        imported = invoke("sim", "import", str(capture), "-o", str(profile))
        assert imported.exit_code == 0, f"{capture.name}: {imported.output}"
        result = invoke("inspect", "--simulate", f"{profile}:2", "--json")
        assert result.exit_code == 0, f"{capture.name}: {result.output}"
        doc = json.loads(result.stdout)
        jsonschema.validate(doc, schema)
        assert len(doc["gpus"]) == 2, capture.name


def test_gpu_by_index_and_uuid(invoke):
    full = json.loads(invoke("inspect", "--simulate", "l40s:1,h100-sxm:2", "--json").stdout)
    uuid = full["gpus"][2]["uuid"]
    by_index = json.loads(invoke("inspect", "--simulate", "l40s:1,h100-sxm:2", "--json", "--gpu", "1").stdout)
    assert [g["index"] for g in by_index["gpus"]] == [1]
    assert by_index["host"]["gpu_count"] == 3
    assert {(p["gpu"], p["peer_gpu"]) for p in by_index["p2p"]} == {(1, 0), (1, 2)}
    by_uuid = invoke("inspect", "--simulate", "l40s:1,h100-sxm:2", "--gpu", uuid.lower())
    assert by_uuid.exit_code == 0, by_uuid.output
    assert sorted(blocks(by_uuid.stdout)) == [2]
    assert "3 GPUs, 1 shown" in by_uuid.stdout


def test_bad_gpu_is_one_line_listing_the_valid_ones(invoke):
    result = invoke("inspect", "--simulate", "l40s:2", "--gpu", "5")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "--gpu '5'" in lines[0] and "valid: 0 (GPU-" in lines[0] and ", 1 (GPU-" in lines[0]
    assert result.stdout == ""


def _series(text: str) -> set[str]:
    """measurement,tags of each line-protocol line (field values and timestamps move)."""
    return {line.split(" ", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}


@pytest.mark.slow
def test_line_protocol_is_run_once_test(invoke):
    inspected = invoke("inspect", "--simulate", "l40s:2", "--seed", "1", "--line-protocol")
    assert inspected.exit_code == 0, inspected.output
    ran = invoke("run", "--once", "--test", "--simulate", "l40s:2", "--seed", "1")
    assert ran.exit_code == 0, ran.output
    assert _series(inspected.stdout) == _series(ran.stdout)
    assert any(s.startswith("gpu_") for s in _series(inspected.stdout))


def test_line_protocol_narrowed_to_one_gpu(invoke):
    result = invoke("inspect", "--simulate", "l40s:2", "--line-protocol", "--gpu", "1")
    assert result.exit_code == 0, result.output
    gpu_lines = [line for line in result.stdout.splitlines() if line.startswith("gpu_")]
    assert gpu_lines and all(",gpu=1," in line for line in gpu_lines)


def test_json_and_line_protocol_are_exclusive(invoke):
    result = invoke("inspect", "--simulate", "l40s:1", "--json", "--line-protocol")
    assert result.exit_code == 2


def test_plugins_that_failed_to_load_are_listed_last(invoke, tmp_path):
    (tmp_path / "broken_probe.py").write_text("import gpuagent_no_such_module\n")
    result = invoke("inspect", "--simulate", "l40s:1", "--plugins-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    tail = result.stdout.split("Plugins that failed to load")[1]
    assert "broken_probe" in tail and "ModuleNotFoundError" in tail
    doc = json.loads(invoke("inspect", "--simulate", "l40s:1", "--plugins-dir", str(tmp_path), "--json").stdout)
    jsonschema.validate(doc, facts_mod.schema())
    assert [p["name"] for p in doc["plugins"] if p["status"] == "failed"] == ["broken_probe"]


# -- `gpuagent probe l2 --send` results, read back ----------------------------------


def test_recent_l2_probe_result_gets_a_line(invoke, influxdb_v1, tmp_path):
    import time

    spec = "l40s:2"
    uuids = [g["uuid"] for g in json.loads(invoke("inspect", "--simulate", spec, "--json").stdout)["gpus"]]
    t0 = time.time_ns() - 3600 * 10**9
    old = time.time_ns() - 40 * 86400 * 10**9
    tags = f"gpu=0,model=NVIDIA\\ L40S,uuid={uuids[0]}"
    influxdb_v1.write(
        [
            # An older run, and the newest one; then a curve point (no summary fields) after it.
            f'gpu_l2_probe,{tags} l2_effective_bytes=60000000i,l2_bw_gbps=1.0,dram_bw_gbps=1.0,l2_dram_ratio=1.0,knee_found=true,method="simulated" {t0 - 10**9}',
            f'gpu_l2_probe,{tags} l2_effective_bytes=100663296i,l2_bw_gbps=2500.5,dram_bw_gbps=780.2,l2_dram_ratio=3.205,knee_found=true,method="simulated" {t0}',
            f"gpu_l2_probe,{tags} working_set_bytes=1048576i,bandwidth_gbps=2600.0,step=0i {t0 + 10**6}",
            # GPU 1: only a run older than 30 days, which is not "recent".
            f"gpu_l2_probe,gpu=1,uuid={uuids[1]} l2_effective_bytes=1i,knee_found=true {old}",
        ]
    )
    config = tmp_path / "gpuagent.toml"
    config.write_text(f'[sinks.influxdb]\nurl = "{influxdb_v1.url}"\napi = "v1"\ndatabase = "{influxdb_v1.database}"\n')

    doc = json.loads(invoke("inspect", "--simulate", spec, "--json", "--config", str(config)).stdout)
    jsonschema.validate(doc, facts_mod.schema())
    probe = doc["gpus"][0]["l2_probe"]
    assert probe["l2_effective_bytes"] == 100663296 and probe["l2_dram_ratio"] == pytest.approx(3.205)
    assert probe["time"] == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 / 1e9))
    assert doc["gpus"][1]["l2_probe"] is None

    text = invoke("inspect", "--simulate", spec, "--config", str(config)).stdout
    by_gpu = blocks(text)
    assert re.search(r"L2 probe \S+ \(simulated\): 96 MiB effective; L2 2500 GB/s, DRAM 780 GB/s \(3\.2x\)", by_gpu[0])
    assert "L2 probe" not in by_gpu[1]


def test_unreachable_probe_database_is_no_line_and_no_error(invoke, tmp_path):
    import socket

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "gpuagent.toml"
    config.write_text(f'[sinks.influxdb]\nurl = "http://127.0.0.1:{port}"\napi = "v1"\ndatabase = "gpuagent"\n')
    result = invoke("inspect", "--simulate", "l40s:1", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert "L2 probe" not in result.stdout and "GPU 0  NVIDIA L40S" in result.stdout
