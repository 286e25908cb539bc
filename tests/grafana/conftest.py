"""The session's InfluxDB 1.x holding what the dashboards read (see grafana_dashboards.py).

The agent runs with GPU 1 lost after 3 s, so its errors and last_error panels have data.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from grafana.grafana_dashboards import AGENT_HOST, FLEET_SPECS, NODE_HOST, agent_config


@pytest.fixture(scope="session")
def grafana_influx(influxdb_v1, tmp_path_factory):
    """(server, database) with the fleet's last 20 min, ~8 s of a real agent, and two probe runs."""
    tmp = tmp_path_factory.mktemp("grafana")
    db = f"grafana_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    gpuagent = [sys.executable, "-m", "gpuagent"]
    env = {k: v for k, v in os.environ.items() if k != "GPUAGENT_CONFIG"}
    fleet = [*gpuagent, "sim", "fleet", "--url", influxdb_v1.url, "--database", db, "--duration", "20m",
             "--step", "10s", "--seed", "5", "--jobs", "1", "--collectors", "all"]
    for spec in FLEET_SPECS:
        fleet += ["--spec", spec]
    done = subprocess.run(fleet, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    # The agent's own measurement comes from a real agent, run as the daemon runs.
    config = agent_config(tmp / "agent.toml", influxdb_v1.url, db, tmp / "state", AGENT_HOST)
    agent = subprocess.Popen([*gpuagent, "run", "--config", str(config), "--simulate", "l40s:2@lost=1:3s"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # gpu_l2_probe points from the probe's own --send path (simulated curve), two runs.
        probe_cfg = agent_config(tmp / "probe.toml", influxdb_v1.url, db, tmp / "probe-state", NODE_HOST)
        for gpu in ("0", "1"):
            done = subprocess.run(
                [sys.executable, "-m", "gpuagent.probe", "--simulate", "l40s:2", "--gpu", gpu, "--max-util", "100",
                 "--steps", "12", "--rounds", "1", "--send", "--config", str(probe_cfg)],
                capture_output=True, text=True, timeout=120, env=env,
            )
            assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rows = influxdb_v1.query(f'SELECT count("runs_total") FROM "gpuagent" WHERE "host" = \'{AGENT_HOST}\'', db=db)
            if rows and rows[0]["values"][0][1] >= 8 * 6:  # 8 runs of each collector
                break
            time.sleep(0.5)
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
    assert agent.returncode == 0, err[-2000:]
    yield influxdb_v1, db
    influxdb_v1.drop_database(db)
