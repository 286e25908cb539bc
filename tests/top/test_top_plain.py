"""`gpuagent top` off a terminal: `--once`, a frame per refresh in a pipe, bad input in one line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from conftest import REPO, run_cli

# Each test runs `gpuagent top` in a subprocess, some over refreshes.
pytestmark = pytest.mark.slow

SPEC = "l40s:2,h100-sxm-mig:1,rtx4090:1"


def test_once_in_a_pipe_is_plain_text_100_columns_wide():
    result = run_cli("top", "--once", "--simulate", SPEC)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "\x1b" not in result.stdout and all(len(line) <= 100 and line == line.rstrip() for line in lines)
    rows = [line for line in lines if line[:2] in ("0 ", "1 ", "2 ", "3 ")]
    assert [r[0] for r in rows[:4]] == ["0", "1", "2", "3"]
    assert any("└ MIG0 3g.40gb" in line for line in lines)


def test_a_lost_gpu_keeps_its_row_and_says_lost():
    result = run_cli("top", "--once", "--simulate", "l40s:2@lost=1:0s")
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("1 "))
    assert row.rstrip().endswith("lost")


def test_a_pipe_gets_a_frame_per_refresh_and_ctrl_c_exits_130(tmp_path):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    env.pop("GPUAGENT_CONFIG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "top", "--simulate", "l40s:1", "--interval", "1s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    frames = 0
    try:
        for line in proc.stdout:
            frames += line.startswith("GPU Model")  # a frame's GPU table (no key line off a terminal)
            assert not line.startswith("q quit")
            if frames == 2:
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert frames == 2
    assert proc.returncode == 130 and "Traceback" not in err


def test_bad_input_is_one_line():
    result = run_cli("top", "--interval", "0s", "--simulate", "l40s:1")
    assert (
        result.returncode == 1
        and result.stderr.strip() == "gpuagent: error: --interval: expected a positive duration, got '0s'"
    )
    result = run_cli("top", "--fleet", "--once", "--url", "http://127.0.0.1:1", "--database", "x")
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "cannot reach InfluxDB" in result.stderr
    result = run_cli("top", "--fleet", "--simulate", "l40s:1")
    assert result.returncode == 2 and "--simulate is for a node" in result.stderr


def test_vgpu_instances_are_listed_under_their_gpu():
    result = run_cli("top", "--once", "--simulate", "rtx4090:1,l40s-vgpu:1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("1 "))
    assert lines[at].split()[1] == "L40S"
    assert [line.split()[:2] for line in lines[at + 1 : at + 3]] == [["└", "vGPU"]] * 2
    assert all("L40S-24Q" in line and re.search(r"\d+\.\d/24", line) for line in lines[at + 1 : at + 3])
