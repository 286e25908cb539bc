"""`gpuagent compare` charges work on a MIG slice its share of the GPU (issue 31): a simulated
fleet with MIG GPUs (`h100-sxm-mig`: two 3g.40gb slices each, one server per slice) beside whole
GPUs, through `sim fleet --scenario inference`, into a real InfluxDB 1.6 and a real
VictoriaMetrics; the figures over both engines equal the raw points' recomputation (relative 1e-9)
with each slice's GPU-hours and energy multiplied by its `gpu_share`."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from compare_helpers import sim_fleet_args

from tests.compare.test_compare_work import PRICES, _check, _compare, _raw, recompute

pytestmark = pytest.mark.servers

STEP_S = 10
DURATION_S = 20 * 60  # as test_compare_work: the limits buckets are then longer than a step


@pytest.fixture(scope="module")
def mig_fleet(influxdb_v1, victoria_metrics, cli, tmp_path_factory):
    db = f"workmig_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    end_s = int(time.time()) // STEP_S * STEP_S - 60
    for url in (influxdb_v1.url, victoria_metrics.url):
        args = sim_fleet_args(
            url,
            db,
            hosts=2,
            duration_s=DURATION_S,
            step_s=STEP_S,
            end_s=end_s,
            seed=7,
            specs=("h100-sxm-mig:2", "l40s:2"),
        )
        result = cli(*args, "--scenario", "inference", "--collectors", "power,clocks,memory,pcie")
        assert result.exit_code == 0, result.output
    victoria_metrics.export(
        f'{{__name__="gpu_work_gpu_share",db="{db}"}}', min_samples=8 * (DURATION_S // STEP_S) - 100
    )
    config = tmp_path_factory.mktemp("workmig") / "gpuagent.toml"
    lines = [
        "[sinks.influxdb]",
        'api = "v1"',
        f'url = "{influxdb_v1.url}"',
        f'database = "{db}"',
        "[compare.prices]",
        f"kwh = {PRICES['kwh']}",
        f"pue = {PRICES['pue']}",
        "[compare.prices.gpu_hour]",
    ]
    lines += [f'"{m}" = {p}' for m, p in PRICES["gpu_hour"].items()]
    config.write_text("\n".join(lines) + "\n")
    start_ns = (end_s - DURATION_S + 35) * 10**9
    stop_ns = (end_s - 25) * 10**9 + 500_000_000
    yield db, start_ns, stop_ns, config
    influxdb_v1.drop_database(db)


def _doc(cli, config, start_ns, stop_ns, *source):
    result = _compare(
        cli,
        config,
        *source,
        "--by",
        "model,workload",
        "--start",
        f"{start_ns / 1e9:.3f}",
        "--end",
        f"{stop_ns / 1e9:.3f}",
        "--format",
        "json",
    )
    return json.loads(result.stdout)


def test_the_fleet_writes_slice_points_with_their_share(mig_fleet, influxdb_v1):
    db, start_ns, stop_ns, _ = mig_fleet
    work = _raw(influxdb_v1, db, "gpu_work", ["units_total", "gpu_share"], start_ns, stop_ns)
    shares = {dict(tags).get("mig_uuid") or None: rows[-1]["gpu_share"] for tags, rows in work.items()}
    sliced = {k: v for k, v in shares.items() if k}
    # The H100 host: 2 MIG GPUs × two 3g slices of 7 (nvmlDeviceGetMaxMigDeviceCount: 7 on H100)
    assert len(sliced) == 4 and set(sliced.values()) == {round(3 / 7, 6)}
    assert shares.get(None, "absent") is None  # the whole GPUs' work has no gpu_share


@pytest.mark.parametrize("engine", ["influxql", "promql"])
def test_slice_work_is_charged_its_share(mig_fleet, influxdb_v1, victoria_metrics, cli, engine):
    db, start_ns, stop_ns, config = mig_fleet
    source = (
        ("--url", influxdb_v1.url, "--database", db)
        if engine == "influxql"
        else ("--promql-url", victoria_metrics.url, "--where", f'db="{db}"')
    )
    doc = _doc(cli, config, start_ns, stop_ns, *source)
    expected, _ = recompute(influxdb_v1, db, start_ns, stop_ns)
    assert {k[0] for k in expected} == {"NVIDIA H100 80GB HBM3", "NVIDIA L40S"}
    _check(doc, expected)
    # Charged by share: a MIG GPU's two 3g slices add up to 6/7 of its time, not 2 × its time.
    h100 = [w for g in doc["groups"] if g["key"]["model"].startswith("NVIDIA H100") for w in g["work"].values()]
    span_h = (stop_ns - start_ns) / 3.6e12
    assert h100 and sum(w["gpu_hours"] for w in h100) <= 2 * 6 / 7 * span_h * (1 + 1e-9)
