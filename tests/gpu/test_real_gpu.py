"""On a real NVIDIA GPU: NVML opens, identity tags, every built-in collector, inspect --json, the L2 probe.

`pytest -m gpu` (scripts/device-check.sh runs it on the lent H200). Without a
driver every test here skips and says why.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys

import pytest

from gpuagent.plugin_host import PluginHost
from gpuagent.testing import RecordingAccumulator

pytestmark = pytest.mark.gpu

BUILTIN_COLLECTORS = sorted(PluginHost(load_entry_points=False).load().collectors)
# Every card has these readings; the others (MIG, vGPU, NVLink, P2P, processes) may rightly be empty.
MUST_REPORT = {"clocks", "power", "memory"}
IDENTITY = {"gpu", "uuid", "model", "pci_bus_id", "arch"}
UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
BUS_ID = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")
SENTINELS = {0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFFFFFFFFFF, 0x7FFFFFFF, 0x7FFFFFFFFFFFFFFF}
# Fields with these units are never negative; percentages stay within 0..100.
NON_NEGATIVE = ("_bytes", "_mhz", "_w", "_j", "_c", "_pct", "_total", "_gbps", "_count")


def run_gpuagent(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuagent", *args], capture_output=True, text=True, timeout=timeout)


def test_real_nvml_opens(real_session, real_gpus):
    assert not real_session.simulated
    assert len(real_session.gpus) == real_gpus
    assert re.match(r"^\d+\.\d+", real_session.driver_version or ""), real_session.driver_version
    assert real_session.nvml_version
    assert (real_session.cuda_driver_version or 0) >= 11000, real_session.cuda_driver_version


def test_every_gpu_has_its_identity_tags(real_session):
    for gpu in real_session.gpus:
        tags = gpu.tags
        assert set(tags) == IDENTITY, tags
        assert tags["gpu"] == str(gpu.index)
        assert UUID.match(tags["uuid"]), tags
        assert tags["model"].startswith("NVIDIA"), tags
        assert BUS_ID.match(tags["pci_bus_id"]), tags
        assert tags["arch"] != "unknown", tags
    assert len({g.uuid for g in real_session.gpus}) == len(real_session.gpus)
    assert len({g.pci_bus_id for g in real_session.gpus}) == len(real_session.gpus)


def test_identity_tags_match_nvidia_smi(real_session):
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("no nvidia-smi on PATH to compare with")
    out = subprocess.run(
        [smi, "--query-gpu=index,uuid,pci.bus_id,name", "--format=csv,noheader"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    theirs = {}
    for line in out.strip().splitlines():
        index, uuid, bus_id, name = (part.strip() for part in line.split(",", 3))
        theirs[int(index)] = (uuid, bus_id.upper(), name)
    ours = {g.index: (g.uuid, g.pci_bus_id.upper(), g.name) for g in real_session.gpus}
    assert ours == theirs


@pytest.fixture(scope="module")
def real_agent(real_gpus, tmp_path_factory):
    """An agent on the real GPUs with every built-in collector enabled, writing nowhere."""
    from gpuagent.service.runtime import Options, build

    tmp = tmp_path_factory.mktemp("real-agent")
    text = f'[agent]\nstate_dir = "{tmp}"\n[sinks.file]\npath = "/dev/null"\n'
    text += "".join(f"[collectors.{name}]\nenabled = true\n" for name in BUILTIN_COLLECTORS)
    (tmp / "gpuagent.toml").write_text(text)
    agent = build(Options(config_path=tmp / "gpuagent.toml"))
    assert not agent.nvml.simulated
    yield agent
    agent.close(flush_timeout=1)


def bad_fields(point) -> list[str]:
    """Fields of a point that hold an NVML sentinel or an impossible value for their unit."""
    bad = []
    for key, value in point.fields.items():
        if isinstance(value, bool) or isinstance(value, str):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            bad.append(f"{key}={value}")
        elif isinstance(value, int) and value in SENTINELS:
            bad.append(f"{key}={value:#x} (NVML's not-available value)")
        elif key.endswith(NON_NEGATIVE) and value < 0:
            bad.append(f"{key}={value} (negative)")
        elif key.endswith("_pct") and value > 100.5:
            bad.append(f"{key}={value} (over 100%)")
        elif key.endswith("temperature_c") and not 0 < value < 150:
            bad.append(f"{key}={value} (not a temperature)")
        elif key == "power_w" and not 0 < value < 2000:
            bad.append(f"{key}={value} (not a board power in watts)")
    return bad


@pytest.mark.parametrize("name", BUILTIN_COLLECTORS)
def test_each_builtin_collector_collects_cleanly(real_agent, name):
    collector = next((c for c in real_agent.collectors if c.name == name), None)
    assert collector is not None, f"{name} was enabled but not built"
    acc = RecordingAccumulator(real_agent.context.default_tags)
    # Twice: rates and deltas (energy, PCIe, GPM) need a previous sample; raising fails the test.
    collector.collect(acc)
    acc.clear()
    collector.collect(acc)
    if name in MUST_REPORT:
        assert acc.points, f"{name} reported nothing on a real GPU"
    uuids = {g.uuid for g in real_agent.context.gpus}
    problems = []
    for point in acc.points:
        if "uuid" in point.tags:
            missing = IDENTITY - set(point.tags)
            if missing:
                problems.append(f"{point.measurement}: identity tags missing {sorted(missing)}")
            if point.tags["uuid"] not in uuids:
                problems.append(f"{point.measurement}: uuid {point.tags['uuid']} is no GPU of NVML's")
        problems.extend(f"{point.measurement} {point.tags.get('gpu', '')}: {b}" for b in bad_fields(point))
    assert not problems, "\n".join(problems)


def test_inspect_json_validates_against_the_shipped_schema(real_gpus):
    jsonschema = pytest.importorskip("jsonschema")
    from gpuagent.commands import facts

    proc = run_gpuagent("inspect", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, facts.schema())
    assert len(doc["gpus"]) == real_gpus


def _gpu_array_module() -> str | None:
    for module in ("cupy", "torch"):
        try:
            __import__(module)
            return module
        except Exception:  # ImportError, or a CUDA build that does not match the driver
            continue
    return None


def test_l2_probe_runs_on_the_gpu(real_session):
    module = _gpu_array_module()
    if module is None:
        pytest.skip("neither CuPy nor PyTorch is importable (pip install cupy-cuda12x or torch)")
    proc = subprocess.run(
        [sys.executable, "-m", "gpuagent.probe", "--json", "--steps", "8", "--rounds", "3", "--max-util", "100"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["method"] in ("cupy", "torch"), doc["method"]
    assert doc["gpu"]["uuid"] == real_session.gpus[0].uuid
    assert len(doc["sizes"]) == len(doc["bandwidth_gbps"]) >= 8
    # Far above any CPU, far below any GPU's L2: GB/s a real GPU read makes.
    assert all(50 < bw < 100_000 for bw in doc["bandwidth_gbps"]), doc["bandwidth_gbps"]
    assert doc["reported_cache_bytes"].get("L2", 0) >= 1 << 20, doc["reported_cache_bytes"]
