"""`gpuagent compare --by driver` against a real InfluxDB 1.x: GPUs grouped by the driver version
of their gpu_info records (sent by `sim fleet` as by the agent), each group's figures those of the
same GPUs in the per-model report."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from compare_helpers import sim_fleet_args

pytestmark = pytest.mark.servers

STEP_S = 10
DURATION_S = 10 * 60


@pytest.fixture(scope="module")
def driver_db(influxdb_v1, cli):
    """Two hosts: H100 SXM (profile driver 590.48.01) and A100 SXM4 (535.54.03)."""
    db = f"drivers_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    end_s = int(time.time()) // STEP_S * STEP_S - 60
    specs = ("h100-sxm:2", "a100-sxm4:2")
    args = sim_fleet_args(
        influxdb_v1.url, db, hosts=2, duration_s=DURATION_S, step_s=STEP_S, end_s=end_s, seed=5, specs=specs
    )
    result = cli(*args)
    assert result.exit_code == 0, result.output
    yield db, end_s * 10**9
    influxdb_v1.drop_database(db)


def _compare(cli, server, db, end_ns, *extra):
    start_ns = end_ns - (DURATION_S - 120) * 10**9
    return cli(
        "compare",
        "--url",
        server.url,
        "--database",
        db,
        "--start",
        str(start_ns // 10**9),
        "--end",
        str(end_ns // 10**9 + 1),
        "--format",
        "json",
        *extra,
    )


def test_groups_by_driver_version_with_the_per_model_figures(driver_db, influxdb_v1, cli):
    db, end_ns = driver_db
    info = influxdb_v1.points('SELECT LAST("driver_version") FROM "gpu_info" GROUP BY "uuid"', db=db)
    assert sorted({r["last"] for r in info}) == ["535.54.03", "590.48.01"] and len(info) == 4
    by_driver = _compare(cli, influxdb_v1, db, end_ns, "--by", "driver")
    assert by_driver.exit_code == 0, by_driver.output
    doc = json.loads(by_driver.stdout)
    assert doc["by"] == "driver"
    labels = [g["label"] for g in doc["groups"]]
    assert labels == ["535.54.03 NVIDIA A100-SXM4-80GB", "590.48.01 NVIDIA H100 80GB HBM3"]
    by_model = json.loads(_compare(cli, influxdb_v1, db, end_ns, "--by", "model").stdout)
    models = {g["key"]["model"]: g for g in by_model["groups"]}
    for g in doc["groups"]:
        same = models[g["key"]["model"]]
        assert g["gpus"] == same["gpus"] == 2
        for key in ("power_mean_w", "power_p95_w", "energy_kwh", "sm_clock_mean_mhz"):
            assert g[key] == pytest.approx(same[key]), key
    assert set(doc["series"]["power_mean_w"]) == set(labels)


def test_by_driver_without_gpu_info_is_one_line(driver_db, influxdb_v1, cli):
    db, end_ns = driver_db
    result = _compare(cli, influxdb_v1, db, end_ns, "--by", "driver", "--where", "\"host\" = 'nowhere'")
    assert result.exit_code != 0
    assert "no gpu_info records" in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
