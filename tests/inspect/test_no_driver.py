"""`gpuagent inspect` on a machine without an NVIDIA driver: one line naming --simulate, no traceback."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest


def _has_driver() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_driver(), reason="this machine has libnvidia-ml; the no-driver path cannot be seen here")
@pytest.mark.parametrize("args", [[], ["--json", "--gpu", "0"]])
@pytest.mark.slow
def test_no_driver_is_one_line_naming_simulate(args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUAGENT_") and k != "NO_COLOR"}
    proc = subprocess.run(
        [sys.executable, "-c", "from gpuagent.cli import main; main()", "inspect", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode != 0
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "no NVIDIA driver" in lines[0]
    assert "--simulate" in lines[0]
    assert "Traceback" not in proc.stderr
