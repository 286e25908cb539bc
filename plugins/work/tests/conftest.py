"""Stand-in inference servers for the work collector's tests: real processes
(inference_server.py) that speak vLLM's or Triton's /metrics and hold "GPU worker" children."""

from __future__ import annotations

import pytest
from inference_stand_in import call, start_server


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
