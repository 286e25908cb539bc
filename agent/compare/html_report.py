"""`compare --format html`: one self-contained page (no script, no external file, no matplotlib).

The page is a list of sections, each a function of the compare document (SECTIONS, in page order):
the header, the tables, one chart per figure, the hosts and the definitions. Bars are HTML, laid
out by the browser in a grid (label | bar | numbers), so a number never sits on a bar, a tick or
another number, and the page keeps the window's width at any count of groups. `bar_chart` is the
one helper behind every bar chart: beyond TOP_N groups it draws the highest TOP_N and one row for
the rest; a value far above the others (an idle GPU's energy per busy GPU-hour) is drawn to the
edge and marked instead of setting the axis. Power over time is one hand-written SVG.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuagent.compare import figures
from gpuagent.compare.core import THROTTLE_REASONS, finite
from gpuagent.compare.limits import CLASSES
from gpuagent.compare.render import COLUMNS, EFFICIENCY_NOTE, TEXT_COLUMNS
from gpuagent.compare.work_render import CROSS_HEADERS, cross_rows, work_number

esc = html.escape

TOP_N = 20  # bars per chart; more groups: the highest TOP_N and a row for the rest
LINES = 8  # a line per group in the power-over-time chart up to LINES groups; more: HIGHEST and the fleet
HIGHEST = 3
# A value above OUTLIER_FACTOR × the median of its chart (and above the interquartile fence) is
# drawn to the edge and marked: one idle GPU's 27,847 Wh per busy GPU-hour must not squash 15 bars.
OUTLIER_FACTOR = 3.0
PALETTE = ("#4472c4", "#ed7d31", "#70ad47", "#7f3fbf", "#c00000", "#00a3a3", "#b8860b", "#d45fa0")
REST_COLOR = "#9a9a9a"


@dataclass
class Bar:
    """One row of a bar chart: a value (or stacked segments: (name, value)) and an optional mark."""

    label: str
    value: float | None
    mark: float | None = None
    segments: list[tuple[str, float]] = field(default_factory=list)


# -- numbers and times ----------------------------------------------------------------------------


def number(value: float | None, digits: int | None = None) -> str:
    """1,234 / 56.7 / 0.42: digits by magnitude unless given; "n/a" for a missing value."""
    if value is None or not finite(value):
        return "n/a"
    if value == 0:
        return "0"
    if digits is None:
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 1 else 2
    return f"{value:,.{digits}f}"


def stamp(ns: int) -> str:
    """2026-12-01 23:25:00 (UTC, to the second: the JSON keeps the nanoseconds)."""
    return dt.datetime.fromtimestamp(ns // 1_000_000_000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def span_text(seconds: float) -> str:
    """3 d 4 h / 1 h 30 min / 5 min 1 s / 42 s."""
    s = int(round(seconds))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if s >= size or (unit == "s" and not parts):
            parts.append(f"{s // size} {unit}")
            s %= size
    return " ".join(parts[:2])


def nice_ticks(top: float, count: int = 4) -> list[float]:
    """0 and round steps (1, 2, 2.5, 5 × 10^k) up to at most `top`."""
    if not top > 0:
        return [0.0]
    raw = top / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(top / step + 1e-9) + 1)]


def axis_top(values: Sequence[float]) -> tuple[float, float]:
    """(axis maximum, outlier threshold): values above the threshold are off the axis."""
    vals = sorted(v for v in values if finite(v) and v > 0)
    if not vals:
        return 1.0, math.inf
    threshold = math.inf
    if len(vals) >= 3:
        n = len(vals)
        median = vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
        q1, q3 = vals[n // 4], vals[(3 * n) // 4]
        threshold = max(OUTLIER_FACTOR * median, q3 + 3 * (q3 - q1))
    inside = [v for v in vals if v <= threshold]
    top = max(inside)
    return (top * 1.05 if len(inside) < len(vals) else top), threshold


# -- the bar chart helper --------------------------------------------------------------------------


def bar_chart(
    title: str,
    unit: str,
    bars: list[Bar],
    *,
    color: str = PALETTE[0],
    mark_name: str = "",
    value_name: str = "",
    note: str = "",
    colors: dict[str, str] | None = None,
    digits: int | None = None,
) -> str:
    """A <figure> of horizontal bars, one per group: label | bar (with a mark tick) | value | mark.

    Stacked when the bars have segments (colors: segment name -> colour, shown as a legend above
    the bars). Beyond TOP_N bars: the TOP_N highest, then one row spanning the others' range.
    """
    total = [b.value if not b.segments else sum(v for _, v in b.segments) for b in bars]
    order = sorted(range(len(bars)), key=lambda i: (not finite(total[i]), -(total[i] or 0)))
    shown = list(range(len(bars))) if len(bars) <= TOP_N else order[:TOP_N]
    rest = [] if len(bars) <= TOP_N else order[TOP_N:]
    top, threshold = axis_top([t for t in total if finite(t)] + [b.mark for b in bars if finite(b.mark)])

    def pct(v: float) -> float:
        return max(0.0, min(100.0, 100.0 * v / top))

    heads = f'<span class="bh">{esc(value_name or unit)}</span>'
    heads += f'<span class="bh">{esc(mark_name)}</span>' if mark_name else ""
    cols = "bars with-mark" if mark_name else "bars"
    rows = [f'<div class="br head"><span></span><span class="axis-unit">{esc(unit)}</span>{heads}</div>']
    off = []
    for i in shown:
        b, v = bars[i], total[i]
        inner = ""
        if b.segments:
            left = 0.0
            for name, sv in b.segments:
                w = pct(left + sv) - pct(left)
                if w > 0:
                    inner += (
                        f'<span class="seg" style="left:{pct(left):.2f}%;width:{w:.2f}%;'
                        f'background:{(colors or {}).get(name, color)}" title="{esc(name)} {number(sv)}"></span>'
                    )
                left += sv
        elif finite(v):
            inner += f'<span class="seg" style="left:0;width:{pct(v):.2f}%;background:{color}"></span>'
        is_off = finite(v) and v > threshold
        if is_off:
            inner += '<span class="break" title="off scale"></span>'
            off.append(f"{b.label} {number(v, digits)} {unit}")
        if finite(b.mark):
            inner += f'<span class="tick" style="left:{pct(b.mark):.2f}%" title="{esc(mark_name)}"></span>'
        value = number(v, digits) + (" ▸" if is_off else "")
        cells = f'<span class="bv{" off" if is_off else ""}">{esc(value)}</span>'
        if mark_name:
            cells += f'<span class="bv mark">{esc(number(b.mark, digits))}</span>'
        rows.append(
            f'<div class="br"><span class="bl" title="{esc(b.label)}">{esc(b.label)}</span>'
            f'<span class="track">{inner}</span>{cells}</div>'
        )
    if rest:
        vals = [t for t in (total[i] for i in rest) if finite(t)]
        lo, hi = (min(vals), max(vals)) if vals else (0.0, 0.0)
        band = (
            f'<span class="seg rest" style="left:{pct(lo):.2f}%;width:{max(pct(hi) - pct(lo), 0.4):.2f}%"></span>'
            if vals
            else ""
        )
        text = (
            number(lo, digits)
            if vals and number(lo, digits) == number(hi, digits)
            else (f"{number(lo, digits)}–{number(hi, digits)}" if vals else "n/a")
        )
        # Groups without the figure (no GPM) are no value of the band: counted in the row's label.
        missing = f", {len(rest) - len(vals)} n/a" if vals and len(vals) < len(rest) else ""
        rows.append(
            f'<div class="br"><span class="bl">the other {len(rest)}{missing}</span><span class="track">{band}</span>'
            f'<span class="bv">{esc(text)}</span>{"<span></span>" if mark_name else ""}</div>'
        )
    ticks = "".join(
        f'<span style="left:{pct(t):.2f}%">{esc(number(t, 0 if top >= 10 else 1))}</span>' for t in nice_ticks(top)
    )
    rows.append(f'<div class="br axis"><span></span><span class="ticks">{ticks}</span></div>')
    legend = ""
    if colors:
        legend = (
            '<ul class="legend">'
            + "".join(f'<li><span class="sw" style="background:{c}"></span>{esc(n)}</li>' for n, c in colors.items())
            + "</ul>"
        )
    notes = []
    if rest:
        notes.append(f"The {len(shown)} highest of {len(bars)} groups; the last row spans the other {len(rest)}.")
    if off:
        named = "; ".join(off[:3]) + (f" and {len(off) - 3} more" if len(off) > 3 else "")
        notes.append(f"▸ off scale, drawn to the edge (the axis is set by the other bars): {named}.")
    if note:
        notes.append(note)
    foot = "".join(f"<p class=note>{esc(n)}</p>" for n in notes)
    return (
        f'<figure class="chart"><figcaption>{esc(title)}</figcaption>{legend}'
        f'<div class="{cols}">{"".join(rows)}</div>{foot}</figure>'
    )


def display_labels(doc: dict) -> dict[str, str]:
    """Group label -> the label drawn: by GPU on a one-model fleet, "sim-00/gpu3" (the header names
    the model); by GPU on a mixed fleet, without the "NVIDIA " every model name starts with."""
    labels = {g["label"]: g["label"] for g in doc["groups"]}
    if doc["by"] != "gpu":
        return labels
    models = {m for g in doc["groups"] for m in g["models"]}
    for g in doc["groups"]:
        model = g["models"][0] if g["models"] else ""
        if model and g["label"].endswith(" " + model):
            head = g["label"][: -len(model) - 1]
            labels[g["label"]] = head if len(models) == 1 else f"{head} {model.removeprefix('NVIDIA ')}"
    return labels


def bars_of(
    doc: dict,
    value: Callable[[dict], float | None],
    mark: Callable[[dict], float | None] | None = None,
) -> list[Bar]:
    shown = display_labels(doc)
    return [Bar(shown[g["label"]], value(g), mark(g) if mark else None) for g in doc["groups"]]


# -- sections ---------------------------------------------------------------------------------------


def header_section(doc: dict) -> str:
    r = doc["range"]
    start, end = stamp(r["start_ns"]), stamp(r["end_ns"])
    if start[:10] == end[:10]:
        end = end[11:]
    groups = doc["groups"]
    gpus = sum(g["gpus"] for g in groups)
    hosts = len({h for g in groups for h in g["hosts"]})
    models = sorted({m for g in groups for m in g["models"]})
    fleet = f"all {models[0]}" if len(models) == 1 else f"{len(models)} models"
    where = f" · where {doc['where']}" if doc.get("where") else ""
    return (
        "<header><h1>GPU fleet comparison</h1>"
        f'<p class="range">{esc(start)} – {esc(end)} UTC ({esc(span_text((r["end_ns"] - r["start_ns"]) / 1e9))})'
        f"{esc(where)}</p>"
        f"<p>{gpus} GPUs on {hosts} host{'s' if hosts != 1 else ''}, {esc(fleet)}, "
        f"by {esc(doc['by'])} ({len(groups)} groups) · {esc(doc['source']['url'])} {esc(doc['source']['database'])}</p>"
        f"<p><strong>Efficiency:</strong> {esc(EFFICIENCY_NOTE)}</p></header>"
    )


# The tables: COLUMNS' titles by theme (a column not named here lands in the last table).
TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "Power and energy",
        ("GPUs", "hosts", "power mean W", "power p95 W", "Wh / GPU-h", "energy kWh", "Wh / busy GPU-h", "health GPU-h"),
    ),
    ("Clocks and utilisation", ("SM clock MHz", "SM % of max", "throttled", "GPU util %", "DRAM util %", "DRAM GB/s")),
    ("Memory and topology", ("mem used GiB", "L2 MiB", "P2P", "MIG", "vGPU", "L2 probe")),
)


def tables_section(doc: dict) -> str:
    columns = dict(COLUMNS[1:])
    named = {t for _, titles in TABLES for t in titles}
    themes = [(name, [t for t in titles if t in columns]) for name, titles in TABLES]
    extra = [t for t in columns if t not in named]
    if extra:
        themes.append(("More", extra))
    shown = display_labels(doc)
    out = []
    for name, titles in themes:
        head = '<th class="label">group</th>' + "".join(f"<th>{esc(t)}</th>" for t in titles)
        body = "".join(
            f'<tr><th class="label" title="{esc(g["label"])}">{esc(shown[g["label"]])}</th>'
            + "".join(f"<td{' class=text' if t in TEXT_COLUMNS else ''}>{esc(columns[t](g))}</td>" for t in titles)
            + "</tr>"
            for g in doc["groups"]
        )
        out.append(
            f"<section><h2>{esc(name)}</h2><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>"
        )
    return "".join(out)


def power_chart(doc: dict) -> str:
    bars = bars_of(doc, lambda g: g[figures.POWER_MEAN], lambda g: g[figures.POWER_P95])
    return bar_chart("Mean power per GPU; the red tick is the p95", "W", bars, value_name="mean W", mark_name="p95 W")


def efficiency_chart(doc: dict) -> str:
    bars = bars_of(doc, lambda g: g["energy_wh_per_busy_gpu_hour"])
    idle = any(finite(g["gpu_util_mean_pct"]) and g["gpu_util_mean_pct"] < 5 for g in doc["groups"])
    note = (
        "A GPU that is hardly busy draws its idle power over little busy time: its figure is high by construction."
        if idle
        else ""
    )
    return bar_chart("Energy per busy GPU-hour (lower is better)", "Wh", bars, color=PALETTE[2], note=note)


def dram_chart(doc: dict) -> str:
    bars = bars_of(doc, lambda g: g["dram_bw_util_mean_pct"])
    return bar_chart("DRAM bandwidth utilisation (GPM; n/a without GPM)", "%", bars, color=PALETTE[1])


def throttle_chart(doc: dict) -> str:
    groups = doc["groups"]
    reasons = [r for r in THROTTLE_REASONS if any(g[figures.THROTTLE].get(r) for g in groups)]
    colors = {r: PALETTE[i % len(PALETTE)] for i, r in enumerate(reasons)}
    shown = display_labels(doc)
    bars = [
        Bar(
            shown[g["label"]],
            sum(g[figures.THROTTLE].get(r) or 0.0 for r in reasons),
            segments=[(r, g[figures.THROTTLE].get(r) or 0.0) for r in reasons],
        )
        for g in groups
    ]
    title = "Share of samples under each throttle reason" + ("" if reasons else " (none in the range)")
    return bar_chart(
        title,
        "% of samples",
        bars,
        colors=colors,
        value_name="sum %",
        note="Reasons can hold at once: a sum above 100 % is two reasons at the same time.",
    )


def power_over_time(doc: dict) -> str:
    """Mean power per group per bucket, one SVG: a line per group up to LINES groups; beyond, the band
    from the lowest to the highest group in each bucket, the groups' mean and the HIGHEST groups."""
    series: dict[str, list] = doc[figures.SERIES][figures.SERIES_POWER]
    bucket = doc[figures.SERIES]["bucket_s"]
    title = f"Power per {doc['by']} over time (mean per GPU, {bucket} s buckets, UTC)"
    if not series:
        return (
            f'<figure class="chart"><figcaption>{esc(title)}</figcaption><p class=note>no power readings</p></figure>'
        )
    shown = display_labels(doc)
    means = {k: sum(v for _, v in pts) / len(pts) for k, pts in series.items() if pts}
    ranked = sorted(means, key=lambda k: -means[k])
    many = len(ranked) > LINES
    lines = [
        (series[k], PALETTE[i % len(PALETTE)], f"{shown.get(k, k)}: mean {number(means[k])} W")
        for i, k in enumerate(ranked[:HIGHEST] if many else ranked)
    ]
    band: list[tuple[int, float, float]] = []
    if many:
        acc: dict[int, list[float]] = {}
        for k in ranked:
            for t, v in series[k]:
                acc.setdefault(t, []).append(v)
        band = [(t, min(vs), max(vs)) for t, vs in sorted(acc.items())]
        lines.append(
            ([[t, sum(vs) / len(vs)] for t, vs in sorted(acc.items())], "#555555", f"mean of the {len(ranked)} groups")
        )
    w, h, left, right, top_m, bottom = 960, 260, 60, 16, 14, 36
    r = doc["range"]
    t0, t1 = r["start_ns"] / 1e9, r["end_ns"] / 1e9
    ymax = max([v for pts, _, _ in lines for _, v in pts] + [hi for _, _, hi in band]) or 1.0
    yticks = nice_ticks(ymax * 1.05)
    ytop = max(yticks[-1], ymax)

    def x(t_ns: float) -> float:
        return left + (w - left - right) * (t_ns / 1e9 - t0) / max(t1 - t0, 1e-9)

    def y(v: float) -> float:
        return top_m + (h - top_m - bottom) * (1 - v / ytop)

    parts = [f'<svg viewBox="0 0 {w} {h}" role="img" aria-label="{esc(title)}" class="lines">']
    for v in yticks:
        parts.append(
            f'<line x1="{left}" x2="{w - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>'
            f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{esc(number(v, 0))}</text>'
        )
    step = next(
        (
            s
            for s in (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)
            if (t1 - t0) / s <= 7
        ),
        604800,
    )
    fmt = "%H:%M" if t1 - t0 <= 86400 else "%m-%d %H:%M"
    tick = math.ceil(t0 / step) * step
    while tick <= t1:
        label = dt.datetime.fromtimestamp(tick, dt.UTC).strftime(fmt)
        parts.append(f'<text x="{x(tick * 1e9):.1f}" y="{h - bottom + 18}" text-anchor="middle">{esc(label)}</text>')
        tick += step
    parts.append(f'<text x="{left - 6}" y="{top_m - 2}" text-anchor="end" class="unit">W</text>')
    if band:
        outline = [f"{x(t):.1f},{y(hi):.1f}" for t, _, hi in band] + [
            f"{x(t):.1f},{y(lo):.1f}" for t, lo, _ in band[::-1]
        ]
        parts.append(f'<polygon points="{" ".join(outline)}" fill="#d9d9d9" fill-opacity="0.7" stroke="none"/>')
    for pts, color, _ in lines:
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        parts.append(f'<polyline points="{path}" stroke="{color}" fill="none" stroke-width="1.6"/>')
    parts.append("</svg>")
    legend = (
        '<ul class="legend">'
        + "".join(f'<li><span class="sw" style="background:{c}"></span>{esc(text)}</li>' for _, c, text in lines)
        + (
            f'<li><span class="sw" style="background:#d9d9d9"></span>lowest to highest of the {len(ranked)} groups</li>'
            if band
            else ""
        )
        + "</ul>"
    )
    return f'<figure class="chart wide"><figcaption>{esc(title)}</figcaption>{"".join(parts)}{legend}</figure>'


