"""The report as a table (rich), JSON, CSV or one self-contained HTML page with SVG charts."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from gpuagent.compare import figures, tables
from gpuagent.compare.core import THROTTLE_REASONS
from gpuagent.compare.health import health_text

GIB = figures.GIB
MIB = figures.MIB


def _num(value, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value / scale:,.{digits}f}{unit}"


def _energy(kwh: float | None) -> str:
    """kWh, or Wh below one (a short range's 0.002 kWh reads 2.0 Wh); the JSON keeps kWh."""
    if kwh is None:
        return "-"
    return f"{kwh * 1000:,.1f} Wh" if kwh < 1 else f"{kwh:,.3f} kWh"


def _throttle_text(shares: dict[str, float]) -> str:
    parts = [f"{k} {v:.0f}%" for k, v in shares.items() if k in THROTTLE_REASONS and v > 0]
    return ", ".join(parts) or "none"


def _mig_text(m: dict) -> str:
    if not m["capable_gpus"]:
        return "-"
    text = f"{m['enabled_gpus']}/{m['capable_gpus']} on"
    if m["devices"]:
        text += f", {m['devices']} dev"
        if m["profiles"]:
            text += f" ({', '.join(m['profiles'])})"
    return text


def _vgpu_text(v: dict) -> str:
    host = v["modes"].get("host_vgpu", 0)
    others = {k: n for k, n in v["modes"].items() if k not in ("none", "host_vgpu")}
    parts = []
    if host:
        parts.append(f"host {host} GPU, {v['instances']} inst")
    parts += [f"{k} {n}" for k, n in others.items()]
    return "; ".join(parts) or "-"


def _l2_text(p: dict | None) -> str:
    if not p:
        return "-"
    return f"{_num(p['l2_effective_bytes'], 0, MIB, ' MiB')}, L2/DRAM {_num(p['l2_dram_ratio'], 2)}x"


# Formatters of the structured figures (gpuagent.compare.figures.Column.text), by name.
TEXT: dict[str, Any] = {
    "label": lambda v: v,
    "count": str,
    "length": lambda v: str(len(v)),
    "throttle": _throttle_text,
    "mig_tally": _mig_text,
    "vgpu_tally": _vgpu_text,
    "l2_probe": _l2_text,
    "health": health_text,
}


def _cell(column: figures.Column):
    """A column's cell of a group: its figure through the formatter, or its one or two numbers."""
    if column.text:
        fmt, (key,) = TEXT[column.text], column.keys
        return lambda g: fmt(g.get(key))
    parts = list(zip(column.keys, column.digits, column.scale, strict=True))
    return lambda g: " / ".join(_num(g[key], digits, scale) for key, digits, scale in parts)


# (column title, function of a group) for the table, CSV and HTML alike: the registry's columns.
COLUMNS: list[tuple[str, Any]] = [(c.title, _cell(c)) for c in figures.COLUMNS]

EFFICIENCY_NOTE = (
    "Wh / busy GPU-h (efficiency) = energy used (sum of energy_j counter increases) / busy GPU-hours "
    "(each GPU's observed time x its mean GPU utilisation); lower is better."
)


def _header(doc: dict) -> str:
    r = doc["range"]
    where = f", where {doc['where']}" if doc.get("where") else ""
    return (
        f"GPUs by {doc['by']}, {r['start']} .. {r['end']}{where} ({doc['source']['url']}, {doc['source']['database']})"
    )


def _approximate_note(doc: dict) -> str:
    """What a rollup report computed approximately (its JSON's source.approximate), and by how much."""
    p95 = (doc["source"].get("approximate") or {}).get(figures.POWER_P95)
    if not p95:
        return ""
    return (
        f" power p95 W is approximate: from {p95['bin_w']:g} W power histograms of the rollups, "
        f"within {p95['bound_w']:g} W of the exact value (--raw for exact)."
    )


def render_json(doc: dict) -> str:
    return json.dumps(doc, indent=2) + "\n"


def render_table(doc: dict, width: int | None = None) -> str:
    """Groups side by side (a column each) when there are few; a row per group otherwise. Split to the
    terminal's width (gpuagent.compare.tables), the definitions under it; --by host names each host's model."""
    groups = doc["groups"]
    # The terminal's energy in Wh below 1 kWh (the HTML page and the CSV keep kWh).
    energy = next(c.keys[0] for c in figures.COLUMNS if c.title == figures.ENERGY_COLUMN)
    columns = [("energy", lambda g: _energy(g[energy])) if t == figures.ENERGY_COLUMN else (t, f) for t, f in COLUMNS]
    if doc.get("by") == "host":
        columns.insert(1, ("model", lambda g: ", ".join(g.get("models") or []) or "-"))
    if len(groups) <= 8:
        heads = [tables.Column("")] + [tables.Column(g["label"], right=True) for g in groups]
        rows = [[title, *(fn(g) for g in groups)] for title, fn in columns[1:]]
    else:
        heads = [
            tables.Column(title, right=not (i == 0 or title in TEXT_COLUMNS or title == "model"))
            for i, (title, _) in enumerate(columns)
        ]
        rows = [[fn(g) for _, fn in columns] for g in groups]
    return tables.render(
        _header(doc), heads, rows, keys=1, footnote=EFFICIENCY_NOTE + _approximate_note(doc), room=width
    )


TEXT_COLUMNS = {"group", "throttled", "P2P", "MIG", "vGPU", "L2 probe"}


def render_csv(doc: dict) -> str:
    """One row per group; unrounded numbers; nested figures flattened (the registry's csv_columns)."""
    columns = figures.csv_columns(doc["groups"])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([header for header, _ in columns])
    for g in doc["groups"]:
        w.writerow(["" if v is None else v for v in (value(g) for _, value in columns)])
    return buf.getvalue()
