"""Every query of the PromQL dashboards, as Grafana would send it, returns data from a real
Prometheus scraping a real agent (simulated GPUs) and a prometheus sink holding real probe
points."""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import urllib.request
from collections import defaultdict

import pytest
from grafana.grafana_dashboards import (
    NODE_HOST,
    dashboards,
    prom_has_data,
    prom_substitute,
    targets,
)

pytestmark = pytest.mark.servers

PROM = dashboards("promql")
CASES = [
    pytest.param(slug, title, t, id=f"{slug}:{title}:{t['refId']}")
    for slug, d in PROM.items()
    for title, t in targets(d)
]


def selection(slug: str) -> dict[str, str]:
    values = {"model": ".*", "host": ".*", "gpu": ".*"}
    if slug == "node":
        values["host"] = NODE_HOST
    return values


def run(prometheus, expr: str, instant: bool, since: float) -> list[dict]:
    now = time.time()
    if instant:
        return prometheus.query(expr, time_s=now)
    return prometheus._api(
        "/api/v1/query_range", {"query": expr, "start": f"{since:.3f}", "end": f"{now:.3f}", "step": "1"}
    )


def label_values(prometheus, query: str) -> list[str]:
    """Grafana's label_values(METRIC{…}, LABEL) variable query: /api/v1/label/LABEL/values?match[]=…"""
    m = re.fullmatch(r"label_values\((.+), *(\w+)\)", query)
    assert m, query
    params = urllib.parse.urlencode({"match[]": m.group(1)})
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/label/{m.group(2)}/values?{params}", timeout=10) as r:
        return json.loads(r.read())["data"]


def test_there_are_many_targets():
    assert len(CASES) >= 40


@pytest.mark.parametrize(("slug", "title", "target"), CASES)
def test_every_target_returns_data(grafana_prometheus, slug, title, target):
    prometheus, since = grafana_prometheus
    expr = prom_substitute(target["expr"], selection(slug))
    assert prom_has_data(run(prometheus, expr, target["instant"], since)), f"{slug} / {title}: no data from {expr}"


def test_variable_queries_return_values(grafana_prometheus):
    prometheus, _ = grafana_prometheus
    for slug, d in PROM.items():
        for v in d["templating"]["list"]:
            if v["type"] != "query":
                continue
            found = label_values(prometheus, prom_substitute(v["query"], selection(slug)))
            assert found, f"{slug}: variable {v['name']} has no values"
            if v["name"] == "host" and slug != "agent":
                assert NODE_HOST in found


def test_xid_annotation_marks_the_injected_xid(grafana_prometheus):
    prometheus, since = grafana_prometheus
    (xid,) = [a for a in PROM["node"]["annotations"]["list"] if not a.get("builtIn")]
    result = run(prometheus, prom_substitute(xid["expr"], selection("node")), False, since)
    # xid=1:79 on the H100 SXM pair (GPUs 2-3); the lost RTX 4090 (GPU 7) reports XID 79 too
    assert sorted((r["metric"]["gpu"], r["values"][-1][1]) for r in result) == [("3", "79"), ("7", "79")], result


def panel_result(prometheus, since, slug: str, title: str, ref: str = "A") -> list[dict]:
    (target,) = [t for t_title, t in targets(PROM[slug]) if t_title == title and t["refId"] == ref]
    return run(prometheus, prom_substitute(target["expr"], selection(slug)), target["instant"], since)


def test_verdict_counts_show_the_lost_gpus(grafana_prometheus):
    prometheus, since = grafana_prometheus
    counts = {
        (r["metric"]["model"], r["metric"]["verdict"]): float(r["value"][1])
        for r in panel_result(prometheus, since, "fleet", "Health verdicts by model")
    }
    # XID 79 on GPU 3 and the lost RTX 4090 (GPU 7); the L40S pair has no evidence at all.
    assert counts[("NVIDIA H100 80GB HBM3", "lost")] == 1 and counts[("NVIDIA GeForce RTX 4090", "lost")] == 1
    assert counts[("NVIDIA L40S", "ok")] == 2


def test_energy_by_job_names_the_slurm_job(grafana_prometheus):
    prometheus, since = grafana_prometheus
    result = panel_result(prometheus, since, "fleet", "Energy by Slurm job in the range")
    assert [r["metric"]["slurm_job_id"] for r in result] == ["4242"] and float(result[0]["value"][1]) > 0


def test_work_panels_compute_what_the_counters_say(grafana_prometheus):
    """The fed work (conftest._feed_work): each tick adds 350 units on one L40S and 120 on a pair of
    H100s, so per GPU the rates are 350 : 60 whatever the ticks' timing."""
    prometheus, since = grafana_prometheus
    per_gpu_hour = {
        r["metric"]["workload"]: [float(v) for _, v in r["values"]]
        for r in panel_result(prometheus, since, "fleet", "Units per GPU-hour by model and workload")
    }
    pairs = [(a, b) for a, b in zip(per_gpu_hour["llama-3.1-8b"], per_gpu_hour["llama-3.1-70b"], strict=False) if b > 0]
    assert pairs and all(abs(a / b - 350 / 60) < 1e-6 for a, b in pairs), pairs[:3]
    energy = panel_result(prometheus, since, "fleet", "Energy per 1,000 units by model and workload")
    assert {r["metric"]["workload"] for r in energy} == {"llama-3.1-8b", "llama-3.1-70b"}
    shares = defaultdict(lambda: defaultdict(float))
    for ref in "ABCDEFGH":
        for r in panel_result(prometheus, since, "fleet", "What limits the work, by model (% of GPUs)", ref):
            for t, v in r["values"]:
                shares[(r["metric"]["model"], t)][r["metric"]["class"]] += float(v)
    assert shares
    for (model, _), by_class in shares.items():
        assert abs(sum(by_class.values()) - 100) < 1e-9, (model, dict(by_class))
    working = {m for (m, _), c in shares.items() if c["idle"] < 100}
    assert working == {"NVIDIA L40S", "NVIDIA H100 80GB HBM3"}  # the fed GPUs are not idle