def hosts_section(doc: dict) -> str:
    if doc["by"] != "model":  # by host or GPU the label names the host
        return ""
    items = "".join(f"<li><strong>{esc(g['label'])}</strong>: {esc(', '.join(g['hosts']))}</li>" for g in doc["groups"])
    return f"<section><h2>Hosts</h2><ul class=hosts>{items}</ul></section>"


def work_section(doc: dict) -> str:
    """The groups' per-unit figures (`work`), what limits them (`limits`, * a proxy) and the same
    workload across models (`cross_model`), where the document has them (gpu_work points in range)."""
    groups = [g for g in doc["groups"] if g.get(figures.WORK)]
    out = []
    if groups:
        heads = ("unit", "units", "GPU-hours", "units/GPU-h", "Wh/1k units", "$/M units")
        body = ""
        for g in groups:
            for unit, w in g[figures.WORK].items():
                wh = w.get(figures.WH_PER_UNIT)
                cells = (unit, work_number(w.get(figures.UNITS), 0), work_number(w.get(figures.WORK_GPU_HOURS)), work_number(w.get(figures.UNITS_PER_GPU_HOUR), 1),
                         work_number(wh * 1000 if wh is not None else None, 3), work_number(w.get(figures.COST_PER_MILLION), 3))  # fmt: skip
                body += (
                    f'<tr><th class="label">{esc(g["label"])}</th>'
                    + "".join(f"<td>{esc(c)}</td>" for c in cells)
                    + "</tr>"
                )
        head = '<th class="label">group</th>' + "".join(f"<th>{esc(h)}</th>" for h in heads)
        out.append(f'<h3>Work</h3><table id="work"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')
    limited = [g for g in doc["groups"] if g.get(figures.LIMITS)]
    if limited:
        head = '<th class="label">group</th>' + "".join(f"<th>{esc(c)} %</th>" for c in CLASSES)
        body = "".join(
            f'<tr><th class="label">{esc(g["label"])}</th>'
            + "".join(
                f"<td>{esc(work_number(g['limits'].get(c), 1))}{'*' if (g.get('limits_proxy') or {}).get(c) else ''}</td>"
                for c in CLASSES
            )
            + "</tr>"
            for g in limited
        )
        out.append(
            f'<h3>What limits it</h3><table id="limits"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
            "<p class=note>The share of the work's time in each class; * a proxy (from utilisation on cards "
            "without GPM).</p>"
        )
    cross = cross_rows(doc)
    if cross:
        head = "".join(f"<th>{esc(h)}</th>" for h in CROSS_HEADERS)
        body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in cross)
        out.append(
            f'<h3>The same workload on each model</h3><table id="cross-model"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>"
        )
    if not out:
        return ""
    return "<section><h2>Work per unit and what limits it</h2>" + "".join(out) + "</section>"


