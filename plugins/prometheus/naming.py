"""InfluxDB field -> Prometheus metric: one rule, driven by the field's unit suffix and its declaration.

The InfluxDB names never change; this maps each (measurement, field) to a
Prometheus name in base units, a type and a scale (Prometheus value = field
value × scale); HELP and counter-or-gauge come from the field's declaration
(gpuagent.schema). A field added to a plugin's schema maps without an edit
here. The table in README.md ("Names and units") is this module in words;
tests/test_naming.py checks every declared field against it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from gpuagent.schema import catalog
from gpuagent.schema.fields import Field, plain

_INVALID = re.compile(r"[^a-zA-Z0-9_]")

# Field-name suffix -> (Prometheus suffix, scale to the base unit). Longest match first.
# MHz becomes hertz (×1e6): Prometheus' base unit, as node_exporter's *_frequency_hertz.
UNIT_SUFFIXES: tuple[tuple[str, str, float], ...] = (
    ("_bytes_per_sec", "_bytes_per_second", 1.0),
    ("_bytes_per_s", "_bytes_per_second", 1.0),
    ("_gbps", "_bytes_per_second", 1e9),  # GB/s, decimal (as the memory plugin computes it)
    ("_seconds", "_seconds", 1.0),
    ("_ns", "_seconds", 1e-9),
    ("_us", "_seconds", 1e-6),
    ("_ms", "_seconds", 1e-3),
    ("_s", "_seconds", 1.0),
    ("_mhz", "_hertz", 1e6),
    ("_w", "_watts", 1.0),
    ("_j", "_joules", 1.0),
    ("_c", "_celsius", 1.0),
    ("_pct", "_ratio", 0.01),
    ("_bits", "_bytes", 0.125),
    ("_bytes", "_bytes", 1.0),
)
# Reserved for histograms and summaries: a gauge must not end in them.
_RESERVED = ("_count", "_sum", "_bucket")


@dataclass(frozen=True)
class MetricSpec:
    name: str  # the sample name (counters end in _total)
    kind: str  # "counter", "gauge" or "info" (exposed as a gauge of 1, labelled with the value)
    scale: float
    help: str
    label: str = ""  # info only: the label that carries the string value


def sanitize(name: str) -> str:
    name = _INVALID.sub("_", name)
    return "_" + name if name[:1].isdigit() else name


def _unit(base: str) -> tuple[str, float]:
    for suffix, replacement, scale in UNIT_SUFFIXES:
        if base.endswith(suffix) and len(base) > len(suffix):
            return base[: -len(suffix)] + replacement, scale
    for suffix in _RESERVED:
        if base.endswith(suffix):  # cpu_count -> cpus, nvlink_count -> nvlinks
            return base[: -len(suffix)] + "s", 1.0
    return base, 1.0


def _help(measurement: str, field: str, doc: Field | None, scale: float) -> str:
    origin = f"{measurement}.{field}"
    if scale != 1.0:
        origin += f" × {scale:g}"
    if doc is None:
        return f"{origin} (undocumented field)"
    text = doc.plain_help or field.replace("_", " ")
    unit = plain(doc.unit)
    unit = f", {unit}" if unit and unit not in text else ""
    return f"{text} (InfluxDB {origin}{unit})"


def prefix(namespace: str, measurement: str) -> str:
    """`<namespace>_<measurement>`, without repeating the namespace for the agent's own measurement."""
    if not namespace or measurement == namespace:
        return sanitize(measurement)
    return sanitize(f"{namespace}_{measurement}")


@lru_cache(maxsize=8192)
def metric_for(namespace: str, measurement: str, field: str, is_string: bool = False) -> MetricSpec:
    """The Prometheus metric of one field (is_string: the value is a str, exposed as an _info gauge)."""
    doc = catalog.lookup(measurement, field)
    head = prefix(namespace, measurement)
    if is_string:
        label = sanitize(field)
        return MetricSpec(f"{head}_{label}_info", "info", 1.0, _help(measurement, field, doc, 1.0), label)
    counter = field.endswith("_total") or (doc is not None and doc.kind == "counter")
    base = sanitize(field[: -len("_total")] if field.endswith("_total") else field)
    base, scale = _unit(base)
    name = f"{head}_{base}"
    if counter:
        return MetricSpec(name + "_total", "counter", scale, _help(measurement, field, doc, scale))
    return MetricSpec(name, "gauge", scale, _help(measurement, field, doc, scale))


def influx_to_prometheus(namespace: str = "gpuagent") -> dict[tuple[str, str], MetricSpec]:
    """The whole mapping of the built-in declarations, for docs and tests."""
    return {key: metric_for(namespace, *key) for key in catalog.builtin()}


def markdown_table(namespace: str = "gpuagent") -> str:
    """The built-in mapping as the Markdown table of docs/prometheus.md."""
    rows = ["| InfluxDB measurement.field | Prometheus metric | type | scale |", "| --- | --- | --- | --- |"]
    for (measurement, field), doc in sorted(catalog.builtin().items()):
        spec = metric_for(namespace, measurement, field, doc.type is str)
        name = f"{spec.name}{{{spec.label}=…}}" if spec.kind == "info" else spec.name
        rows.append(f"| `{measurement}.{field}` | `{name}` | {spec.kind} | {spec.scale:g} |")
    return "\n".join(rows) + "\n"
