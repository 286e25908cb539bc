"""`sim fleet` into a server that lacks the database: docs/compare.md's example on a fresh
InfluxDB 1.x. The database is checked before anything is simulated, and created."""

from __future__ import annotations

import uuid

import pytest

from conftest import run_cli

pytestmark = pytest.mark.servers


def test_sim_fleet_creates_a_missing_database_before_simulating(influxdb_v1):
    db = f"fresh_{uuid.uuid4().hex[:8]}"
    try:
        proc = run_cli(
            "sim",
            "fleet",
            "--url",
            influxdb_v1.url,
            "--database",
            db,
            "--spec",
            "l40s:1",
            "--duration",
            "2m",
            "--step",
            "10s",
            "--jobs",
            "1",
        )
        assert proc.returncode == 0, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert lines[0] == f"created database {db!r} on {influxdb_v1.url}", proc.stderr
        # Off a terminal, a progress line per host between the two.
        assert lines[1:-1] == ["sim fleet: 1/1 hosts (sim-00)"], proc.stderr
        assert lines[-1].startswith("wrote ") and len(lines) == 3, proc.stderr
        assert influxdb_v1.points('SELECT count("power_w") FROM "gpu_power"', db=db)
        again = run_cli(
            "sim",
            "fleet",
            "--url",
            influxdb_v1.url,
            "--database",
            db,
            "--spec",
            "l40s:1",
            "--duration",
            "1m",
            "--step",
            "10s",
            "--jobs",
            "1",
        )
        assert again.returncode == 0 and "created" not in again.stderr, again.stderr
    finally:
        influxdb_v1.drop_database(db)


def _on_a_terminal(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    """argv run with its stdin, stdout and stderr on a pseudo-terminal (80 columns): (rc, what it showed)."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios
    import time

    main, side = pty.openpty()
    fcntl.ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("GPUAGENT_CONFIG", "COLUMNS", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen([sys.executable, "-m", "gpuagent", *argv], stdin=side, stdout=side, stderr=side, env=env)
    os.close(side)
    shown = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(main)
    return proc.wait(timeout=30), shown.decode(errors="replace")


def test_sim_fleet_on_a_terminal_shows_a_progress_bar(influxdb_v1):
    db = f"bar_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    try:
        argv = ["sim", "fleet", "--url", influxdb_v1.url, "--database", db, "--spec", "l40s:1", "--hosts", "3",
                "--duration", "30m", "--step", "10s", "--jobs", "1"]  # fmt: skip
        rc, shown = _on_a_terminal(argv)
        assert rc == 0, shown
        assert "sim fleet" in shown and "━" in shown and "3/3" in shown, shown  # rich's bar, hosts done of all
        assert "wrote " in shown and "sim fleet: 1/3 hosts" not in shown  # the bar, not the lines
    finally:
        influxdb_v1.drop_database(db)


def test_an_interrupted_sim_fleet_says_the_history_is_partial(influxdb_v1):
    import os
    import signal
    import subprocess
    import sys

    db = f"cut_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    env = {k: v for k, v in os.environ.items() if k != "GPUAGENT_CONFIG"}
    argv = ["sim", "fleet", "--url", influxdb_v1.url, "--database", db, "--spec", "l40s:2", "--hosts", "8",
            "--duration", "6h", "--step", "10s", "--jobs", "1"]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "gpuagent", *argv], stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = proc.stderr.readline()
        assert first.startswith("sim fleet: 1/8 hosts"), first
        proc.send_signal(signal.SIGINT)  # after the first host, before the last
        rest = proc.stderr.read()
        assert proc.wait(timeout=60) != 0
        said = [line for line in rest.splitlines() if "partial history" in line]
        assert len(said) == 1 and said[0].startswith("gpuagent: interrupted: sim fleet stopped after "), rest
        assert "of 8" in said[0] and "run the same command again" in said[0], rest
        assert [line for line in rest.splitlines() if not line.startswith("sim fleet: ")] == said  # one line
    finally:
        proc.kill()
        proc.wait()
        influxdb_v1.drop_database(db)
