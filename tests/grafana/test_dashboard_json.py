"""The dashboard files themselves: current with their generator, importable shape, provisioning."""

from __future__ import annotations

import re

import pytest
from grafana.grafana_dashboards import GRAFANA, dashboards, load_generator, targets

LANGS = ("influxql", "promql")


def test_the_three_dashboards_exist_in_both_languages():
    for lang in LANGS:
        assert set(dashboards(lang)) == {"fleet", "node", "agent"}


def test_committed_json_is_what_the_generator_writes():
    stale = [str(p) for p, text in load_generator().files().items() if not p.is_file() or p.read_text() != text]
    assert not stale, f"rerun python config/grafana/generate.py: {stale}"


@pytest.mark.parametrize("lang", LANGS)
def test_dashboards_have_the_shape_grafana_imports(lang):
    uids = set()
    for slug, d in dashboards(lang).items():
        assert d["schemaVersion"] >= 36 and d["uid"] not in uids and len(d["uid"]) <= 40
        uids.add(d["uid"])
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), slug
        names = [v["name"] for v in d["templating"]["list"]]
        assert names[0] == "datasource" and d["templating"]["list"][0]["query"] in ("influxdb", "prometheus")
        for p in d["panels"]:
            g = p["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24, (slug, p["title"])
            if p["type"] != "row":
                assert p["targets"], (slug, p["title"])
                assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])
        key = "query" if lang == "influxql" else "expr"
        assert all(t.get(key) for _, t in targets(d)), slug


def test_both_languages_have_the_same_panels():
    """The same panels in the same places, but for the few the generator marks PromQL-only (they
    join gpu_power to gpu_work, which InfluxQL cannot): they come last, after every shared one."""
    gen = load_generator()
    only = {p.title for d in gen.DASHBOARDS for p in d.items if isinstance(p, gen.Panel) and p.langs == ("promql",)}
    assert only == {
        "Energy per 1,000 units by model and workload",
        "Cost per million units by model and workload",
        "What limits the work, by model (% of GPUs)",
    }
    influx, prom = dashboards("influxql"), dashboards("promql")
    for slug in influx:
        shared = [p for p in prom[slug]["panels"] if p["title"] not in only]
        assert [(p["title"], p["gridPos"]) for p in influx[slug]["panels"]] == [
            (p["title"], p["gridPos"]) for p in shared
        ], slug
        assert all(p["title"] in only for p in prom[slug]["panels"][len(shared) :]), slug


@pytest.mark.parametrize("lang", LANGS)
def test_template_variables_appear_only_in_their_regex_form(lang):
    allowed = r"=~ /\^\$(model|host|gpu)\$/" if lang == "influxql" else r'=~"\$(model|host|gpu)"'
    for slug, d in dashboards(lang).items():
        texts = [t.get("query") or t.get("expr") for _, t in targets(d)]
        texts += [a.get("query") or a.get("expr") for a in d["annotations"]["list"] if not a.get("builtIn")]
        texts += [v["definition"] for v in d["templating"]["list"] if v["type"] == "query"]
        for text in texts:
            rest = re.sub(allowed, "", text)
            assert not re.search(r"\$(model|host|gpu)\b", rest), f"{slug}: a variable outside its regex form: {text}"


def test_provisioning_names_both_folders():
    text = (GRAFANA / "provisioning.yaml").read_text()
    assert text.startswith("#") and "apiVersion: 1" in text
    paths = re.findall(r"^\s+path: (\S+)$", text, re.M)
    assert [p.rsplit("/", 1)[1] for p in paths] == list(LANGS)
    for lang in LANGS:
        assert (GRAFANA / lang).is_dir()
