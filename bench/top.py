"""`gpuagent top` at its default refresh (2 s) in a real terminal: CPU % of one core, peak RSS.

tmux gives it a 120×40 terminal (the full-screen path: collectors, rendering, the screen
updates); the node is the docs' mixed one, l40s:2,h100-sxm-mig:1,rtx4090:1. Measured over
60 s (20 s quick) after the first frame.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

from bench.steady import _peak_rss

SPEC = "l40s:2,h100-sxm-mig:1,rtx4090:1"
GOAL_PCT = 2.0


def run(quick: bool = False) -> dict:
    tmux = shutil.which("tmux")
    if tmux is None:
        return {
            "name": "top",
            "figure": "n/a",
            "unit": "",
            "goal": f"≤ {GOAL_PCT:g}% of a core",
            "holds": None,
            "detail": {"why": "tmux is not installed"},
        }
    duration = 20 if quick else 60
    socket = f"gpuagent-bench-{uuid.uuid4().hex[:8]}"
    state = Path(tempfile.mkdtemp(prefix="gpuagent-top-"))

    def tm(*args: str) -> str:
        return subprocess.run(
            [tmux, "-L", socket, "-f", "/dev/null", *args], capture_output=True, text=True, check=True, timeout=30
        ).stdout

    command = f"XDG_STATE_HOME={state} exec {sys.executable} -m gpuagent top --simulate {SPEC}"
    tm("new-session", "-d", "-s", "top", "-x", "120", "-y", "40", command)
    try:
        pid = int(tm("list-panes", "-t", "top", "-F", "#{pane_pid}").split()[0])
        ps = psutil.Process(pid)
        deadline = time.monotonic() + 60
        while "q quit" not in tm("capture-pane", "-p", "-t", "top"):
            if time.monotonic() > deadline:
                raise RuntimeError("top drew no frame within 60 s")
            time.sleep(0.2)
        time.sleep(2)
        t0, c0 = time.monotonic(), ps.cpu_times()
        time.sleep(duration)
        t1, c1 = time.monotonic(), ps.cpu_times()
        rss = _peak_rss(pid)
        threads = ps.num_threads()
    finally:
        subprocess.run([tmux, "-L", socket, "kill-server"], capture_output=True, timeout=30)
    pct = 100 * ((c1.user + c1.system) - (c0.user + c0.system)) / (t1 - t0)
    mb = rss / 2**20
    return {
        "name": "top",
        "figure": f"{pct:.2f}% CPU, {mb:.1f} MB",
        "unit": "",
        "goal": f"≤ {GOAL_PCT:g}% of a core",
        "holds": pct <= GOAL_PCT,
        "detail": {
            "cpu_pct": round(pct, 3),
            "peak_rss_mb": round(mb, 1),
            "threads": threads,
            "seconds": duration,
            "spec": SPEC,
            "refresh_s": 2,
        },
    }
