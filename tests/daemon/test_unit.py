"""config/gpuagent.service: systemd accepts it, and it is hardened without locking NVML out."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "config" / "gpuagent.service"
SHIPPED_EXEC = "/usr/local/bin/gpuagent"


def systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze") or (
        "/usr/bin/systemd-analyze" if os.path.exists("/usr/bin/systemd-analyze") else None
    )
    if tool is None:
        reason = "systemd-analyze not found (Debian: apt-get install systemd)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return tool


def analyze(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([systemd_analyze(), *args], capture_output=True, text=True, timeout=60)


def directives(text: str) -> dict[str, list[str]]:
    """KEY -> every value it is given (DeviceAllow= and friends repeat)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def test_unit_verifies(tmp_path):
    text = UNIT.read_text()
    assert f"ExecStart={SHIPPED_EXEC} run --config /etc/gpuagent/gpuagent.toml" in text
    # verify insists that ExecStart's binary exists: check a copy that points at this
    # environment's gpuagent, the same adaptation docs/systemd.md gives for a venv.
    here = Path(sys.executable).parent / "gpuagent"
    assert here.exists(), f"{here}: gpuagent console script missing (pip install -e .)"
    copy = tmp_path / "gpuagent.service"
    copy.write_text(text.replace(SHIPPED_EXEC, str(here)))
    result = analyze("verify", str(copy))
    # verify exits 0 on "Unknown key … ignoring" too: any output is a failure.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr

    shipped = analyze("verify", str(UNIT))
    complaints = [line for line in (shipped.stdout + shipped.stderr).splitlines() if line.strip()]
    if os.access(SHIPPED_EXEC, os.X_OK):
        assert shipped.returncode == 0 and not complaints, complaints
    else:
        # The shipped file's only problem here is the binary this machine has not installed.
        assert complaints and all(f"Command {SHIPPED_EXEC} is not executable" in c for c in complaints), complaints


def test_security_exposure_is_low():
    result = analyze("security", "--offline=true", str(UNIT))
    assert result.returncode == 0, result.stderr
    match = re.search(r"Overall exposure level for gpuagent\.service: (\d+(?:\.\d+)?)", result.stdout)
    assert match, result.stdout[-500:]
    assert float(match.group(1)) <= 3.0, result.stdout


def test_unit_is_a_notify_service_that_nvml_can_still_work_in():
    d = directives(UNIT.read_text())
    one = {k: v[-1] for k, v in d.items()}
    assert one["Type"] == "notify" and one["NotifyAccess"] == "main"
    assert one["WatchdogSec"] == "30" and one["Restart"] == "on-failure"
    assert one["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert one["StateDirectory"] == "gpuagent" and one["ConfigurationDirectory"] == "gpuagent"
    assert one["CapabilityBoundingSet"] == "" and one["AmbientCapabilities"] == ""
    assert one["RestrictAddressFamilies"].split() == ["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"]
    # NVML opens /dev/nvidiactl and /dev/nvidiaN: a closed device policy must let them through,
    assert one["DevicePolicy"] == "closed"
    allowed = d["DeviceAllow"]
    assert "/dev/nvidiactl rw" in allowed and "char-nvidia-frontend rw" in allowed
    # and nothing may take /dev or /proc/driver/nvidia away.
    assert one.get("PrivateDevices", "no") in ("no", "false")
    assert one.get("ProcSubset", "all") == "all"


def test_unit_bounds_the_agents_memory():
    """Issue 46: nothing bounded the agent's memory (6 GB of RSS from a FIFO in jobs_dir)."""
    one = {k: v[-1] for k, v in directives(UNIT.read_text()).items()}
    mib = {"K": 1 / 1024, "M": 1, "G": 1024}

    def size(value: str) -> float:
        return float(value[:-1]) * mib[value[-1]]

    assert "MemoryMax" in one and "MemoryHigh" in one
    assert 256 <= size(one["MemoryHigh"]) < size(one["MemoryMax"]) <= 1024
