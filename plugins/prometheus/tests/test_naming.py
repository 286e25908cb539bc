"""The InfluxDB -> Prometheus mapping: one rule, checked against every declared field."""

from __future__ import annotations

import re

import pytest

from gpuagent.plugins.prometheus.exposition import label_name
from gpuagent.plugins.prometheus.naming import influx_to_prometheus, markdown_table, metric_for, sanitize
from gpuagent.schema import catalog
from gpuagent.schema.fields import Measurement, counter, gauge, plain

# README unit column -> the base-unit suffix the Prometheus name must end in.
UNIT_NAMES = {
    "MHz": "_hertz",
    "W": "_watts",
    "J": "_joules",
    "°C": "_celsius",
    "%": "_ratio",
    "bytes": "_bytes",
    "bits": "_bytes",
    "ns": "_seconds",
    "ms": "_seconds",
    "s": "_seconds",
    "GB/s": "_bytes_per_second",
    "B/s": "_bytes_per_second",
    "bytes/s": "_bytes_per_second",
}


def test_the_schema_declares_the_fields_of_every_built_in_measurement():
    docs = catalog.builtin()
    measurements = {m for m, _ in docs}
    assert {
        "gpu_power",
        "gpu_clocks",
        "gpu_memory",
        "gpu_pcie",
        "gpu_p2p",
        "gpu_nvlink",
        "gpu_mig",
        "gpu_vgpu",
        "gpu_health",
        "gpu_process",
        "gpu_work",
        "host",
        "gpuagent",
    } <= measurements
    assert len(docs) > 150
    assert docs[("gpu_power", "energy_j")].kind == "counter" and docs[("gpu_power", "power_w")].kind == "gauge"


def test_every_documented_field_maps_to_a_valid_unique_base_unit_name():
    mapping = influx_to_prometheus()
    names: dict[str, tuple] = {}
    for (measurement, field), spec in mapping.items():
        doc = catalog.builtin()[(measurement, field)]
        assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", spec.name)
        assert not re.search(r"_(ns|ms|us|s|pct|mhz|w|j|c|bits|gbps|per_s|per_sec)(_|$)", spec.name), spec.name
        if spec.kind == "counter":
            assert spec.name.endswith("_total")
        else:
            assert not spec.name.endswith(("_total", "_count", "_sum", "_bucket")), spec.name
        assert spec.kind == "counter" or not (field.endswith("_total") or doc.kind == "counter"), (measurement, field)
        suffix = UNIT_NAMES.get(plain(doc.unit))
        if suffix and doc.type is not str:
            assert spec.name.removesuffix("_total").endswith(suffix), (measurement, field, doc.unit, spec.name)
        assert doc.plain_help and doc.plain_help in spec.help or field.replace("_", " ") in spec.help
        key = (spec.name, spec.label)
        if (measurement, field) in ONE_FAMILY:  # the per-CPU series of the same quantity, by design
            continue
        assert names.setdefault(key, (measurement, field)) == (measurement, field), f"{key} twice"


# Documented fields that share a family with another on purpose: host_cpu's usage_pct (label `cpu`)
# is the per-CPU series of host's cpu_usage_pct, gpuagent_host_cpu_usage_ratio, same unit and type.
ONE_FAMILY = {("host_cpu", "usage_pct")}


def test_the_fields_that_share_a_family_agree_in_unit_and_kind():
    docs = catalog.builtin()
    for measurement, field in ONE_FAMILY:
        mine = metric_for("gpuagent", measurement, field)
        [other] = [
            (m, f)
            for (m, f) in docs
            if (m, f) != (measurement, field) and metric_for("gpuagent", m, f).name == mine.name
        ]
        theirs = metric_for("gpuagent", *other)
        assert (theirs.kind, theirs.scale) == (mine.kind, mine.scale)
        assert docs[other].unit == docs[(measurement, field)].unit


