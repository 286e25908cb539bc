"""Every field a collector declares is in its README, and every field it emits is declared.

The field tables of the plugin READMEs (and of agent/service/measurement.md) are generated
from the declarations (``schema`` of each collector and sink, gpuagent.schema); a README that
differs from what they generate fails here (``python -m gpuagent.schema.readme --write``
rewrites it). The slow check runs each enabled collector of a simulated agent twice (GPM
fields appear from the second run) on every built-in profile and looks each field it emits up
in its class's declarations, with its type, and each tag among the declared ones.
"""

from __future__ import annotations

import re
import sys

import pytest

from conftest import REPO
from gpuagent.plugin_host import PluginHost
from gpuagent.schema import catalog, readme
from gpuagent.schema.fields import Field, Measurement, counter, gauge
from gpuagent.service.runtime import Options, build
from gpuagent.sim import profile as sim_profile
from gpuagent.testing import IDENTITY_TAGS, RecordingAccumulator

ROW = re.compile(r"^\|([^|]+)\|", re.M)
CODE = re.compile(r"`([^`\s]+)`")


def builtin_profiles() -> list[str]:
    return sorted(sim_profile.builtin_names())


def as_pattern(name: str) -> re.Pattern[str]:
    """A documented name with placeholders (`link<N>_...`, `..._{reason}_...`) as a regex."""
    parts = re.split(r"<[^>]*>|\{[^}]*\}", name)
    return re.compile("^" + "[A-Za-z0-9]+".join(re.escape(p) for p in parts) + "$")


def is_documented(name: str, names: set[str]) -> bool:
    return name in names or any(as_pattern(n).match(name) for n in names if "<" in n or "{" in n)


def declared_field(schema: tuple[Measurement, ...], measurement: str, name: str) -> Field | None:
    for shape in schema:
        if shape.name == measurement:
            for field in shape.fields:
                if field.name == name or (
                    ("<" in field.name or "{" in field.name) and as_pattern(field.name).match(name)
                ):
                    return field
    return None


@pytest.mark.parametrize("path, schema", readme.builtin_readmes(REPO), ids=lambda v: str(getattr(v, "parent", "")))
def test_every_readme_field_table_is_what_the_declarations_generate(path, schema):
    text = path.read_text()
    assert readme.render(text, schema, str(path)) == text, f"run: python -m gpuagent.schema.readme --write ({path})"


def test_the_third_party_example_generates_its_tables_the_same_way():
    path = REPO / "examples" / "gpuagent-infiniband" / "README.md"
    schema = readme.module_schema("gpuagent_infiniband")
    assert {m.key for m in schema} == {"infiniband/port", "infiniband/counters"}
    assert readme.render(path.read_text(), schema) == path.read_text()


def test_a_changed_declaration_changes_its_table_and_a_marker_must_match_one():
    shape = Measurement("demo", (gauge("power_w", float, "W", "draw", "`nvmlDeviceGetPowerUsage`"),))
    text = "# demo\n\n<!-- fields: demo -->\n| field | type |\n| --- | --- |\n| `old` | int |\n\nAfter.\n"
    out = readme.render(text, (shape,))
    assert "| `power_w` | float | W | `nvmlDeviceGetPowerUsage` | draw |" in out and "old" not in out
    assert out.endswith("\nAfter.\n") and readme.render(out, (shape,)) == out
    sink = Measurement(
        "gpuagent", (counter("rotations_total", int, help="rotations"),), source_column=None, unit_column=False
    )
    assert readme.table(sink) == [
        "| field | type | meaning |",
        "| --- | --- | --- |",
        "| `rotations_total` | int, counter | rotations |",
    ]
    with pytest.raises(readme.Mismatch, match="no table for demo"):
        readme.render("# demo\n", (shape,))
    with pytest.raises(readme.Mismatch, match="names no declaration"):
        readme.render(text.replace("fields: demo", "fields: other"), (shape,))


def test_the_command_says_which_readme_differs(tmp_path, capsys):
    (tmp_path / "README.md").write_text(
        "# x\n\n<!-- fields: infiniband/port -->\n\n<!-- fields: infiniband/counters -->\n"
    )
    args = ["--plugin", "gpuagent_infiniband", str(tmp_path / "README.md")]
    assert readme.main(args) == 1 and "differs" in capsys.readouterr().out
    assert readme.main([*args, "--write"]) == 0 and readme.main(args) == 0
    assert readme.main(["--root", str(tmp_path)]) == 2 and "not a gpuagent checkout" in capsys.readouterr().err


