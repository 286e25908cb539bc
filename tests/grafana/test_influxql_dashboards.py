"""Every query of the InfluxQL dashboards, as Grafana would send it, returns data from a real
InfluxDB 1.x holding a simulated fleet, a real agent's own measurement and real probe points."""

from __future__ import annotations

import re

import pytest
from grafana.grafana_dashboards import (
    AGENT_HOST,
    NODE_HOST,
    dashboards,
    has_data,
    influx_substitute,
    targets,
)

pytestmark = pytest.mark.servers

INFLUX = dashboards("influxql")
# Grafana's $__interval for each dashboard: the fleet is written every 10 s, the agent every 1 s.
INTERVAL = {"fleet": "30s", "node": "30s", "agent": "1s"}


def selection(slug: str) -> dict[str, str]:
    """The template variables as a user leaves them: All (`.*`), one host on the node dashboard."""
    values = {"model": ".*", "host": ".*", "gpu": ".*"}
    if slug == "node":
        values["host"] = NODE_HOST
    return values


CASES = [
    pytest.param(slug, title, t, id=f"{slug}:{title}:{t['refId']}")
    for slug, d in INFLUX.items()
    for title, t in targets(d)
]


def test_there_are_many_targets():
    assert len(CASES) >= 40


def test_variable_queries_return_values(grafana_influx):
    server, db = grafana_influx
    for slug, d in INFLUX.items():
        values = selection(slug)
        for v in d["templating"]["list"]:
            if v["type"] != "query":
                continue
            q = influx_substitute(v["query"], values, INTERVAL[slug])
            found = [row[1] for s in server.query(q, db=db) for row in s["values"]]
            assert found, f"{slug}: variable {v['name']} has no values: {q}"
            if slug == "node" and v["name"] == "host":
                assert NODE_HOST in found
            if slug == "agent":
                assert AGENT_HOST in found


@pytest.mark.parametrize(("slug", "title", "target"), CASES)
def test_every_target_returns_data(grafana_influx, slug, title, target):
    server, db = grafana_influx
    q = influx_substitute(target["query"], selection(slug), INTERVAL[slug])
    assert has_data(server.query(q, db=db)), f"{slug} / {title}: no data from {q}"


def test_xid_annotation_returns_the_injected_xid(grafana_influx):
    server, db = grafana_influx
    (xid,) = [a for a in INFLUX["node"]["annotations"]["list"] if not a.get("builtIn")]
    q = influx_substitute(xid["query"], selection("node"), "30s")
    rows = [dict(zip(s["columns"], r, strict=True)) for s in server.query(q, db=db) for r in s["values"]]
    assert [(r["xid"], r["gpu"]) for r in rows] == [(79, "3")], rows  # xid=1:79 on the H100 SXM pair (GPUs 2-3)
    assert rows[0][xid["textColumn"]]


def test_a_model_selection_narrows_every_series(grafana_influx):
    server, db = grafana_influx
    (model_var,) = [v for v in INFLUX["fleet"]["templating"]["list"] if v["name"] == "model"]
    models = sorted(r[1] for s in server.query(model_var["query"], db=db) for r in s["values"])
    assert len(models) == 4, models  # L40S, H100 SXM (MIG or not), RTX 4090, A100
    (power,) = [t for title, t in targets(INFLUX["fleet"]) if title == "Power by GPU"]
    chosen = models[0]
    q = influx_substitute(power["query"], {**selection("fleet"), "model": re.escape(chosen)}, "30s")
    series = server.query(q, db=db)
    assert series and {s["tags"]["model"] for s in series} == {chosen}


def panel_series(server, db, slug: str, title: str) -> list[dict]:
    (target,) = [t for t_title, t in targets(INFLUX[slug]) if t_title == title]
    return server.query(influx_substitute(target["query"], selection(slug), INTERVAL[slug]), db=db)


def test_verdicts_per_gpu_include_the_xid_79_gpu(grafana_influx):
    server, db = grafana_influx
    verdicts = {
        (s["tags"]["host"], s["tags"]["gpu"]): s["values"][0][1]
        for s in panel_series(server, db, "fleet", "Health verdicts by model")
    }
    assert verdicts[(NODE_HOST, "3")] == "lost"  # XID 79: fell off the bus
    assert verdicts[("sim-01", "0")] == "ok"


def test_processes_and_jobs_carry_the_simulated_slurm_jobs(grafana_influx):
    server, db = grafana_influx
    jobs = {s["tags"]["slurm_job_id"] for s in panel_series(server, db, "node", "Processes")}
    assert len(jobs - {""}) >= 1
    energy = panel_series(server, db, "fleet", "Energy by Slurm job in the range")
    assert {s["tags"]["slurm_job_id"] for s in energy} >= jobs - {""}
