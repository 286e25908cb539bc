"""Every measurement, field and tag a panel names is one the documentation lists: in InfluxQL
by its InfluxDB name, in PromQL by the name the prometheus sink gives that field
(gpuagent.plugins.prometheus.naming, the rule plugins/prometheus/README.md describes).

Field names come from the first column of a table in the measurement's README (as
tests/test_plugin_readmes.py reads them); tag names from the README's code spans. The agent's
own `gpuagent` measurement is documented by agent/service/measurement.md, the sinks' READMEs (their
statistics) and docs/plugins/reference.md; `gpu_l2_probe` by docs/probe.md.
"""

from __future__ import annotations

import functools
import re

import pytest
from grafana.grafana_dashboards import ROOT, dashboards, targets

from gpuagent.testing import IDENTITY_TAGS

ROW = re.compile(r"^\|([^|]+)\|", re.M)
CODE = re.compile(r"`([^`\s]+)`")
DOCS = {
    "gpu_clocks": ["plugins/clocks/README.md"],
    "gpu_power": ["plugins/power/README.md"],
    "gpu_memory": ["plugins/memory/README.md"],
    "gpu_pcie": ["plugins/pcie/README.md"],
    "gpu_p2p": ["plugins/p2p/README.md"],
    "gpu_nvlink": ["plugins/nvlink/README.md"],
    "gpu_mig": ["plugins/mig/README.md"],
    "gpu_vgpu": ["plugins/vgpu/README.md"],
    "gpu_health": ["plugins/health/README.md"],
    "gpu_info": ["plugins/gpu_info/README.md"],
    "gpu_process": ["plugins/processes/README.md"],
    "gpu_job": ["plugins/processes/README.md"],
    "host": ["plugins/host/README.md"],
    "gpuagent": [
        "agent/service/measurement.md",
        "plugins/influxdb/README.md",
        "plugins/file/README.md",
        "plugins/prometheus/README.md",
        "docs/plugins/reference.md",
    ],
    "gpu_l2_probe": ["docs/probe.md"],
    # What sim fleet writes (docs/simulator.md, "Work"), and the work collector's own README where present.
    "gpu_work": [
        "docs/simulator.md",
        *(["plugins/work/README.md"] if (ROOT / "plugins/work/README.md").exists() else []),
    ],
}
# In the agent's per-collector fields, listed in prose (code spans) in docs/plugins/reference.md.
PROSE_FIELDS = {"docs/plugins/reference.md"}


def documented(measurement: str) -> tuple[set[str], set[str]]:
    """(fields, tags) the documentation lists for one measurement."""
    fields: set[str] = set()
    spans: set[str] = set()
    for rel in DOCS[measurement]:
        text = (ROOT / rel).read_text()
        fields |= {n.strip().strip("`").strip() for cell in ROW.findall(text) for n in cell.split(",")}
        spans |= set(CODE.findall(text))
        if rel in PROSE_FIELDS:
            fields |= set(CODE.findall(text))
    # A tag is also documented by a span such as `sink=influxdb`.
    return fields, spans | {s.split("=")[0] for s in spans if "=" in s} | set(IDENTITY_TAGS)


def names_in(query: str) -> tuple[set[str], set[str]]:
    """(measurements, other identifiers) of an InfluxQL query; aliases (AS "x") are left out,
    also where an outer query reads a subquery's alias."""
    measurements = set(re.findall(r'FROM\s+"([^"]+)"', query))
    aliases = set(re.findall(r'AS\s+"([^"]+)"', query))
    idents = set(re.findall(r'"([^"]+)"', query)) - measurements - aliases
    return measurements, idents


INFLUX_QUERIES = [
    pytest.param(q, id=f"{slug}:{title}")
    for slug, d in dashboards("influxql").items()
    for title, q in [(title, t["query"]) for title, t in targets(d)]
    + [(a["name"], a["query"]) for a in d["annotations"]["list"] if not a.get("builtIn")]
    + [(v["name"], v["query"]) for v in d["templating"]["list"] if v["type"] == "query"]
]