def test_each_built_in_collector_and_sink_declares_its_folder_s_schema():
    host = PluginHost(load_entry_points=False).load()
    classes = [*host.collectors.values(), *host.sinks.values()]
    for cls in classes:
        plugin = cls.__module__.rsplit(".", 1)[-1]
        assert cls.schema and cls.schema == catalog.plugin_schema(plugin), cls.__name__
    assert {c.__module__.rsplit(".", 1)[-1] for c in classes} == set(catalog.builtin_plugins())


def test_a_counter_says_so_in_its_readme_row():
    """The README shows kind only in words (the notes, or the type cell of a sink's table)."""
    for shape in catalog.builtin_schema():
        for field in shape.fields:
            says = bool(re.search(r"\bcounter\b", field.help, re.I)) or not shape.unit_column
            assert field.kind == "gauge" or says, f"{shape.key}.{field.name}: a counter whose notes do not say so"
            assert field.kind == "counter" or not field.name.endswith("_total"), f"{shape.key}.{field.name}"


def test_a_schema_that_is_not_declarations_fails_its_plugin(tmp_path):
    (tmp_path / "bad_schema.py").write_text(
        "import gpuagent\n\n"
        "class C(gpuagent.Collector):\n    name = 'bad_schema'\n    schema = ('gpu_power',)\n\n"
        "@gpuagent.hookimpl\ndef gpuagent_register_collectors(register):\n    register(C)\n"
    )
    host = PluginHost(load_entry_points=False, plugins_dir=tmp_path)
    host.load()
    info = host.plugins.get("bad_schema")
    assert info is not None and "bad_schema" not in host.collectors, host.plugins_dir_refused
    assert info.status == "failed" and "schema must be a tuple" in (info.error or "")


def test_every_field_of_the_agent_s_own_points_is_declared(tmp_path, monkeypatch):
    """The gpuagent measurement: per collector, per sink (the sinks' own statistics), the agent's."""
    monkeypatch.delenv("GPUAGENT_CONFIG", raising=False)
    config = tmp_path / "gpuagent.toml"
    config.write_text(
        f'[agent]\nhostname = "own"\n[sinks.file]\npath = "{tmp_path / "out.lp"}"\n'
        '[sinks.influxdb]\nurl = "http://127.0.0.1:9"\nbucket = "b"\nwrite_ahead = false\n'
    )
    agent = build(Options(config_path=config, simulate="h100-sxm:1"))
    try:
        agent.scheduler.run_once()
        points = agent.scheduler.self_points()
    finally:
        agent.close(flush_timeout=0.1)
    assert {p.tags.get("sink") for p in points} >= {"file", "influxdb"}
    undeclared = {(p.measurement, f) for p in points for f in p.fields if catalog.lookup(p.measurement, f) is None}
    assert not undeclared, sorted(undeclared)


@pytest.mark.parametrize("profile", builtin_profiles())
@pytest.mark.slow
def test_every_emitted_field_and_tag_is_declared(profile, tmp_path, monkeypatch):
    monkeypatch.delenv("GPUAGENT_CONFIG", raising=False)
    config = tmp_path / "gpuagent.toml"
    config.write_text('[agent]\nhostname = "readme-check"\n')
    agent = build(Options(config_path=config, simulate=f"{profile}:2", test=True))
    problems = []
    try:
        for collector in agent.collectors:
            module = sys.modules[type(collector).__module__]
            if not module.__name__.startswith("gpuagent.plugins."):
                continue
            schema = type(collector).schema
            acc = RecordingAccumulator(default_tags={"host": "readme-check"})
            for _ in range(2):
                collector.collect(acc)
            for point in acc.points:
                tags = {t for shape in schema if shape.name == point.measurement for t in shape.tags}
                for name, value in point.fields.items():
                    field = declared_field(schema, point.measurement, name)
                    if field is None:
                        problems.append(f"{collector.name}: {point.measurement}.{name} not declared")
                    elif type(value) is not field.type:
                        problems.append(
                            f"{collector.name}: {point.measurement}.{name} is {type(value).__name__}, declared {field.type_name}"
                        )
                for tag in point.tags:
                    if tag not in IDENTITY_TAGS and tag not in tags:
                        problems.append(f"{collector.name}: {point.measurement} tag {tag} not declared")
    finally:
        agent.close(flush_timeout=1)
    assert not problems, "\n".join(sorted(set(problems)))
