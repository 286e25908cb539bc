"""`gpuagent compare --by job` on a `sim fleet --with-jobs` backfill in a real InfluxDB 1.x:
every job's energy is the sum over its GPUs of their gpu_power energy_j increase while it held
them, recomputed here from the raw points."""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict

import pytest
from compare_helpers import sim_fleet_args

pytestmark = pytest.mark.servers

STEP_S = 60
DURATION_S = 2 * 3600


@pytest.fixture(scope="module")
def jobs_db(influxdb_v1, cli):
    db = f"jobs_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    end_s = int(time.time()) // STEP_S * STEP_S - 60
    args = sim_fleet_args(
        influxdb_v1.url, db, hosts=2, duration_s=DURATION_S, step_s=STEP_S, end_s=end_s, seed=5,
        specs=("l40s:4", "h100-sxm:2"),
    )  # fmt: skip
    result = cli(*args, "--collectors", "power", "--with-jobs")
    assert result.exit_code == 0, result.output
    yield db, (end_s - DURATION_S - STEP_S) * 10**9, (end_s + STEP_S) * 10**9
    influxdb_v1.drop_database(db)


def compare(cli, server, db, start_ns, end_ns, *extra):
    return cli(
        "compare", "--url", server.url, "--database", db,
        "--start", str(start_ns // 10**9), "--end", str(end_ns // 10**9), *extra,
    )  # fmt: skip


def test_job_energy_is_the_sum_of_its_gpus_energy(jobs_db, influxdb_v1, cli):
    db, start_ns, end_ns = jobs_db
    result = compare(cli, influxdb_v1, db, start_ns, end_ns, "--by", "job", "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    # Raw points: when each job held each GPU, and that GPU's energy counter at each sample.
    held = defaultdict(list)  # (job, host, uuid) -> [time]
    for r in influxdb_v1.points('SELECT * FROM "gpu_job"', db=db):
        held[(r["slurm_job_id"], r["host"], r["uuid"])].append(r)
    energy = {
        (r["host"], r["uuid"], r["time"]): r["energy_j"]
        for r in influxdb_v1.points('SELECT "energy_j", "host", "uuid" FROM "gpu_power"', db=db)
    }
    expected: dict[str, dict] = defaultdict(lambda: {"j": 0.0, "s": 0.0, "gpus": 0, "peak": 0})
    for (job, host, gpu_uuid), rows in held.items():
        rows.sort(key=lambda r: r["time"])
        times = [r["time"] for r in rows]
        # The GPU's own energy over the job's samples on it (contiguous in the job book).
        series = [energy[(host, gpu_uuid, t)] for t in times]
        e = expected[job]
        e["j"] += sum(max(0.0, b - a) for a, b in zip(series, series[1:], strict=False))
        e["s"] += (times[-1] - times[0]) / 1e9
        e["gpus"] += 1
        e["peak"] = max(e["peak"], *(r["used_memory_bytes"] for r in rows))
    assert len(expected) >= 4, "the backfill should hold several jobs"
    got = {g["key"]["slurm_job_id"]: g for g in doc["groups"]}
    assert set(got) == set(expected)
    for job, e in expected.items():
        g = got[job]
        assert g["energy_wh"] == pytest.approx(e["j"] / 3600.0, rel=1e-9), job
        assert g["gpu_hours"] == pytest.approx(e["s"] / 3600.0, rel=1e-9), job
        assert g["gpus"] == e["gpus"] and g["peak_memory_bytes"] == e["peak"]
        assert sum(p["energy_wh"] for p in g["per_gpu"]) == pytest.approx(g["energy_wh"])
        assert len(g["models"]) == 1 and 0 < g["sm_util_mean_pct"] <= 100
    assert any(g["energy_wh"] > 0 for g in got.values())


def test_table_csv_and_pod_grouping(jobs_db, influxdb_v1, cli):
    db, start_ns, end_ns = jobs_db
    table = compare(cli, influxdb_v1, db, start_ns, end_ns, "--by", "job")
    assert table.exit_code == 0, table.output
    header = next(line for line in table.stdout.splitlines() if line.startswith("┃ job")).strip("┃").split("┃")
    assert [h.strip() for h in header[:2]] == ["job", "model"] and "energy Wh" in [h.strip() for h in header]
    jobs = [line.split("│")[1].strip() for line in table.stdout.splitlines() if line.startswith("│ ")]
    assert jobs == sorted(jobs, key=int), jobs  # job ids by their number
    rows = compare(cli, influxdb_v1, db, start_ns, end_ns, "--by", "job", "--format", "csv")
    assert rows.stdout.splitlines()[0].startswith("job,model,GPUs,GPU-hours,energy Wh")
    # The simulated jobs are Slurm's: no pod in the range is one line, exit 1.
    pods = compare(cli, influxdb_v1, db, start_ns, end_ns, "--by", "pod")
    assert pods.exit_code == 1
    assert "no gpu_job points with k8s_pod_uid" in pods.output
    assert len(pods.output.strip().splitlines()) == 1


def test_pods_grouped_by_uid_and_labelled_by_name(influxdb_v1, cli):
    """gpu_job points as the processes collector writes them on a Kubernetes node: one pod on
    two GPUs named by the kubelet, one known only by its cgroup's uid."""
    db = f"pods_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    t0 = (int(time.time()) - 600) * 10**9
    lines = []
    for k in range(4):
        t = t0 + k * 60 * 10**9
        for gpu, energy0, pod in ((0, 1000.0, "a"), (1, 5000.0, "a"), (2, 9000.0, "b")):
            tags = f"gpu_job,host=n1,gpu={gpu},uuid=GPU-{gpu},model=NVIDIA\\ L40S,k8s_pod_uid=uid-{pod}"
            if pod == "a":
                tags += ",k8s_namespace=ml,k8s_pod=trainer,k8s_container=main"
            fields = (
                f"processes=1i,used_memory_bytes={(k + 1) * 2**30}i,sm_util_pct={50 + gpu}i,"
                f"energy_j={energy0 + k * 6000.0 * (gpu + 1)}"
            )
            lines.append(f"{tags} {fields} {t}")
    influxdb_v1.write(lines, db=db)
    try:
        result = compare(cli, influxdb_v1, db, t0 - 10**9, t0 + 600 * 10**9, "--by", "pod", "--format", "json")
    finally:
        influxdb_v1.drop_database(db)
    assert result.exit_code == 0, result.output
    got = {g["label"]: g for g in json.loads(result.stdout)["groups"]}
    assert set(got) == {"ml/trainer", "uid-b"}
    trainer = got["ml/trainer"]
    assert trainer["gpus"] == 2 and trainer["gpu_hours"] == pytest.approx(2 * 180 / 3600)
    assert trainer["energy_wh"] == pytest.approx((3 * 6000.0 + 3 * 12000.0) / 3600)
    assert trainer["peak_memory_bytes"] == 4 * 2**30
    assert trainer["sm_util_mean_pct"] == pytest.approx(50.5)
    assert got["uid-b"]["energy_wh"] == pytest.approx(3 * 18000.0 / 3600)


def test_idle_gpu_hours_count_the_time_a_job_held_a_gpu_flagged_allocated_idle(influxdb_v1, cli):
    """gpu_job points as the processes collector writes them (idle_after = 180 s, a sample a
    minute): the flagged time, and none for the idle_after before the flag or a busy job."""
    db = f"idle_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    t0 = (int(time.time()) // 60 - 30) * 60
    idle_after = 180
    ramps = {
        "4711": [60 * i for i in range(10)],  # never active: flagged from 180 s to 540 s
        "4712": [0] * 10,  # computing all along
        "4713": [0, 60, 120, 180, 240, 0, 60, 120, 180, 240],  # two flagged runs of 60 s
    }
    lines = []
    for gpu, (job, ramp) in enumerate(ramps.items()):
        for i, idle_s in enumerate(ramp):
            flagged = "true" if idle_s >= idle_after else "false"
            lines.append(
                f"gpu_job,host=n1,gpu={gpu},uuid=GPU-{gpu},model=H100,slurm_job_id={job} processes=1i,"
                f"used_memory_bytes=1024i,gpu_util_pct={0 if idle_s or job == '4711' else 90}i,energy_j={1000.0 * i},"
                f"idle_s={float(idle_s)},allocated_idle={flagged} {(t0 + 60 * i) * 10**9}"
            )
    influxdb_v1.write(lines, db=db)
    try:
        result = compare(cli, influxdb_v1, db, (t0 - 60) * 10**9, (t0 + 660) * 10**9, "--by", "job", "--format", "json")
        assert result.exit_code == 0, result.output
        got = {g["key"]["slurm_job_id"]: g for g in json.loads(result.stdout)["groups"]}
        assert got["4711"]["idle_gpu_hours"] == pytest.approx(360 / 3600)
        assert got["4712"]["idle_gpu_hours"] == 0
        assert got["4713"]["idle_gpu_hours"] == pytest.approx(120 / 3600)
        assert got["4711"]["per_gpu"][0]["idle_gpu_hours"] == pytest.approx(360 / 3600)
        table = compare(cli, influxdb_v1, db, (t0 - 60) * 10**9, (t0 + 660) * 10**9, "--by", "job")
        assert "idle GPU-h" in next(line for line in table.stdout.splitlines() if line.startswith("┃ job"))
        assert got["4711"]["idle_cost"] is None  # no prices given
        # In money, through the price table (gpuagent.compare.prices) the report takes.
        from gpuagent.compare.core import Range
        from gpuagent.compare.jobs import JobReport
        from gpuagent.compare.prices import Prices
        from gpuagent.compare.query import Connection, InfluxQL

        client = InfluxQL(Connection(url=influxdb_v1.url, database=db))
        rng = Range((t0 - 60) * 10**9, (t0 + 660) * 10**9)
        priced = JobReport(client, rng, prices=Prices(gpu_hour={"H100": 2.5})).build()
        costs = {g["key"]["slurm_job_id"]: g["idle_cost"] for g in priced["groups"]}
        assert costs["4711"] == pytest.approx(360 / 3600 * 2.5) and costs["4712"] == 0
        unpriced = JobReport(client, rng, prices=Prices(gpu_hour={"A100": 1.0})).build()
        assert {g["idle_cost"] for g in unpriced["groups"] if g["idle_gpu_hours"]} == {None}
    finally:
        influxdb_v1.drop_database(db)
