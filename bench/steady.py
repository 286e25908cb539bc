"""The agent as a service: h100-sxm:8 at 1 s for 60 s (30 s quick), CPU % of one core and peak RSS."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def _peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def run(quick: bool = False) -> dict:
    duration = 30 if quick else 60
    tmp = Path(tempfile.mkdtemp(prefix="gpuagent-steady-"))
    config = tmp / "gpuagent.toml"
    config.write_text(f'[agent]\ninterval = "1s"\nstate_dir = "{tmp}"\n[sinks.file]\npath = "{tmp / "out.lp"}"\n')
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "run", "--config", str(config), "--simulate", "h100-sxm:8"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    ps = psutil.Process(proc.pid)
    try:
        # Start-up (imports, first collection) is not steady state: measure after it.
        deadline = time.monotonic() + 30
        out = tmp / "out.lp"
        while (not out.exists() or out.stat().st_size == 0) and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"agent exited: {proc.stderr.read().decode()[-500:]}")
            time.sleep(0.2)
        time.sleep(2)
        t0, c0 = time.monotonic(), ps.cpu_times()
        time.sleep(duration)
        t1, c1 = time.monotonic(), ps.cpu_times()
        rss = _peak_rss(proc.pid)
        lines = sum(1 for _ in out.open())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
    cpu = (c1.user + c1.system) - (c0.user + c0.system)
    pct = 100 * cpu / (t1 - t0)
    mb = rss / 2**20
    return {
        "name": "steady",
        "figure": f"{pct:.2f}% CPU, {mb:.1f} MB",
        "unit": "",
        "goal": "≤ 1% of a core and ≤ 45 MB peak RSS",
        "holds": pct <= 1.0 and mb <= 45,
        "detail": {"cpu_pct": round(pct, 3), "peak_rss_mb": round(mb, 1), "seconds": duration, "lines_written": lines},
    }
