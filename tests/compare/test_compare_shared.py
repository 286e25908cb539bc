"""Per-unit figures that refuse to mislead, on points written to a real InfluxDB 1.6 and a real
VictoriaMetrics: two pieces of work sharing one GPU, jobs and pods time-sliced on one GPU, a GPU
without an energy counter, a model without a GPU-hour price, and `placement` recomputed from the
report's own figures. Expectations are worked out here from the points written."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid

import pytest
from compare_helpers import assert_same, compare_json

pytestmark = pytest.mark.servers

STEP_NS = 10 * 10**9
N = 61  # samples: 10 min at 10 s
T0 = (int(time.time()) // 60 - 40) * 60 * 10**9  # on a minute: the first and last samples open a bucket
H100, A100, L40S, ODD = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S", "Mystery GPU"
GPUS = {  # uuid -> (model, W drawn: energy_j grows by W × 10 each step; None: no energy counter)
    "GPU-h100": (H100, 300.0),
    "GPU-a100": (A100, 200.0),
    "GPU-l40s": (L40S, None),
    "GPU-odd": (ODD, 250.0),
    "GPU-gone": (A100, 100.0),  # its server stops answering for two thirds of the range
}
PRICES = {"gpu_hour": {H100: 2.5, A100: 1.5, L40S: 1.0}, "kwh": 0.14, "pue": 1.0}
GONE = (10, 51)  # the batch server's last sample before its absence, its first after
A, B = 20, 40  # the second piece of work (and job, and pod) on the H100 holds samples A..B


def _lines() -> list[str]:
    out = []
    for k in range(N):
        t = T0 + k * STEP_NS
        for i, (gpu_uuid, (model, watts)) in enumerate(GPUS.items()):
            escaped = model.replace(" ", "\\ ")
            tags = f"host=h1,uuid={gpu_uuid},gpu={i},model={escaped}"
            energy = f",energy_j={watts * 10 * k + 1000.0}" if watts else ""
            out.append(f"gpu_power,{tags} power_w={watts or 150.0}{energy} {t}")
            out.append(f"gpu_memory,{tags} gpu_util_pct=90,memory_util_pct=20 {t}")
            work = f"gpu_work,{tags},workload=chat,unit=tokens_out,source=vllm,work_id=w{i}"
            if gpu_uuid == "GPU-gone":
                if not GONE[0] < k < GONE[1]:
                    out.append(f"{work.replace('=chat', '=batch')} units_total={1000.0 * k},gpus=1 {t}")
            else:  # on the H100 with its processes' SM share (NVML's samples), elsewhere without
                sm = ",sm_util_pct=60" if gpu_uuid == "GPU-h100" else ""
                out.append(f"{work} units_total={1000.0 * k},gpus=1{sm} {t}")
            if gpu_uuid in ("GPU-h100", "GPU-odd") and A <= k <= B:  # a second server beside the first
                sm = ",sm_util_pct=20" if gpu_uuid == "GPU-h100" else ""
                out.append(
                    f"gpu_work,{tags},workload=code,unit=tokens_out,source=vllm,work_id=x{i} "
                    f"units_total={400.0 * (k - A)},gpus=1{sm} {t}"
                )
            if gpu_uuid in ("GPU-h100", "GPU-a100") and watts:
                e = watts * 10 * k + 1000.0
                if gpu_uuid == "GPU-h100":  # two Slurm jobs by SM share 30 : 10
                    holders = [("slurm_job_id=1", 30)] + ([("slurm_job_id=2", 10)] if A <= k <= B else [])
                else:  # two pods, no per-process samples: evenly
                    holders = [("k8s_pod_uid=p1,k8s_namespace=ns,k8s_pod=one", None)]
                    holders += [("k8s_pod_uid=p2,k8s_namespace=ns,k8s_pod=two", None)] if A <= k <= B else []
                for holder, sm in holders:
                    fields = f"processes=1i,used_memory_bytes=1000i,gpu_util_pct=90,energy_j={e}"
                    fields += f",sm_util_pct={sm}" if sm is not None else ""
                    out.append(f"gpu_job,{tags},{holder} {fields} {t}")
    return out


@pytest.fixture(scope="module")
def shared_db(influxdb_v1, victoria_metrics, tmp_path_factory, cli):
    db = f"shared_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    lines = _lines()
    influxdb_v1.write(lines, db=db)
    body = "\n".join(lines).encode()
    urllib.request.urlopen(urllib.request.Request(f"{victoria_metrics.url}/write?db={db}", data=body), timeout=10)
    n = sum(1 for line in lines if line.startswith("gpu_work,"))
    victoria_metrics.export(f'{{__name__="gpu_work_units_total",db="{db}"}}', min_samples=n)
    config = tmp_path_factory.mktemp("shared") / "gpuagent.toml"
    text = f'[sinks.influxdb]\napi = "v1"\nurl = "{influxdb_v1.url}"\ndatabase = "{db}"\n'
    text += f"[compare.prices]\nkwh = {PRICES['kwh']}\npue = {PRICES['pue']}\n[compare.prices.gpu_hour]\n"
    text += "".join(f'"{m}" = {p}\n' for m, p in PRICES["gpu_hour"].items())
    config.write_text(text)
    for command in (("init",), ("backfill", "--since", "2h")):
        result = cli("rollups", *command, "--url", influxdb_v1.url, "--database", db)
        assert result.exit_code == 0, result.output
    yield db, config
    influxdb_v1.drop_database(db)


START, END = T0 - 5 * 10**9, T0 + (N - 1) * STEP_NS + 5 * 10**9
SPAN_S, OVERLAP_S = (N - 1) * 10, (B - A) * 10


def _both(cli, influxdb_v1, victoria_metrics, shared_db, *extra):
    db, config = shared_db
    cfg = ["--config", str(config)]
    influx = compare_json(cli, [*cfg, "--url", influxdb_v1.url, "--database", db], START, END, *extra)
    prom = compare_json(cli, [*cfg, "--promql-url", victoria_metrics.url, "--where", f'db="{db}"'], START, END, *extra)
    return influx, prom


def _groups(doc) -> dict[tuple, dict]:
    return {tuple(g["key"].values()): g for g in doc["groups"]}


def test_shared_gpu_unmetered_gpu_and_unpriced_model_on_both_engines(cli, influxdb_v1, victoria_metrics, shared_db):
    for doc in _both(cli, influxdb_v1, victoria_metrics, shared_db, "--by", "model,workload"):
        g = _groups(doc)
        chat, code = g[(H100, "chat")]["work"]["tokens_out"], g[(H100, "code")]["work"]["tokens_out"]
        # The H100's time and energy over the overlap by the servers' SM share, 60 : 20: together
        # exactly the GPU's own.
        assert chat["gpu_hours"] == pytest.approx((SPAN_S - OVERLAP_S / 4) / 3600, rel=1e-9)
        assert code["gpu_hours"] == pytest.approx(OVERLAP_S / 4 / 3600, rel=1e-9)
        assert chat["energy_wh"] == pytest.approx(300 * (SPAN_S - OVERLAP_S / 4) / 3600, rel=1e-9)
        assert code["energy_wh"] == pytest.approx(300 * OVERLAP_S / 4 / 3600, rel=1e-9)
        # Without SM samples (the other GPU's two servers): evenly.
        odd_code = g[(ODD, "code")]["work"]["tokens_out"]
        assert odd_code["gpu_hours"] == pytest.approx(OVERLAP_S / 2 / 3600, rel=1e-9)
        assert g[(ODD, "chat")]["work"]["tokens_out"]["gpu_hours"] == pytest.approx(
            (SPAN_S - OVERLAP_S / 2) / 3600, rel=1e-9
        )
        assert chat["cost"] == pytest.approx(2.5 * chat["gpu_hours"] + 0.14 * chat["energy_wh"] / 1000, rel=1e-9)
        # No energy_j on the L40S: its energy is null, not 0, and so is its cost (the kWh is priced).
        l40s = g[(L40S, "chat")]["work"]["tokens_out"]
        assert l40s["energy_wh"] is None and l40s["wh_per_unit"] is None and l40s["cost"] is None
        assert l40s["units"] == 1000.0 * (N - 1) and l40s["gpu_hours"] == pytest.approx(SPAN_S / 3600)
        # A model without a GPU-hour price (and no default) is not priced at energy only.
        odd = g[(ODD, "chat")]["work"]["tokens_out"]
        assert odd["cost"] is None and odd["cost_per_million_units"] is None and odd["wh_per_unit"] is not None
        assert doc["unpriced"] == [ODD]
        chat_models = {m["model"]: m for c in doc["cross_model"] if c["workload"] == "chat" for m in c["models"]}
        assert chat_models[ODD]["units_per_dollar"] is None and chat_models[L40S]["units_per_s_per_kw"] is None

        # placement: the priced models only; the saving recomputes from the groups' own figures.
        (p,) = [p for p in doc["placement"] if p["workload"] == "chat"]
        assert {m["model"] for m in p["models"]} == {H100, A100}
        per = {m: g[(m, "chat")]["work"]["tokens_out"] for m in (H100, A100)}
        cheapest = min(per, key=lambda m: per[m]["cost_per_million_units"])
        assert p["cheapest"] == cheapest
        spent = sum(w["cost"] for w in per.values())
        there = sum(w["units"] for w in per.values()) * per[cheapest]["cost_per_million_units"] / 1e6
        assert p["saving"] == pytest.approx(spent - there, rel=1e-9) and p["saving"] > 0
        assert p["saving_pct"] == pytest.approx(100 * (spent - there) / spent, rel=1e-9)
        for m in p["models"]:
            assert m["gpu_hours"] == pytest.approx(per[m["model"]]["gpu_hours"], rel=1e-12)
        assert any("under 1 GPU-hour" in c or "evidence" in c for c in p["caveats"])
        assert any(c.startswith(f"unpriced models left out: {ODD}") for c in p["caveats"])
        assert any("limited by" in c for c in p["caveats"])
    influx, prom = _both(cli, influxdb_v1, victoria_metrics, shared_db, "--by", "model,workload")
    for key in ("groups", "cross_model", "placement", "unpriced"):
        assert_same(influx[key], prom[key], key)


def test_two_pieces_of_work_on_one_gpu_sum_to_at_most_the_gpu(cli, influxdb_v1, victoria_metrics, shared_db):
    for doc in _both(cli, influxdb_v1, victoria_metrics, shared_db, "--by", "gpu"):
        for uuid_ in ("GPU-h100", "GPU-odd"):  # by SM share, and evenly
            gpu = next(g for g in doc["groups"] if g["key"]["uuid"] == uuid_)
            w = gpu["work"]["tokens_out"]
            assert w["gpu_hours"] == pytest.approx(gpu["gpu_hours"], rel=1e-9)  # shared, not twice
            assert w["energy_wh"] == pytest.approx(gpu["energy_kwh"] * 1000, rel=1e-9)
            # Busy to its last sample: the bucket that sample opens is the work's, not idle.
            assert gpu["limits"]["idle"] == 0


def test_the_table_and_html_name_the_unpriced_and_the_placement(cli, influxdb_v1, shared_db):
    db, config = shared_db
    args = ["compare", "--config", str(config), "--url", influxdb_v1.url, "--database", db, "--by", "model,workload"]
    args += ["--start", f"{START / 1e9:.3f}", "--end", f"{END / 1e9:.3f}"]
    table = cli(*args)
    assert table.exit_code == 0, table.output
    assert "Where each workload should run" in table.stdout
    assert f"unpriced (no GPU-hour price in [compare.prices]): {ODD}" in table.stdout
    page = cli(*args, "--format", "html")
    assert page.exit_code == 0 and 'id="placement"' in page.stdout and "unpriced (no GPU-hour" in page.stdout


def _jobs(cli, influxdb_v1, shared_db, by):
    db, config = shared_db
    args = ["compare", "--config", str(config), "--url", influxdb_v1.url, "--database", db, "--by", by]
    result = cli(*args, "--start", f"{START / 1e9:.3f}", "--end", f"{END / 1e9:.3f}", "--format", "json")
    assert result.exit_code == 0, result.output
    return {g["label"]: g for g in json.loads(result.stdout)["groups"]}


def test_time_sliced_jobs_and_pods_share_their_gpu(cli, influxdb_v1, shared_db):
    jobs = _jobs(cli, influxdb_v1, shared_db, "job")
    # Job 2 ran beside job 1 over the overlap with a third of its SM activity: a quarter of the GPU.
    assert jobs["1"]["gpu_hours"] == pytest.approx((SPAN_S - OVERLAP_S / 4) / 3600, rel=1e-9)
    assert jobs["2"]["gpu_hours"] == pytest.approx(OVERLAP_S / 4 / 3600, rel=1e-9)
    assert jobs["1"]["energy_wh"] + jobs["2"]["energy_wh"] == pytest.approx(300 * SPAN_S / 3600, rel=1e-9)
    assert jobs["2"]["energy_wh"] == pytest.approx(300 * OVERLAP_S / 4 / 3600, rel=1e-9)
    pods = _jobs(cli, influxdb_v1, shared_db, "pod")
    # No per-process samples: evenly.
    assert pods["ns/two"]["gpu_hours"] == pytest.approx(OVERLAP_S / 2 / 3600, rel=1e-9)
    assert pods["ns/one"]["gpu_hours"] + pods["ns/two"]["gpu_hours"] == pytest.approx(SPAN_S / 3600, rel=1e-9)
    assert pods["ns/one"]["energy_wh"] + pods["ns/two"]["energy_wh"] == pytest.approx(200 * SPAN_S / 3600, rel=1e-9)


def test_a_server_gone_for_two_thirds_of_the_range_is_not_charged_the_gap(
    cli, influxdb_v1, victoria_metrics, shared_db
):
    for doc in _both(cli, influxdb_v1, victoria_metrics, shared_db, "--by", "model,workload"):
        # Its time: from its first sample to the end of the last bucket (of the limits') it answered
        # in, and from the bucket it answered in again to its last sample.
        b = doc["source"]["limits_bucket_s"]
        t0 = T0 // 10**9  # buckets are aligned to the epoch
        seconds = ((t0 + GONE[0] * 10) // b + 1) * b - t0 + (t0 + (N - 1) * 10) - (t0 + GONE[1] * 10) // b * b
        w = _groups(doc)[(A100, "batch")]["work"]["tokens_out"]
        assert w["gpu_hours"] == pytest.approx(seconds / 3600, rel=1e-9)
        assert w["energy_wh"] == pytest.approx(100 * seconds / 3600, rel=1e-9)
        assert w["units"] == 1000.0 * (N - 1)  # the counter's increase: a gap is no reset
    for doc in _both(cli, influxdb_v1, victoria_metrics, shared_db, "--by", "gpu"):
        gone = next(g for g in doc["groups"] if g["key"]["uuid"] == "GPU-gone")
        # The gap's buckets are idle, all but its edge ones (buckets of at most 60 s over 10 min).
        assert gone["limits"]["idle"] >= 100 * ((GONE[1] - GONE[0]) * 10 - 2 * 60) / ((END - START) / 1e9)


@pytest.mark.parametrize("by", ["model,workload", "gpu"])
def test_the_same_from_rollups(cli, influxdb_v1, shared_db, by):
    db, config = shared_db
    conn = ["--config", str(config), "--url", influxdb_v1.url, "--database", db]
    rolled = compare_json(cli, conn, START, END, "--by", by)
    raw = compare_json(cli, conn, START, END, "--by", by, "--raw")
    assert rolled["source"]["kind"] == "rollup", rolled["source"]
    for doc in (rolled, raw):
        doc.pop("source")
    assert_same(rolled, raw)
