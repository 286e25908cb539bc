"""A server that does not speak the dialect asked: VictoriaMetrics (real, from the fixture) takes
InfluxDB writes (`sim fleet --url`, the agent's influxdb sink) and answers every InfluxQL /query with
the same canned list of databases. The InfluxQL commands pointed at it exit in one line naming
--promql-url; `sim fleet` writes to it without claiming to have created a database."""

from __future__ import annotations

import time
import uuid

import pytest
from compare_helpers import sim_fleet_args

from conftest import run_cli

pytestmark = pytest.mark.servers


@pytest.fixture(scope="module")
def written(victoria_metrics):
    db = f"dialect_{uuid.uuid4().hex[:8]}"
    end_s = int(time.time()) // 30 * 30
    args = sim_fleet_args(
        victoria_metrics.url, db, hosts=2, duration_s=600, step_s=30, end_s=end_s, seed=1, specs=("l40s:2",)
    )
    done = run_cli(*args, timeout=300)
    assert done.returncode == 0, done.stderr
    return db, done


def test_sim_fleet_into_victoriametrics_creates_no_database(written):
    _, done = written
    assert "created database" not in done.stderr
    assert "wrote" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["compare", "--since", "1h"],
        ["compare", "--since", "1h", "--by", "model,workload"],
        ["rollups", "status"],
        ["top", "--fleet", "--once"],
    ],
    ids=["compare", "compare-work", "rollups-status", "top-fleet"],
)
def test_an_influxql_command_pointed_at_victoriametrics_is_one_line_naming_promql_url(written, victoria_metrics, args):
    db, _ = written
    done = run_cli(*args, "--url", victoria_metrics.url, "--database", db, timeout=120)
    assert done.returncode != 0
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"--promql-url {victoria_metrics.url}" in done.stderr and "canned" in done.stderr
