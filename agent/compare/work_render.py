"""The per-unit-of-work document (gpuagent.compare.work) as a table, JSON, CSV or one HTML page."""

from __future__ import annotations

import csv
import html
import io
import json
from typing import Any

from gpuagent.compare import figures, tables
from gpuagent.compare.limits import CLASSES


def work_number(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if abs(value) and abs(value) < 10**-digits:
        return f"{value:.3g}"
    return f"{value:,.{digits}f}"


def rows(doc: dict) -> list[dict[str, Any]]:
    """One row per (group, unit): the figures every format shows."""
    out = []
    for g in doc["groups"]:
        units = g[figures.WORK] or {"": None}
        for unit, w in units.items():
            row = {"group": g["label"], "models": ", ".join(g["models"]), "gpus": g["gpus"], "unit": unit}
            for k in (
                figures.UNITS,
                figures.WORK_GPU_HOURS,
                figures.UNITS_PER_GPU_HOUR,
                figures.WH_PER_UNIT,
                figures.COST_PER_MILLION,
            ):
                row[k] = w.get(k) if w else None
            row["spread"] = w.get("spread") if w else None
            for c in CLASSES:
                row[f"limits_{c}_pct"] = g[figures.LIMITS].get(c)
                row[f"limits_{c}_proxy"] = g[figures.LIMITS_PROXY].get(c)
            out.append(row)
    return out


def _limits_text(g_row: dict) -> str:
    parts = []
    for c in CLASSES:
        v = g_row[f"limits_{c}_pct"]
        if v:
            parts.append(
                f"{c}{'*' if g_row[f'limits_{c}_proxy'] else ''} {v:.0f}%"
                if v >= 1
                else f"{c}{'*' if g_row[f'limits_{c}_proxy'] else ''} <1%"
            )
    return ", ".join(parts) or "-"


HEADERS = (
    "group",
    "unit",
    "GPUs",
    "units",
    "GPU-hours",
    "units/GPU-h",
    "Wh/1k units",
    "$/M units",
    "spread units/GPU-h",
    "what limits it (* proxy)",
)


def _compact(value: float) -> str:
    """A count in 4 significant characters at most: 950, 12.3k, 1.03M."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def _spread_text(spread: dict | None, digits: int = 0) -> str:
    if not spread:
        return "-"
    if digits == 0:
        return f"{_compact(spread['min'])}-{_compact(spread['max'])} ({spread['gpus']})"
    return f"{spread['min']:,.{digits}f}-{spread['max']:,.{digits}f}"


def _cells(r: dict, terminal: bool = False) -> list[str]:
    wh = r[figures.WH_PER_UNIT]
    spread = r["spread"]
    if terminal:
        spread_text = _spread_text(spread)
    else:
        spread_text = f"{spread['min']:,.0f}-{spread['max']:,.0f} ({spread['gpus']} GPUs)" if spread else "-"
    return [
        _short(r["group"]) if terminal else r["group"],
        r["unit"] or "-",
        str(r["gpus"]),
        work_number(r[figures.UNITS], 0),
        hours_text(r[figures.WORK_GPU_HOURS]) if terminal else work_number(r[figures.WORK_GPU_HOURS]),
        work_number(r[figures.UNITS_PER_GPU_HOUR], 1),
        work_number(wh * 1000 if wh is not None else None, 3),
        work_number(r[figures.COST_PER_MILLION], 3),
        spread_text,
        _limits_text(r),
    ]


def _short(label: str) -> str:
    """A model name without its maker (every card here is NVIDIA's): the widest column, shortened."""
    return label.replace("NVIDIA ", "")


def hours_text(hours: float | None) -> str:
    """GPU-hours; under one, minutes (0.0 GPU-hours says nothing of a short range)."""
    if hours is None:
        return "-"
    if hours < 1:
        return f"{hours * 60:.1f} GPU-min"
    return work_number(hours)


def _pct(value: float | None, best: bool) -> str:
    """A share of the best in whole percent; only the best itself reads 100% (99.6% is 99.6%)."""
    if value is None:
        return "-"
    text = f"{value:.0f}"
    if text == "100" and not best:
        text = f"{min(value, 99.9):.1f}"
    return f"{text}%"


def cross_rows(doc: dict, terminal: bool = False) -> list[list[str]]:
    out = []
    for c in doc.get(figures.CROSS_MODEL) or []:
        for m in c["models"]:
            spread = m["spread_units_per_s_per_gpu"]

            def of_best(figure: str, digits: int, m=m, c=c) -> str:
                value = m[figure]
                if value is None:
                    return "-"
                best = max(x[figure] for x in c["models"] if x[figure] is not None)
                return f"{work_number(value, digits)} ({_pct(m[f'{figure}_best_pct'], value == best)})"

            out.append(
                [
                    c["workload"],
                    c["unit"],
                    _short(m["model"]) if terminal else m["model"],
                    str(m["gpus"]),
                    hours_text(m[figures.WORK_GPU_HOURS]) if terminal else work_number(m[figures.WORK_GPU_HOURS]),
                    of_best("units_per_s_per_gpu", 1),
                    of_best("units_per_s_per_kw", 1),
                    of_best("units_per_dollar", 0),
                    _spread_text(spread, 1),
                ]
            )
    return out


CROSS_HEADERS = (
    "workload",
    "unit",
    "model",
    "GPUs",
    "GPU-hours",
    "units/s per GPU (of best)",
    "units/s per kW (of best)",
    "units per $ (of best)",
    "spread units/s per GPU",
)

WORK_NOTE = (
    "units/GPU-h: units per GPU-hour of exactly the GPUs that did the work, over the time they did it; "
    "Wh/1k units: the GPUs' energy per 1,000 units; $/M units: $ per million units, from [compare.prices] "
    "(the model's $ per GPU-hour x GPU-hours + $ per kWh x PUE x the GPUs' kWh; - where no price is set); "
    "spread: the lowest and highest units/GPU-h of one GPU (GPUs); what limits it: the share of the work's "
    "time in each class, * a proxy (compute*, memory*: from utilisation on cards without GPM). "
    'Model names without NVIDIA. docs/compare.md, "What limits the work".'
)

CROSS_NOTE = (
    "(of best): the share of the best model's figure for the workload (only the best reads 100%); "
    "units/s per GPU: units per second of one GPU; units/s per kW: units per second per kW the GPUs drew "
    "(units per kJ x 1,000); units per $: units per dollar of GPU-hours and energy, from [compare.prices]; "
    "spread: the lowest and highest units/s of one GPU."
)


PLACEMENT_NOTE = (
    "cheapest: the priced model with the lowest $ per unit for the workload at the measured rates; saving: what "
    "the workload's units in the range would have cost less there; evidence: GPU-hours and $ per million units "
    "on each priced model."
)

PLACEMENT_HEADERS = ("workload", "unit", "cheapest", "saving $", "saving %", "evidence (GPU-h, $/M units)", "caveats")


def _placement_rows(doc: dict) -> list[list[str]]:
    return [
        [
            p["workload"],
            p["unit"],
            p["cheapest"],
            work_number(p["saving"], 2),
            work_number(p["saving_pct"], 1),
            "; ".join(
                f"{m['model']} {work_number(m[figures.WORK_GPU_HOURS])} h, {work_number(m[figures.COST_PER_MILLION], 3)}"
                for m in p["models"]
            ),
            "; ".join(p["caveats"]) or "-",
        ]
        for p in doc.get(figures.PLACEMENT) or []
    ]


def _notes(doc: dict) -> list[str]:
    """The lines under the table: what is not priced."""
    if doc.get(figures.UNPRICED):
        return [
            f"unpriced (no GPU-hour price in [compare.prices]): {', '.join(doc['unpriced'])}: cost and units per $ null"
        ]
    return []


def _header(doc: dict) -> str:
    r = doc["range"]
    where = f", where {doc['where']}" if doc.get("where") else ""
    return (
        f"Work by {doc['by']}, {r['start']} .. {r['end']}{where} ({doc['source']['url']}, {doc['source']['database']})"
    )


def render_table(doc: dict, room: int | None = None) -> str:
    """The work table and the cross-model one, each split to the terminal's width (gpuagent.compare.tables)."""
    text_columns = {0, 1, 8, 9}
    columns = [tables.Column(h, right=i not in text_columns) for i, h in enumerate(HEADERS)]
    text = tables.render(
        _header(doc),
        columns,
        [_cells(r, terminal=True) for r in rows(doc)],
        keys=2,
        footnote=WORK_NOTE,
        room=room,
    )
    cross = cross_rows(doc, terminal=True)
    if cross:
        columns = [tables.Column(h, right=i >= 3) for i, h in enumerate(CROSS_HEADERS)]
        text += tables.render("The same workload on each model", columns, cross, keys=3, footnote=CROSS_NOTE, room=room)
    placed = _placement_rows(doc)
    if placed:
        columns = [tables.Column(h, right=i in (3, 4)) for i, h in enumerate(PLACEMENT_HEADERS)]
        text += tables.render(
            "Where each workload should run", columns, placed, keys=2, footnote=PLACEMENT_NOTE, room=room
        )
    for line in _notes(doc):
        text += tables.note(line, room)
    return text


def render_csv(doc: dict) -> str:
    """One row per group and unit, unrounded; the cross-model view is in the JSON and HTML."""
    out = io.StringIO()
    data = rows(doc)
    fields = [k for k in (data[0] if data else {"group": None}) if k != "spread"]
    fields += ["spread_gpus", "spread_min", "spread_max"]
    writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in data:
        spread = r.pop("spread") or {}
        writer.writerow(
            {**r, "spread_gpus": spread.get("gpus"), "spread_min": spread.get("min"), "spread_max": spread.get("max")}
        )
    return out.getvalue()


BAR = "#4472c4"
CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 12px; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; white-space: nowrap; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5em; }
figure { margin: 0; } figcaption { font-size: 13px; font-weight: bold; margin-bottom: 4px; }
svg text { font-size: 11px; fill: #222; }
dl { font-size: 12px; } dt { font-weight: bold; } dd { margin: 0 0 0.4em 1.5em; }
"""


def bar_svg(labels: list[str], values: list[float | None], unit: str) -> str:
    """Horizontal bars as inline SVG (no script, no font, no file): label | bar | value."""
    esc = html.escape
    width, label_w, value_w, row = 640, 190, 110, 22
    bar_w = width - label_w - value_w
    top = max((v for v in values if v is not None), default=0) or 1.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{row * len(labels) + 6}" role="img">']
    for i, (label, v) in enumerate(zip(labels, values, strict=True)):
        y = i * row + 4
        parts.append(f'<text x="0" y="{y + 14}">{esc(label)}</text>')
        if v is not None:
            parts.append(
                f'<rect x="{label_w}" y="{y}" width="{max(1.0, bar_w * v / top):.1f}" height="{row - 6}" fill="{BAR}"/>'
            )
        text = "n/a" if v is None else f"{v:,.3g} {unit}"
        parts.append(f'<text x="{width - value_w + 6}" y="{y + 14}">{esc(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def charts(doc: dict) -> list[tuple[str, str]]:
    """Per workload and unit on two or more models: energy per 1,000 units and cost per million by model."""
    by_key: dict[tuple, list] = {}
    for g in doc["groups"]:
        for unit, w in g[figures.WORK].items():
            by_key.setdefault((g["key"].get("workload", g["label"]), unit), []).append((", ".join(g["models"]), w))
    out = []
    for c in doc.get(figures.CROSS_MODEL) or []:
        entries = by_key.get((c["workload"], c["unit"]))
        if not entries or len(entries) < 2:
            continue
        labels = [m for m, _ in entries]
        for title, key, scale, unit in (
            (f"{c['workload']}: energy per 1,000 {c['unit']}", figures.WH_PER_UNIT, 1000, "Wh"),
            (f"{c['workload']}: cost per million {c['unit']}", figures.COST_PER_MILLION, 1, "$"),
        ):
            values = [w[key] * scale if w[key] is not None else None for _, w in entries]
            if any(v is not None for v in values):
                out.append((title, bar_svg(labels, values, unit)))
    return out


def render_html(doc: dict) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in HEADERS)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in _cells(r)) + "</tr>" for r in rows(doc))
    cross = cross_rows(doc)
    cross_html = ""
    if cross:
        chead = "".join(f"<th>{esc(h)}</th>" for h in CROSS_HEADERS)
        cbody = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in cross)
        cross_html = (
            f'<h2>The same workload on each model</h2><table id="cross-model"><thead><tr>{chead}</tr>'
            f"</thead><tbody>{cbody}</tbody></table>"
        )
    placed = _placement_rows(doc)
    if placed:
        phead = "".join(f"<th>{esc(h)}</th>" for h in PLACEMENT_HEADERS)
        pbody = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in placed)
        cross_html += (
            f'<h2>Where each workload should run</h2><table id="placement"><thead><tr>{phead}</tr>'
            f"</thead><tbody>{pbody}</tbody></table>"
        )
    cross_html += "".join(f'<p class="note">{esc(line)}</p>' for line in _notes(doc))
    figures = "".join(
        f'<figure aria-label="{esc(t)}"><figcaption>{esc(t)}</figcaption>{svg}</figure>' for t, svg in charts(doc)
    )
    defs = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in doc["definitions"].items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>gpuagent compare: work</title>
<style>{CSS}</style></head>
<body>
<h1>Work per GPU-hour, per kWh and per dollar</h1>
<p>{esc(_header(doc))}</p>
<table id="work"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
{cross_html}
<div class="charts">{figures}</div>
<h2>Definitions</h2><dl>{defs}</dl>
<p>What limits it: docs/compare.md, "What limits the work"; * marks a class reached through a proxy field.</p>
</body></html>
"""


def render_work(doc: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    return {"table": render_table, "csv": render_csv, "html": render_html}[fmt](doc)
