"""`compare`: GPU-hours per health verdict per model, against a real InfluxDB 1.x (influxdb_v1)."""

from __future__ import annotations

import uuid

import pytest

from gpuagent.compare.health import VERDICTS, health_hours, health_text
from gpuagent.compare.query import Connection, InfluxQL
from gpuagent.compare.report import DEFINITIONS, Range, Report

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
    lines.append(f'gpu_health,host=n1,uuid=GPU-n1-2,model=NVIDIA\\ L40S,gpu=2,gi_id=1 xid=13i {start + 10**9}')
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
    assert "last verdict" in DEFINITIONS["health_gpu_hours"]
