"""scripts/run.sh, the README's main path: installs once, then runs the fleet the user named.

Run as a user runs it, in this checkout (its .venv). The first call may install (a stale
.venv); the ones after must not.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from lineprotocol_parser import parse

from conftest import REPO

# scripts/run.sh in subprocesses (the first may install into .venv).
pytestmark = pytest.mark.slow

SCRIPT = REPO / "scripts" / "run.sh"
DEFAULT_FLEET = "l40s:2,h100-sxm:2,rtx4090:1"


def run_sh(*args, env=None):
    full = {**os.environ, **(env or {})}
    full.pop("GPUAGENT_CONFIG", None)
    return subprocess.run(
        [str(SCRIPT), "--once", "--test", "--log-level", "warning", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=600,
    )


def models(proc) -> set[str]:
    assert proc.returncode == 0, proc.stderr
    return {tags["model"] for m, tags, _f, _t in parse(proc.stdout) if m == "gpu_power"}


@pytest.fixture(scope="module")
def installed():
    """One call that may install; every test below is then a second call."""
    proc = run_sh("--simulate", "h100-sxm:1")
    assert proc.returncode == 0, proc.stderr
    assert (REPO / ".venv" / ".gpuagent-setup").is_file()


def test_a_second_call_installs_nothing_and_runs_the_users_simulate(installed):
    proc = run_sh("--simulate", "h100-sxm:1")
    assert models(proc) == {"NVIDIA H100 80GB HBM3"}
    assert proc.stderr == "", f"a second call printed: {proc.stderr}"  # no pip, no fleet it does not run


def test_simulate_in_the_config_wins_over_the_default_fleet(installed, tmp_path):
    config = tmp_path / "gpuagent.toml"
    config.write_text('[agent]\nsimulate = "rtx4090:1"\n')
    for args in (["--config", str(config)], [f"--config={config}"]):
        proc = run_sh(*args)
        assert models(proc) == {"NVIDIA GeForce RTX 4090"}
        assert "simulated fleet" not in proc.stderr, proc.stderr


def test_without_a_driver_the_message_names_the_fleet_that_runs(installed):
    probe = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), "-c", "import pynvml; pynvml.nvmlInit()"], capture_output=True
    )
    if probe.returncode == 0:
        pytest.skip("an NVIDIA driver is here: run.sh reads the real GPUs")
    proc = run_sh(env={"GPUAGENT_SIMULATE": "h200:1"})
    assert models(proc) == {"NVIDIA H200"}
    assert proc.stderr.strip() == "gpuagent: no NVIDIA driver here; running on the simulated fleet h200:1"
    assert DEFAULT_FLEET not in proc.stderr
