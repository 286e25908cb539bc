"""Every measurement, field and tag an InfluxQL panel names is one the documentation lists.

Field names come from the first column of a table in the measurement's README (as
tests/test_plugin_readmes.py reads them); tag names from the README's code spans. The agent's
own `gpuagent` measurement is documented by the sinks' READMEs (their statistics) and by
docs/plugins/reference.md (the per-collector fields); `gpu_l2_probe` by docs/probe.md.
"""

from __future__ import annotations

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
    "gpu_process": ["plugins/processes/README.md"],
    "host": ["plugins/host/README.md"],
    "gpuagent": [
        "plugins/influxdb/README.md",
        "plugins/file/README.md",
        "plugins/prometheus/README.md",
        "docs/plugins/reference.md",
    ],
    "gpu_l2_probe": ["docs/probe.md"],
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
