"""scripts/device-check.sh without a GPU: it runs to the end, writes its files, and says what it skipped.

The script is told to behave as on a machine without a driver
(GPUAGENT_DEVICE_CHECK_NO_GPU=1), so this test is the same here and on a GPU
machine; the GPU steps themselves are exercised by running it there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "device-check.sh"
GPU_STEPS = ("nvidia-smi-q", "inspect", "sim-record", "bench-cycle", "probe-l2")
# Every test reads one run of scripts/device-check.sh (a few seconds, the bench included).
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def no_gpu_run(tmp_path_factory):
    if shutil.which("bash") is None or shutil.which("timeout") is None:
        pytest.skip("needs bash and coreutils' timeout")
    tmp = tmp_path_factory.mktemp("device-check")
    (tmp / "wheels").mkdir()
    env = {
        **os.environ,
        "OUT": str(tmp / "out"),
        "PYTHON": sys.executable,
        "WHEELS": str(tmp / "wheels"),  # none: the packages of this environment are used
        "DEVICE_SITE": str(tmp / "site"),
        "GPUAGENT_DEVICE_CHECK_NO_GPU": "1",
    }
    env.pop("GPUAGENT_CONFIG", None)
    proc = subprocess.run(["bash", str(SCRIPT)], cwd=tmp, env=env, capture_output=True, text=True, timeout=240)
    return proc, tmp / "out"


def summary_rows(text: str) -> dict[str, tuple[str, str]]:
    """step -> (status, note) from summary.log."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^(\S+)\s+(ok|FAILED|skipped)\s+[\d.]+s\s{2}(.*)$", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


def test_runs_to_the_end_and_writes_flat_files(no_gpu_run):
    proc, out = no_gpu_run
    assert proc.returncode == 0, proc.stderr
    files = sorted(p.name for p in out.iterdir())
    assert {"summary.log", "details.log", "bench.json", "pytest-gpu.txt"} <= set(files), files
    # What the device tool brings back: at most 8 plain files, named in letters, digits, . _ -
    assert len(files) <= 8, files
    assert all((out / f).is_file() and re.fullmatch(r"[A-Za-z0-9._-]+", f) for f in files), files


def test_summary_says_which_steps_were_skipped_for_want_of_a_driver(no_gpu_run):
    _, out = no_gpu_run
    text = (out / "summary.log").read_text()
    rows = summary_rows(text)
    assert rows["install"][0] == "ok", text
    for step in GPU_STEPS:
        status, note = rows[step]
        assert status == "skipped", (step, text)
        assert "no NVIDIA driver" in note, (step, text)
    assert not [s for s, (status, _) in rows.items() if status == "FAILED"], text
    assert re.search(r"^done in \d+s; 0 step\(s\) failed", text, re.MULTILINE), text


def test_bench_row_and_gpu_tests_say_why_nothing_was_measured(no_gpu_run):
    _, out = no_gpu_run
    bench = json.loads((out / "bench.json").read_text())
    (row,) = bench["results"]
    assert row["name"] == "nvidia_smi"
    assert row["holds"] is None and row["detail"]["reason"], row
    pytest_out = (out / "pytest-gpu.txt").read_text()
    if shutil.which("nvidia-smi") is None:  # on a GPU machine the tests themselves see its driver
        assert re.search(r"\d+ skipped", pytest_out), pytest_out
        assert "no NVIDIA driver" in pytest_out and " passed" not in pytest_out, pytest_out
