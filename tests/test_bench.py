"""`python -m bench --quick --json` runs and reports each figure with its goal and verdict."""

import json
import subprocess
import sys

import pytest

from conftest import REPO

# `python -m bench --quick` in a subprocess: the whole quick benchmark.
pytestmark = pytest.mark.slow


def test_quick_bench_json_has_figure_goal_and_verdict():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--json",
            "--only",
            "serialise",
            "--only",
            "cycle",
            "--only",
            "gpustat",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["quick"] is True and doc["machine"]["cores"] >= 1
    rows = {r["name"]: r for r in doc["results"]}
    assert set(rows) == {"serialise", "cycle", "gpustat"}
    for row in rows.values():
        assert "error" not in row, row
        assert row["goal"] and isinstance(row["holds"], bool)
        assert isinstance(row["figure"], int | float) and row["figure"] > 0
    cycle = rows["cycle"]["detail"]
    assert cycle["nvml_calls_per_cycle"] > 0 and cycle["bare_ms_per_cycle"] > 0
    # The ratio is agent / bare and the agent does at least the bare calls.
    assert rows["cycle"]["figure"] >= 1.0


def test_quick_compare_row_says_null_with_the_size_it_ran_at():
    # The quick bench builds 10 hosts; the goal is stated at 1,000: not measured there, so null.
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--json", "--only", "compare_rollups_vm"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = json.loads(proc.stdout)["results"]
    assert "error" not in row, row
    assert row["holds"] is None, row
    assert row["measured_at"] == {"hosts": 10, "goal_hosts": 1000}
    assert row["detail"]["rows"][-1]["hosts"] == 10 and row["figure"] > 0
