"""Stand-in inference servers for the work collector's tests: real processes
(inference_server.py) that speak vLLM's or Triton's /metrics and hold "GPU worker" children."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def start_server(tmp_path: Path, kind: str, *args: str) -> tuple[subprocess.Popen, dict]:
    state = tmp_path / f"{kind}.json"
    proc = subprocess.Popen([sys.executable, str(HERE / "inference_server.py"), kind, str(state), *args])
    deadline = time.monotonic() + 30
    while not state.exists():
        assert proc.poll() is None, f"{kind} server exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"{kind} server did not start"
        time.sleep(0.05)
    return proc, json.loads(state.read_text())


def call(port: int, path: str, method: str = "GET") -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method, data=b"" if method == "POST" else None
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


@pytest.fixture
def servers(tmp_path):
    """start(kind, *args) -> (process, state): a stand-in server, stopped (with its workers) after."""
    started = []

    def start(kind, *args):
        proc, state = start_server(tmp_path, kind, *args)
        started.append(proc)
        return proc, state

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10)


@pytest.fixture(name="call")
def call_fixture():
    """call(port, path, method="GET") -> the stand-in server's JSON answer."""
    return call