@pytest.mark.parametrize("query", INFLUX_QUERIES)
def test_every_influxql_name_is_documented(query):
    measurements, idents = names_in(query)
    assert measurements, f"no measurement in {query}"
    unknown = measurements - set(DOCS)
    assert not unknown, f"measurement {unknown} has no documentation in DOCS: {query}"
    fields, tags = set(), set()
    for m in measurements:
        f, t = documented(m)
        fields |= f
        tags |= t
    missing = sorted(i for i in idents if i not in fields and i not in tags)
    assert not missing, f"{missing} not listed in {[d for m in measurements for d in DOCS[m]]}: {query}"


def test_the_check_fails_on_an_undocumented_field():
    _, idents = names_in('SELECT mean("power_watts") AS "p" FROM "gpu_power" WHERE "host" =~ /^$host$/')
    fields, tags = documented("gpu_power")
    assert idents == {"power_watts", "host"}
    assert "power_watts" not in fields | tags and "host" in tags


# -- PromQL ------------------------------------------------------------------------------------

# Labels Prometheus adds to every scraped series.
SCRAPE_LABELS = {"job", "instance", "__name__"}


@functools.lru_cache(maxsize=1)
def prometheus_names() -> tuple[dict[str, tuple[str, str]], set[str]]:
    """(metric name -> (measurement, field), labels) for every documented field and tag."""
    from gpuagent.plugins.prometheus.naming import metric_for

    names, labels = {}, set(SCRAPE_LABELS)
    for measurement in DOCS:
        fields, tags = documented(measurement)
        labels |= tags
        for f in fields:
            if re.fullmatch(r"[a-z][a-z0-9_]*", f):
                names[metric_for("gpuagent", measurement, f).name] = (measurement, f)
                info = metric_for("gpuagent", measurement, f, is_string=True)
                names[info.name] = (measurement, f)
                labels.add(info.label)
    return names, labels


def prom_names_in(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) a PromQL expression uses."""
    bare = re.sub(r'"[^"]*"', '""', expr)
    metrics = set(re.findall(r"\b(gpuagent_[a-zA-Z0-9_]+)\b", bare))
    # A name matcher stands for every documented name it matches (none: it is reported as is).
    for pattern in re.findall(r'__name__\s*=~\s*"([^"]*)"', expr):
        matched = {n for n in prometheus_names()[0] if re.fullmatch(pattern, n)}
        metrics |= matched or {pattern}
    labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", expr)) - {"__name__"}
    for group in re.findall(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)", bare):
        labels |= {g.strip() for g in group.split(",") if g.strip()}
    m = re.match(r"label_values\((.+), *(\w+)\)$", expr)
    if m:
        labels.add(m.group(2))
    return metrics, labels


PROM_QUERIES = [
    pytest.param(q, id=f"{slug}:{title}")
    for slug, d in dashboards("promql").items()
    for title, q in [(title, t["expr"]) for title, t in targets(d)]
    + [(a["name"], a["expr"]) for a in d["annotations"]["list"] if not a.get("builtIn")]
    + [(v["name"], v["query"]) for v in d["templating"]["list"] if v["type"] == "query"]
]


@pytest.mark.parametrize("expr", PROM_QUERIES)
def test_every_promql_name_is_documented(expr):
    names, labels = prometheus_names()
    metrics, used_labels = prom_names_in(expr)
    assert metrics, f"no gpuagent metric in {expr}"
    unknown = sorted(metrics - set(names))
    assert not unknown, f"{unknown}: no documented field has this /metrics name: {expr}"
    unknown_labels = sorted(used_labels - labels)
    assert not unknown_labels, f"labels {unknown_labels} are no documented tag: {expr}"


def test_the_promql_check_fails_on_a_wrong_unit():
    names, labels = prometheus_names()
    assert names["gpuagent_gpu_power_energy_joules_total"] == ("gpu_power", "energy_j")
    metrics, used = prom_names_in('sum by (model) (rate(gpuagent_gpu_power_energy_j_total{host=~"$host"}[5m]))')
    assert metrics == {"gpuagent_gpu_power_energy_j_total"} and used == {"model", "host"}
    assert "gpuagent_gpu_power_energy_j_total" not in names
