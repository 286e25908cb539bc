"""gpuagent probe l2 from the command line (CPU path here; simulated fleet where the simulator is present)."""

import json
import math
import subprocess
import sys

import pytest

from gpuagent.probe.cli import parse_bytes

FAST = ("--steps", "10", "--rounds", "2")


def nvml_present():
    import pynvml

    try:
        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


def needs_sim():
    from gpuagent import sim

    if not hasattr(sim, "install"):
        pytest.skip("the simulator (gpuagent.sim.install) is not built yet")


def test_cpu_json_is_one_document(invoke):
    res = invoke("probe", "l2", "--cpu", "--json", *FAST)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["method"] == "numpy-cpu" and doc["gpu"] is None
    assert len(doc["sizes"]) == len(doc["bandwidth_gbps"]) == 10
    assert all(b > 0 for b in doc["bandwidth_gbps"])
    assert doc["reported_source"] == "sysfs" and "L2" in doc["reported_cache_bytes"]
    for key in ("knee_bytes", "bw_below_gbps", "bw_above_gbps", "ratio", "knees", "device"):
        assert key in doc
    if doc["knees"]:
        assert doc["knee_bytes"] == doc["knees"][-1]["bytes"]


def test_cpu_table(invoke):
    res = invoke("probe", "l2", "--cpu", *FAST)
    assert res.exit_code == 0, res.output
    assert "working set" in res.stdout and "reported (sysfs)" in res.stdout
    assert "numpy-cpu" in res.stdout


def test_send_refuses_a_cpu_result(invoke):
    res = invoke("probe", "l2", "--cpu", "--send", *FAST)
    assert res.exit_code == 1
    assert res.stderr.strip().count("\n") == 0 and "--send writes GPU results only" in res.stderr


@pytest.mark.parametrize("args", [("--max-bytes", "lots"), ("--steps", "1"), ("--cpu", "--simulate", "l40s")])
def test_usage_errors_exit_2(invoke, args):
    res = invoke("probe", "l2", *args)
    assert res.exit_code == 2


def test_min_above_max_is_one_line(invoke):
    res = invoke("probe", "l2", "--cpu", "--min-bytes", "8MiB", "--max-bytes", "1MiB")
    assert res.exit_code == 1 and "max bytes must be larger" in res.stderr


def test_without_a_driver_the_cpu_is_probed(invoke):
    if nvml_present():
        pytest.skip("an NVIDIA driver is present: `probe l2` would load the GPU")
    res = invoke("probe", "l2", "--json", *FAST)
    assert res.exit_code == 0
    assert json.loads(res.stdout)["method"] == "numpy-cpu"


def test_python_m_entry_point():
    out = subprocess.run(
        [sys.executable, "-m", "gpuagent.probe", "--cpu", "--json", *FAST],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["method"] == "numpy-cpu"
    bad = subprocess.run(
        [sys.executable, "-m", "gpuagent.probe", "--cpu", "--send", *FAST],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1 and bad.stderr.startswith("gpuagent: error: --send")


@pytest.mark.parametrize(
    "text,value",
    [
        ("4096", 4096),
        ("64KiB", 64 << 10),
        ("1M", 1 << 20),
        ("96MB", 96_000_000),
        ("1.5GiB", 3 << 29),
    ],
)
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


# --- simulated fleet: NVML identity and utilisation from the simulator, a modelled curve ---------


def test_simulated_gpu_curve_and_knee(invoke):
    needs_sim()
    res = invoke("probe", "l2", "--simulate", "l40s:1,h200:1", "--gpu", "1", "--json", "--max-util", "100")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["method"] == "simulated" and doc["gpu"]["index"] == 1 and "H200" in doc["gpu"]["model"]
    assert doc["sizes"][0] == 1 << 20 and len(doc["sizes"]) == 24
    step = math.log(doc["sizes"][1] / doc["sizes"][0])
    assert abs(math.log(doc["knee_bytes"] / doc["reported_cache_bytes"]["L2"])) <= step


def test_simulated_no_such_gpu(invoke):
    needs_sim()
    res = invoke("probe", "l2", "--simulate", "l40s:2", "--gpu", "2")
    assert res.exit_code == 1 and "--gpu 2: no such GPU" in res.stderr


def test_simulated_send_through_file_sink(invoke, tmp_path):
    needs_sim()
    out = tmp_path / "points.lp"
    cfg = tmp_path / "gpuagent.toml"
    cfg.write_text(f'[agent]\nhostname = "probe-host"\n\n[sinks.file]\npath = "{out}"\n')
    res = invoke(
        "probe",
        "l2",
        "--simulate",
        "a100-sxm4",
        "--send",
        "--config",
        str(cfg),
        "--json",
        "--max-util",
        "100",
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    expected = 1 + len(doc["knees"]) + len(doc["sizes"])  # summary, one per knee, the curve
    assert doc["points_sent"] == expected
    lines = out.read_text().splitlines()
    assert len(lines) == expected and all(line.startswith("gpu_l2_probe,") for line in lines)
    assert sum(",knee=" in line for line in lines) == len(doc["knees"]) >= 1
    assert all("host=probe-host" in line for line in lines)
    assert "l2_effective_bytes=" in lines[0]


def test_simulated_busy_gpu_is_refused(invoke):
    needs_sim()
    # The simulated load model keeps its GPUs working; with --max-util 0 any load refuses.
    res = invoke("probe", "l2", "--simulate", "h100-sxm", "--max-util", "0", "--json")
    assert res.exit_code == 1, res.output
    assert "is busy: utilisation" in res.stderr and res.stdout == ""
