"""The work figures from rollups (gpuagent.compare.rollup_work) on a real InfluxDB 1.6: the limits'
cells from the CELLS rollups and each work span's energy from the report's pieces equal what raw
points give, in the GPU report (`--by model|gpu`) and the work report (`--by model,workload`).

A simulated fleet (2 hosts: 4 H100 SXM, 4 L40S) runs the inference scenario (three workloads, one
over two GPUs, some starting late, some restarting) for 100 min at 10 s with the PCIe and NVLink collectors, is
rolled up, and compared over a range that starts and ends inside minutes.
"""

from __future__ import annotations

import time
import uuid

import pytest
from compare_helpers import assert_same, compare_json, sim_fleet_args

pytestmark = pytest.mark.servers

STEP_S = 10
DURATION_S = 100 * 60


@pytest.fixture(scope="module")
def rolled_work(influxdb_v1, cli):
    db = f"rwork_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    end_s = int(time.time()) // STEP_S * STEP_S - 60
    args = sim_fleet_args(
        influxdb_v1.url, db, hosts=2, duration_s=DURATION_S, step_s=STEP_S, end_s=end_s, seed=7,
        specs=("h100-sxm:4", "l40s:4"),
    )  # fmt: skip
    result = cli(*args, "--scenario", "inference", "--collectors", "power,clocks,memory,pcie,nvlink")
    assert result.exit_code == 0, result.output
    for command in (("init",), ("backfill", "--since", f"{DURATION_S + 3600}s")):
        result = cli("rollups", *command, "--url", influxdb_v1.url, "--database", db)
        assert result.exit_code == 0, result.output
    # Inside minutes at both ends; the limits' whole 120 s buckets end before the last 1m rollup does.
    yield db, (end_s - 95 * 60 + 37) * 10**9, (end_s - 200) * 10**9 + 500_000_000
    influxdb_v1.drop_database(db)


def _both(cli, server, db, start_ns, stop_ns, *extra):
    conn = ["--url", server.url, "--database", db]
    return compare_json(cli, conn, start_ns, stop_ns, *extra), compare_json(
        cli, conn, start_ns, stop_ns, *extra, "--raw"
    )


@pytest.mark.parametrize("by", ["model", "gpu"])
def test_the_gpu_reports_work_figures_from_rollups_equal_raw(rolled_work, influxdb_v1, cli, by):
    db, start_ns, stop_ns = rolled_work
    rolled, raw = _both(cli, influxdb_v1, db, start_ns, stop_ns, "--by", by)
    assert rolled["source"]["kind"] == "rollup" and raw["source"]["kind"] == "raw"
    assert "work_units" in rolled["source"]["from_raw"] and "work" not in rolled["source"]["from_raw"]
    assert any(g["work"] for g in raw["groups"]) and any(g["limits"] for g in raw["groups"])
    for doc in (rolled, raw):
        doc.pop("source")
    assert_same(rolled, raw)


def test_the_work_reports_figures_from_rollups_equal_raw(rolled_work, influxdb_v1, cli):
    db, start_ns, stop_ns = rolled_work
    rolled, raw = _both(cli, influxdb_v1, db, start_ns, stop_ns, "--by", "model,workload")
    assert rolled["source"]["kind"] == "rollup" and rolled["source"]["from_rollups"] == ["energy", "limits"]
    assert "kind" not in raw["source"]
    assert rolled["source"]["limits_bucket_s"] % 60 == 0
    assert len(raw["groups"]) >= 3 and all(g["work"] for g in raw["groups"])
    for doc in (rolled, raw):
        doc.pop("source")
    assert_same(rolled, raw)


def test_limits_read_raw_where_the_rollups_do_not_hold_the_cells(rolled_work, influxdb_v1, cli):
    """A range of buckets too fine for the 1m level (under a minute each): cells from raw points."""
    db, _, stop_ns = rolled_work
    rolled, raw = _both(cli, influxdb_v1, db, stop_ns - 20 * 60 * 10**9, stop_ns, "--by", "model,workload")
    assert rolled["source"]["limits_bucket_s"] % 60 != 0
    assert "limits" not in rolled["source"]["from_rollups"]
    for doc in (rolled, raw):
        doc.pop("source")
    assert_same(rolled, raw)
