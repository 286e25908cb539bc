import os
import subprocess
import sys
from pathlib import Path

import pytest
from captures import CAPTURES
from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def gpuagent_cli():
    from gpuagent.cli import build_cli

    return build_cli()


@pytest.fixture
def invoke(gpuagent_cli, monkeypatch, tmp_path):
    """Run the CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    monkeypatch.delenv("GPUAGENT_CONFIG", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))

    def run(*args, input=None):
        runner = CliRunner()
        return runner.invoke(gpuagent_cli, list(args), input=input, catch_exceptions=False)

    return run


def run_cli(*args, env=None, timeout=60, **kw):
    """Run `gpuagent` in a subprocess, as a user would."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("GPUAGENT_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "gpuagent", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        **kw,
    )


@pytest.fixture
def captures_dir():
    if not CAPTURES.is_dir():
        pytest.skip(f"real nvidia-smi captures not found at {CAPTURES} (they live in ../shared/captures)")
    return CAPTURES
