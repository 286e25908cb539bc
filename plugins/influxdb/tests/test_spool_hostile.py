"""The spool under hostile conditions (issue 28, items 6-8), with real `gpuagent run` processes.

A file sink beside the InfluxDB sink is the record of every line the agent
produced; during an outage (a port nobody listens on) each of them must be in
the spool at stop, whatever happened to the state directory meanwhile.
"""

from __future__ import annotations

import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: nobody listens there


def agent_config(tmp_path: Path, state: Path, url: str | None = None) -> Path:
    path = tmp_path / "gpuagent.toml"
    path.write_text(
        f'[agent]\ninterval = "200ms"\nhostname = "spool-node"\nstate_dir = "{state}"\n'
        f'[sinks.file]\npath = "{tmp_path / "record.lp"}"\n'
        f'[sinks.influxdb]\napi = "v1"\nurl = "{url or dead_url()}"\ndatabase = "gpuagent"\n'
        'flush_interval = "200ms"\nretry_initial_backoff = "100ms"\nretry_max_backoff = "300ms"\ntimeout = "1s"\n'
    )
    return path


def start_agent(config: Path, log: Path, spec: str = "h100-sxm:2") -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen([sys.executable, "-m", "gpuagent", "run", "--config", str(config), "--simulate", spec],
                                stdout=fh, stderr=subprocess.STDOUT)


def stop_agent(proc: subprocess.Popen, log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, log.read_text()[-3000:]


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def record_lines(tmp_path: Path) -> int:
    return sum(1 for line in (tmp_path / "record.lp").read_text().splitlines() if line)


def spooled_points(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT COALESCE(SUM(points), 0) FROM batches").fetchone()[0]
    finally:
        db.close()


def test_a_state_dir_deleted_during_an_outage_loses_nothing_spooled(tmp_path):
    state = tmp_path / "state"
    log = tmp_path / "agent.log"
    agent = start_agent(agent_config(tmp_path, state), log)
    spool = state / "spool" / "influxdb" / "spool.sqlite"
    try:
        wait_for(lambda: spool.exists() and record_lines(tmp_path) > 200, what="points spooled")
        shutil.rmtree(state)
        before = record_lines(tmp_path)
        wait_for(lambda: record_lines(tmp_path) > before + 200, what="collections after the deletion")
        wait_for(lambda: "no longer the file" in log.read_text(), what="the agent to say so")
    finally:
        stop_agent(agent, log)
    text = log.read_text()
    assert text.count("no longer the file this agent had open") == 1, text[-3000:]
    assert "it or its directory was deleted" in text
    assert spool.exists(), "a new spool is at the path"
    assert spooled_points(spool) == record_lines(tmp_path)  # every line produced is spooled: none lost