@pytest.mark.parametrize(
    "measurement, field, name, kind, scale",
    [
        ("gpu_power", "energy_j", "gpuagent_gpu_power_energy_joules_total", "counter", 1.0),
        ("gpu_power", "power_w", "gpuagent_gpu_power_power_watts", "gauge", 1.0),
        ("gpu_clocks", "sm_clock_mhz", "gpuagent_gpu_clocks_sm_clock_hertz", "gauge", 1e6),
        ("gpu_clocks", "sw_power_cap_time_ns", "gpuagent_gpu_clocks_sw_power_cap_time_seconds_total", "counter", 1e-9),
        ("gpu_memory", "gpu_util_pct", "gpuagent_gpu_memory_gpu_util_ratio", "gauge", 0.01),
        ("gpu_memory", "dram_bw_gbps", "gpuagent_gpu_memory_dram_bw_bytes_per_second", "gauge", 1e9),
        ("gpu_memory", "bus_width_bits", "gpuagent_gpu_memory_bus_width_bytes", "gauge", 0.125),
        ("gpu_pcie", "tx_bytes_per_s", "gpuagent_gpu_pcie_tx_bytes_per_second", "gauge", 1.0),
        ("host", "cpu_count", "gpuagent_host_cpus", "gauge", 1.0),
        ("gpuagent", "gather_time_ms", "gpuagent_gather_time_seconds", "gauge", 1e-3),
        ("gpuagent", "errors_total", "gpuagent_errors_total", "counter", 1.0),
        ("gpu_health", "verdict", "gpuagent_gpu_health_verdict_info", "info", 1.0),
        ("gpu_work", "units_total", "gpuagent_gpu_work_units_total", "counter", 1.0),
        ("gpu_work", "gpus", "gpuagent_gpu_work_gpus", "gauge", 1.0),
    ],
)
def test_named_examples(measurement, field, name, kind, scale):
    spec = metric_for("gpuagent", measurement, field, field == "verdict")
    assert (spec.name, spec.kind, spec.scale) == (name, kind, scale)


def test_a_new_field_maps_by_rule_without_an_edit():
    """Fields other work adds (a DRAM rename, a verdict) get names from their suffix alone."""
    assert (
        metric_for("gpuagent", "gpu_memory", "dram_read_bytes_total").name
        == "gpuagent_gpu_memory_dram_read_bytes_total"
    )
    assert metric_for("gpuagent", "gpu_job", "busy_s").name == "gpuagent_gpu_job_busy_seconds"
    spec = metric_for("gpuagent", "gpu_health", "verdict_reason", True)
    assert spec.name == "gpuagent_gpu_health_verdict_reason_info" and spec.label == "verdict_reason"
    assert metric_for("", "gpu_power", "power_w").name == "gpu_power_power_watts"  # namespace ""


def test_a_plugin_s_declared_fields_are_found_once_its_host_declares_them(monkeypatch):
    """A third-party collector's schema reaches the sink through the host: HELP, counter, unit."""
    monkeypatch.setattr(catalog, "_added", {})
    metric_for.cache_clear()
    schema = (
        Measurement(
            "demo_m",
            (gauge("load1", float, unit="tasks", help="`load` over 1 min"), counter("x_time_ns", int, unit="ns")),
        ),
    )
    assert "undocumented" in metric_for("gpuagent", "demo_m", "load1").help
    metric_for.cache_clear()
    catalog.declare(schema)
    assert metric_for("gpuagent", "demo_m", "load1").help == "load over 1 min (InfluxDB demo_m.load1, tasks)"
    spec = metric_for("gpuagent", "demo_m", "x_time_ns")
    assert (spec.name, spec.kind, spec.scale) == ("gpuagent_demo_m_x_time_seconds_total", "counter", 1e-9)
    # A built-in declaration is not replaced by a plugin's.
    catalog.declare((Measurement("gpu_power", (gauge("power_w", float, help="other words"),)),))
    assert catalog.lookup("gpu_power", "power_w").help != "other words"
    metric_for.cache_clear()


def test_the_table_in_docs_prometheus_md_is_the_rule():
    """Every row of the generated listing is what the rule gives for a declared field, and the
    listing is the whole of markdown_table() (a field declared later is listed at once)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "prometheus.md").read_text()
    body = text.split("<!-- mapping table: begin -->")[1].split("<!-- mapping table: end -->")[0]
    rows = re.findall(r"^\| `(\w+)\.(\w+)` \| `([\w{}=…]+)` \| (\w+) \| ([\d.e+-]+) \|$", body, re.M)
    assert len(rows) > 150
    assert body.strip() == markdown_table().strip(), "regenerate the table (the command above it in docs/prometheus.md)"
    docs = catalog.builtin()
    for measurement, field, name, kind, scale in rows:
        doc = docs[(measurement, field)]  # KeyError: the schema no longer declares it
        spec = metric_for("gpuagent", measurement, field, doc.type is str)
        shown = f"{spec.name}{{{spec.label}=…}}" if spec.kind == "info" else spec.name
        assert (shown, spec.kind, float(scale)) == (name, kind, spec.scale), (measurement, field)


@pytest.mark.parametrize(
    "text, name", [("a-b.c d", "a_b_c_d"), ("9lives", "_9lives"), ("gpu:0", "gpu_0"), ("ok_name", "ok_name"), ("", "")]
)
def test_sanitize_keeps_valid_characters_and_an_empty_name_stays_empty(text, name):
    # An empty name stays empty (no "_" made up): a metric is named from its non-empty parts,
    # and a label key that comes out empty is named by label_name.
    assert sanitize(text) == name


@pytest.mark.parametrize("key, label", [("", "tag_"), ("__name__", "tag__name__"), ("gpu-uuid", "gpu_uuid")])
def test_label_names_are_never_empty_nor_reserved(key, label):
    assert label_name(key) == label
