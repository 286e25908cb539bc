"""What write-ahead costs: `gpuagent run --simulate h100-sxm:8` into a local influxd 1.6 (api v1),
at [agent] interval 1 s and 10 s, with write_ahead on (spool_sync "normal", the default, and "full")
and off. Per setting: the agent's CPU (% of one core) and the bytes it wrote to disk per minute
(/proc/PID/io write_bytes: what reached the block layer, the spool's WAL and checkpoints).

Goal: write-ahead at the defaults costs at most 0.5 % of a core more than without it at 1 s.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench.replay import _servers

SETTINGS = (  # (label, interval, write_ahead, spool_sync)
    ("1s off", "1s", False, "normal"),
    ("1s on", "1s", True, "normal"),
    ("1s on, fsync", "1s", True, "full"),
    ("10s off", "10s", False, "normal"),
    ("10s on", "10s", True, "normal"),
)
GOAL_EXTRA_CPU_PCT = 0.5


def _io_write_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/io") as fh:
        for line in fh:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def _measure(server, tmp: Path, label: str, interval: str, write_ahead: bool, sync: str, seconds: float) -> dict:
    state = tmp / label.replace(" ", "_").replace(",", "")
    state.mkdir()
    config = state / "gpuagent.toml"
    config.write_text(
        f'[agent]\ninterval = "{interval}"\nstate_dir = "{state}"\n'
        f'[sinks.influxdb]\napi = "v1"\nurl = "{server.url}"\ndatabase = "{server.database}"\n'
        f'write_ahead = {"true" if write_ahead else "false"}\nspool_sync = "{sync}"\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "run", "--config", str(config), "--simulate", "h100-sxm:8"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    ps = psutil.Process(proc.pid)
    try:
        time.sleep(8)  # imports and the first collection are not steady state
        t0, c0, w0 = time.monotonic(), ps.cpu_times(), _io_write_bytes(proc.pid)
        time.sleep(seconds)
        t1, c1, w1 = time.monotonic(), ps.cpu_times(), _io_write_bytes(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
    elapsed = t1 - t0
    cpu = (c1.user + c1.system) - (c0.user + c0.system)
    return {
        "cpu_pct": round(100 * cpu / elapsed, 3),
        "disk_mib_per_min": round((w1 - w0) / 2**20 * 60 / elapsed, 2),
    }


def run(quick: bool = False) -> dict:
    servers = _servers()
    binary = shutil.which(servers.INFLUXD) or "/usr/bin/influxd"
    if not Path(binary).exists():
        return {"name": "writeahead", "error": "influxd not found (Debian package `influxdb`)", "holds": False}
    seconds = 30 if quick else 60
    detail = {}
    with tempfile.TemporaryDirectory(prefix="gpuagent-bench-writeahead-", dir="/var/tmp") as tmp:
        tmp = Path(tmp)
        server = servers.InfluxdServer(binary, tmp / "influxd")
        server.start()
        try:
            for label, interval, write_ahead, sync in SETTINGS:
                detail[label] = _measure(server, tmp, label, interval, write_ahead, sync, seconds)
        finally:
            server.stop()
    extra = detail["1s on"]["cpu_pct"] - detail["1s off"]["cpu_pct"]
    return {
        "name": "writeahead",
        "figure": round(extra, 3),
        "unit": "% of a core more at 1 s",
        "goal": f"≤ {GOAL_EXTRA_CPU_PCT} % of a core more than without write-ahead",
        "holds": extra <= GOAL_EXTRA_CPU_PCT,
        "detail": {**detail, "seconds": seconds},
    }
