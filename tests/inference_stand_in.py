"""The stand-in inference server (plugins/work/tests/inference_server.py) started as a real process,
and its control calls: shared by the work collector's tests and compare's."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

SERVER = Path(__file__).resolve().parents[1] / "plugins" / "work" / "tests" / "inference_server.py"


def start_server(tmp_path: Path, kind: str, *args: str, name: str | None = None) -> tuple[subprocess.Popen, dict]:
    """(process, its state: pid, port, workers, ...) once it listens; the state file is NAME.json."""
    state = tmp_path / f"{name or kind}.json"
    proc = subprocess.Popen([sys.executable, str(SERVER), kind, str(state), *args])
    deadline = time.monotonic() + 30
    while not state.exists():
        assert proc.poll() is None, f"{kind} server exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{kind} server did not start"
        time.sleep(0.05)
    return proc, json.loads(state.read_text())


def call(port: int, path: str, method: str = "GET") -> dict:
    """The stand-in server's JSON answer to METHOD path."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method, data=b"" if method == "POST" else None
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())