def definitions_section(doc: dict) -> str:
    defs = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in doc["definitions"].items())
    return f"<section><h2>Definitions</h2><dl>{defs}</dl></section>"


def charts_section(doc: dict) -> str:
    return f'<section class="charts">{"".join(chart(doc) for chart in CHARTS)}</section>'


# Charts and sections in page order: a new figure is one function added here.
CHARTS: list[Callable[[dict], str]] = [power_chart, efficiency_chart, dram_chart, throttle_chart, power_over_time]
SECTIONS: list[Callable[[dict], str]] = [
    header_section,
    charts_section,
    tables_section,
    work_section,
    hosts_section,
    definitions_section,
]

CSS = """
* { box-sizing: border-box; }
body { font-family: "DejaVu Sans", system-ui, sans-serif; margin: 0 auto; padding: 1.2em; max-width: 1280px;
       color: #222; font-size: 14px; }
h1 { font-size: 1.5em; margin: 0 0 .3em; } h2 { font-size: 1.15em; margin: 1.4em 0 .4em; }
header p { margin: .25em 0; } .range { font-size: 1.1em; font-weight: bold; }
table { border-collapse: collapse; font-size: 12px; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; white-space: nowrap; }
thead th { background: #f0f0f0; white-space: normal; vertical-align: bottom; }
th.label { text-align: left; max-width: 22em; overflow: hidden; text-overflow: ellipsis; }
td.text { text-align: left; white-space: normal; min-width: 8em; max-width: 18em; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 1.2em 2em; }
figure.chart { margin: 0; min-width: 0; } figure.wide { grid-column: 1 / -1; }
figcaption { font-weight: bold; margin-bottom: .4em; }
.bars { display: grid; grid-template-columns: minmax(6em, 16em) minmax(8em, 1fr) 6.5em; font-size: 12px;
        row-gap: 3px; column-gap: 8px; align-items: center; }
.bars.with-mark { grid-template-columns: minmax(6em, 16em) minmax(8em, 1fr) 6.5em 5em; }
.br { display: contents; }
.bl { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.track { position: relative; height: 16px; background: #f4f4f4; }
.seg { position: absolute; top: 0; bottom: 0; }
.seg.rest { background: #c8c8c8; top: 4px; bottom: 4px; }
.tick { position: absolute; top: -2px; bottom: -2px; width: 3px; margin-left: -1.5px; background: #c00000; }
.break { position: absolute; right: 0; top: 0; bottom: 0; width: 10px;
         background: repeating-linear-gradient(135deg, #fff 0 2px, transparent 2px 5px); }
.bv { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
.bv.mark { color: #c00000; } .bv.off { font-weight: bold; color: #a00000; }
.head > span { font-weight: bold; color: #555; white-space: nowrap; }
.bh { text-align: right; } .axis-unit { text-align: center; }
.axis .ticks { position: relative; height: 1.3em; color: #555; }
.axis .ticks span { position: absolute; transform: translateX(-50%); white-space: nowrap; }
.axis .ticks span:first-child { transform: none; }
.axis .ticks span:last-child:not(:first-child) { transform: translateX(-100%); }
.legend { list-style: none; padding: 0; margin: .2em 0 .5em; display: flex; flex-wrap: wrap; gap: .2em 1.2em;
          font-size: 12px; }
.legend li { white-space: nowrap; } .sw { display: inline-block; width: .9em; height: .9em; margin-right: .35em;
                                          vertical-align: -.1em; }
.note { font-size: 12px; color: #555; margin: .4em 0 0; }
svg.lines { width: 100%; height: auto; display: block; font-size: 12px; fill: #444; }
svg.lines .grid { stroke: #e4e4e4; } svg.lines text { fill: #444; }
ul.hosts { font-size: 12px; }
dl { font-size: 12px; } dt { font-weight: bold; } dd { margin: 0 0 .4em 1.5em; }
"""


def render_html(doc: dict[str, Any]) -> str:
    body = "".join(section(doc) for section in SECTIONS)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>gpuagent compare</title><style>{CSS}</style></head>\n<body>{body}</body></html>\n"
    )
