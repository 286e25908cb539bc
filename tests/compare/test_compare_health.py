"""`compare`: GPU-hours per health verdict per model, against a real InfluxDB 1.x (influxdb_v1)."""

from __future__ import annotations

import uuid

import pytest

from gpuagent.compare.core import Range
from gpuagent.compare.health import VERDICTS, health_hours, health_text
from gpuagent.compare.query import Connection, InfluxQL
from gpuagent.compare.report import DEFINITIONS, Report

HOUR_NS = 3600 * 10**9


@pytest.fixture
def health_db(influxdb_v1):
    db = f"health_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    yield db
    influxdb_v1.drop_database(db)


def line(model, gpu, verdict, t_ns, host="n1"):
    tags = f"host={host},uuid=GPU-{host}-{gpu},model={model.replace(' ', chr(92) + ' ')},gpu={gpu}"
    return f'gpu_health,{tags} verdict="{verdict}",lost={str(verdict == "lost").lower()} {t_ns}'


def test_gpu_hours_per_verdict_per_model(influxdb_v1, health_db):
    start = 1_700_000_000 * 10**9 // HOUR_NS * HOUR_NS
    lines = []
    for minute in range(120):  # two hours, a point every 30 s
        for half in (0, 30):
            t = start + (minute * 60 + half) * 10**9
            # H100 GPU 0: ok for 90 min, then reset_required; GPU 1 lost after 60 min; L40S ok
            lines.append(line("NVIDIA H100 80GB HBM3", 0, "ok" if minute < 90 else "reset_required", t))
            lines.append(line("NVIDIA H100 80GB HBM3", 1, "ok" if minute < 60 else "lost", t))
            lines.append(line("NVIDIA L40S", 2, "ok", t))
    lines.append(f"gpu_health,host=n1,uuid=GPU-n1-2,model=NVIDIA\\ L40S,gpu=2,gi_id=1 xid=13i {start + 10**9}")
    influxdb_v1.write(lines, db=health_db)
    client = InfluxQL(Connection(url=influxdb_v1.url, database=health_db))
    report = Report(client, Range(start, start + 2 * HOUR_NS), by="model")
    groups = {("NVIDIA H100 80GB HBM3",): {}, ("NVIDIA L40S",): {}}
    bucket = health_hours(report, groups)
    assert bucket == 60
    h100, l40s = groups[("NVIDIA H100 80GB HBM3",)]["health_gpu_hours"], groups[("NVIDIA L40S",)]["health_gpu_hours"]
    assert list(h100) == list(VERDICTS)
    assert h100["ok"] == pytest.approx(1.5 + 1.0)
    assert h100["reset_required"] == pytest.approx(0.5)
    assert h100["lost"] == pytest.approx(1.0)
    assert l40s == {**dict.fromkeys(VERDICTS, 0.0), "ok": pytest.approx(2.0)}  # the XID point has no verdict
    assert health_text(h100) == "ok 2.5, reset_required 0.5, lost 1.0"
    assert health_text(dict.fromkeys(VERDICTS, 0.0)) == "n/a"
    assert "count of samples" in DEFINITIONS["health_gpu_hours"]


def fleet_lines(start, gpus=10, minutes=10):
    """10 H100 reporting every 10 s; GPU 0 degraded from 185 s, GPU 1 with one 'drain' sample between
    its others at 247 s, GPU 2 with a word no collector writes today at 395 s: [(gpu, verdict, t_ns)]."""
    points = []
    for gpu in range(gpus):
        for s in range(0, minutes * 60, 10):
            points.append((gpu, "degraded" if gpu == 0 and s >= 185 else "ok", start + s * 10**9))
    points += [(1, "drain", start + 247 * 10**9), (2, "quarantined", start + 395 * 10**9)]
    return points


def expected_hours(points, start_ns, end_ns, bucket_s=60):
    """The definition, from the raw points: per GPU and epoch-aligned bucket, the bucket's time in the
    range shared among the verdicts by their count of samples there."""
    per = {}
    for gpu, verdict, t in points:
        if start_ns <= t < end_ns:
            b = t // (bucket_s * 10**9) * bucket_s * 10**9
            per.setdefault((gpu, b), []).append(verdict)
    hours = dict.fromkeys(VERDICTS, 0.0)
    for (_, b), verdicts in per.items():
        inside = (min(b + bucket_s * 10**9, end_ns) - max(b, start_ns)) / 1e9
        for v in set(verdicts):
            hours[v] = hours.get(v, 0.0) + inside * verdicts.count(v) / len(verdicts) / 3600
    return hours


@pytest.mark.parametrize(
    "offsets",
    [(31, 93), (17.3, 541.7), (0, 600), (59.9, 60.1), (245, 250)],
    ids=["62s", "off-edges", "on-edges", "across-one-edge", "inside-one-bucket"],
)
def test_hours_are_bounded_by_the_range_and_exact_off_the_bucket_edges(influxdb_v1, health_db, offsets):
    """Issue 29, item 1: 10 GPUs over 62 s gave 0.333 GPU-h (two whole buckets each), at most 0.172."""
    start = 1_700_000_000 * 10**9 // HOUR_NS * HOUR_NS
    points = fleet_lines(start)
    influxdb_v1.write([line("NVIDIA H100 80GB HBM3", g, v, t) for g, v, t in points], db=health_db)
    client = InfluxQL(Connection(url=influxdb_v1.url, database=health_db))
    a, b = (start + int(o * 10**9) for o in offsets)
    groups = {("NVIDIA H100 80GB HBM3",): {}}
    health_hours(Report(client, Range(a, b), by="model"), groups)
    got = groups[("NVIDIA H100 80GB HBM3",)]["health_gpu_hours"]
    want = expected_hours(points, a, b)
    assert set(got) == set(want) and all(got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12) for k in want), (
        got,
        want,
    )
    assert sum(got.values()) <= 10 * (b - a) / 1e9 / 3600 * (1 + 1e-9)
    if offsets == (31, 93):
        assert sum(got.values()) == pytest.approx(10 * 62 / 3600)  # every GPU reported in both pieces
