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
        assert lines[-1].startswith("wrote ") and len(lines) == 2, proc.stderr
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
