"""The report as a table (rich), JSON, CSV or one self-contained HTML page with SVG charts."""

from __future__ import annotations

import csv
import html
import io
import json
from typing import Any

from gpuagent.compare.health import health_text
from gpuagent.compare.report import THROTTLE_REASONS

GIB = 2**30
MIB = 2**20


def _num(value, digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value / scale:,.{digits}f}{unit}"


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
    return (
        f"{_num(p['l2_effective_bytes'], 0, MIB, ' MiB')}, L2/DRAM {_num(p['l2_dram_ratio'], 2)}x"
    )


# (column title, function of a group) for the table, CSV and HTML alike.
COLUMNS: list[tuple[str, Any]] = [
    ("group", lambda g: g["label"]),
    ("GPUs", lambda g: str(g["gpus"])),
    ("hosts", lambda g: str(len(g["hosts"]))),
    ("power mean W", lambda g: _num(g["power_mean_w"])),
    ("power p95 W", lambda g: _num(g["power_p95_w"])),
    ("Wh / GPU-h", lambda g: _num(g["energy_wh_per_gpu_hour"])),
    ("energy kWh", lambda g: _num(g["energy_kwh"], 3)),
    ("Wh / busy GPU-h", lambda g: _num(g["energy_wh_per_busy_gpu_hour"])),
    (
        "SM clock MHz",
        lambda g: f"{_num(g['sm_clock_mean_mhz'], 0)} / {_num(g['sm_clock_max_mhz'], 0)}",
    ),
    ("SM % of max", lambda g: _num(g["sm_clock_pct_of_max"])),
    ("throttled", lambda g: _throttle_text(g["throttle_share_pct"])),
    ("GPU util %", lambda g: _num(g["gpu_util_mean_pct"])),
    ("DRAM util %", lambda g: _num(g["dram_bw_util_mean_pct"])),
    ("DRAM GB/s", lambda g: f"{_num(g['dram_bw_mean_gbps'], 0)} / {_num(g['dram_peak_gbps'], 0)}"),
    (
        "mem used GiB",
        lambda g: f"{_num(g['fb_used_mean_bytes'], 1, GIB)} / {_num(g['fb_total_bytes'], 0, GIB)}",
    ),
    ("L2 MiB", lambda g: _num(g["l2_cache_bytes"], 0, MIB)),
    ("P2P", lambda g: g["p2p_summary"]),
    ("MIG", lambda g: _mig_text(g["mig"])),
    ("vGPU", lambda g: _vgpu_text(g["vgpu"])),
    ("L2 probe", lambda g: _l2_text(g["l2_probe"])),
    ("health GPU-h", lambda g: health_text(g.get("health_gpu_hours"))),
]

EFFICIENCY_NOTE = (
    "Wh / busy GPU-h (efficiency) = energy used (sum of energy_j counter increases) / busy GPU-hours "
    "(each GPU's observed time x its mean GPU utilisation); lower is better."
)


def _header(doc: dict) -> str:
    r = doc["range"]
    where = f", where {doc['where']}" if doc.get("where") else ""
    return f"GPUs by {doc['by']}, {r['start']} .. {r['end']}{where} ({doc['source']['url']}, {doc['source']['database']})"


def render_json(doc: dict) -> str:
    return json.dumps(doc, indent=2) + "\n"


def render_table(doc: dict, width: int | None = None) -> str:
    """Groups side by side (a column each) when there are few; a row per group otherwise."""
    from rich.console import Console
    from rich.table import Table

    groups = doc["groups"]
    table = Table(
        title=_header(doc),
        caption=EFFICIENCY_NOTE,
        header_style="bold",
        title_justify="left",
        caption_justify="left",
    )
    if len(groups) <= 8:
        table.add_column("", justify="left", style="bold", no_wrap=True)
        for g in groups:
            table.add_column(g["label"], justify="right", overflow="fold")
        for title, fn in COLUMNS[1:]:
            table.add_row(title, *(fn(g) for g in groups))
    else:
        for i, (title, _) in enumerate(COLUMNS):
            table.add_column(
                title,
                justify="left" if i == 0 or title in _TEXT_COLUMNS else "right",
                overflow="fold",
            )
        for g in groups:
            table.add_row(*(fn(g) for _, fn in COLUMNS))
    buf = io.StringIO()
    Console(file=buf, width=width or 200, force_terminal=False, color_system=None).print(table)
    return buf.getvalue()


_TEXT_COLUMNS = {"group", "throttled", "P2P", "MIG", "vGPU", "L2 probe"}


CSV_FIELDS = (
    "label",
    "gpus",
    "hosts",
    "models",
    "power_mean_w",
    "power_p95_w",
    "energy_kwh",
    "gpu_hours",
    "energy_wh_per_gpu_hour",
    "busy_gpu_hours",
    "energy_wh_per_busy_gpu_hour",
    "sm_clock_mean_mhz",
    "sm_clock_max_mhz",
    "sm_clock_pct_of_max",
    "gpu_util_mean_pct",
    "dram_bw_util_mean_pct",
    "dram_bw_mean_gbps",
    "dram_peak_gbps",
    "fb_used_mean_bytes",
    "fb_used_max_bytes",
    "fb_total_bytes",
    "l2_cache_bytes",
    "p2p_summary",
)


def render_csv(doc: dict) -> str:
    """One row per group; unrounded numbers; nested figures flattened (throttle_<reason>_pct, mig_*, ...)."""
    reasons = sorted({r for g in doc["groups"] for r in g["throttle_share_pct"]})
    header = [
        *CSV_FIELDS,
        *(f"throttle_{r}_pct" for r in reasons),
        "p2p_nvlink_gpus",
        "p2p_pcie_gpus",
        "p2p_none_gpus",
        "mig_capable_gpus",
        "mig_enabled_gpus",
        "mig_devices",
        "vgpu_host_gpus",
        "vgpu_instances",
        "l2_probe_runs",
        "l2_effective_bytes",
        "l2_probe_l2_bw_gbps",
        "l2_probe_dram_bw_gbps",
        "l2_dram_ratio",
    ]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for g in doc["groups"]:
        row = [";".join(g[f]) if isinstance(g[f], list) else g[f] for f in CSV_FIELDS]
        row += [g["throttle_share_pct"].get(r) for r in reasons]
        row += [g["p2p"]["nvlink"], g["p2p"]["pcie"], g["p2p"]["none"]]
        row += [
            g["mig"]["capable_gpus"],
            g["mig"]["enabled_gpus"],
            g["mig"]["devices"],
            g["vgpu"]["modes"].get("host_vgpu", 0),
            g["vgpu"]["instances"],
        ]
        p = g["l2_probe"] or {}
        row += [
            p.get("runs"),
            p.get("l2_effective_bytes"),
            p.get("l2_bw_gbps"),
            p.get("dram_bw_gbps"),
            p.get("l2_dram_ratio"),
        ]
        w.writerow(["" if v is None else v for v in row])
    return buf.getvalue()


# -- HTML ---------------------------------------------------------------------------------------


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    # Inline in HTML: drop the XML prolog and DOCTYPE, keep the <svg> element.
    return text[text.index("<svg") :]


def _bar_chart(plt, labels, values, title, unit, color="#4472c4", marks=None):
    """Horizontal bars, one per group; `marks` = (name, values) adds a tick per bar (e.g. p95)."""
    fig, ax = plt.subplots(figsize=(6.4, 0.6 + 0.45 * max(len(labels), 2)))
    y = list(range(len(labels)))
    vals = [v if v is not None else 0 for v in values]
    ax.barh(y, vals, color=color, height=0.6)
    ends = list(vals)
    if marks:
        mvals = [v if v is not None else 0 for v in marks[1]]
        ax.scatter(
            mvals, y, marker="|", s=300, linewidths=2.5, color="#c00000", label=marks[0], zorder=3
        )
        ax.legend(loc="lower right", fontsize=8)
        ends = [max(a, b) for a, b in zip(vals, mvals, strict=True)]
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=10)
    for i, v in enumerate(values):
        ax.text(ends[i], i, f"  {v:,.1f}" if v is not None else "  n/a", va="center", fontsize=7)
    ax.margins(x=0.2)
    fig.tight_layout()
    return fig


def charts(doc: dict) -> list[tuple[str, str]]:
    """(title, inline SVG) per chart."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable, no font embedding
    groups = doc["groups"]
    labels = [g["label"] for g in groups]
    out = []
    figs = [
        (
            "Power",
            _bar_chart(
                plt,
                labels,
                [g["power_mean_w"] for g in groups],
                "Mean power per GPU (bar) and p95 (tick)",
                "W",
                marks=("p95", [g["power_p95_w"] for g in groups]),
            ),
        ),
        (
            "Efficiency",
            _bar_chart(
                plt,
                labels,
                [g["energy_wh_per_busy_gpu_hour"] for g in groups],
                "Energy per busy GPU-hour (lower is better)",
                "Wh",
                color="#70ad47",
            ),
        ),
        (
            "DRAM",
            _bar_chart(
                plt,
                labels,
                [g["dram_bw_util_mean_pct"] for g in groups],
                "DRAM bandwidth utilisation",
                "%",
                color="#ed7d31",
            ),
        ),
    ]
    # Throttle share: one stacked bar per group, a segment per throttling reason.
    reasons = [r for r in THROTTLE_REASONS if any(g["throttle_share_pct"].get(r) for g in groups)]
    fig, ax = plt.subplots(figsize=(6.4, 0.5 + 0.45 * max(len(labels), 2)))
    left = [0.0] * len(groups)
    for reason in reasons:
        vals = [g["throttle_share_pct"].get(reason) or 0.0 for g in groups]
        ax.barh(range(len(groups)), vals, left=left, label=reason)
        left = [a + b for a, b in zip(left, vals, strict=True)]
    ax.set_yticks(range(len(groups)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("% of samples")
    ax.set_title("Time under each throttle reason" + ("" if reasons else " (none)"), fontsize=10)
    if reasons:
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    figs.append(("Throttling", fig))
    # Power over time, a line per group.
    fig, ax = plt.subplots(figsize=(9.6, 3.6))
    for label, points in doc["series"]["power_mean_w"].items():
        import datetime as dt

        xs = [dt.datetime.fromtimestamp(t / 1e9, dt.UTC) for t, _ in points]
        ax.plot(xs, [v for _, v in points], label=label, linewidth=1.2)
    ax.set_ylabel("W (mean per GPU)")
    ax.set_title(f"Power per {doc['by']} ({doc['series']['bucket_s']} s buckets, UTC)", fontsize=10)
    ax.grid(alpha=0.3)
    if doc["series"]["power_mean_w"]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.autofmt_xdate()
    fig.tight_layout()
    figs.append(("Power over time", fig))
    for title, f in figs:
        out.append((title, _svg(f)))
        plt.close(f)
    return out


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 12px; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 3px 6px; text-align: right; white-space: nowrap; }
th { background: #f0f0f0; } tbody th { text-align: left; }
td.text { text-align: left; white-space: normal; }
.charts { display: flex; flex-wrap: wrap; gap: 1em; }
figure { margin: 0; }
figure svg { max-width: 100%; height: auto; }
dl { font-size: 12px; } dt { font-weight: bold; } dd { margin: 0 0 0.4em 1.5em; }
"""


def render_html(doc: dict) -> str:
    esc = html.escape
    groups = doc["groups"]
    if len(groups) <= 8:  # groups side by side, as in the table format
        head = "<th></th>" + "".join(f"<th>{esc(g['label'])}</th>" for g in groups)
        rows = [
            f"<tr><th>{esc(t)}</th>" + "".join(f"<td>{esc(fn(g))}</td>" for g in groups) + "</tr>"
            for t, fn in COLUMNS[1:]
        ]
    else:
        head = "".join(f"<th>{esc(t)}</th>" for t, _ in COLUMNS)
        rows = [
            "<tr>"
            + "".join(
                f'<td class="text">{esc(fn(g))}</td>'
                if t in _TEXT_COLUMNS
                else f"<td>{esc(fn(g))}</td>"
                for t, fn in COLUMNS
            )
            + "</tr>"
            for g in groups
        ]
    figures = "".join(f'<figure aria-label="{esc(t)}">{svg}</figure>' for t, svg in charts(doc))
    defs = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in doc["definitions"].items())
    hosts = "".join(
        f"<li>{esc(g['label'])}: {esc(', '.join(g['hosts']))}</li>" for g in doc["groups"]
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>gpuagent compare</title>
<style>{_CSS}</style></head>
<body>
<h1>GPU fleet comparison</h1>
<p>{esc(_header(doc))}</p>
<p><strong>Efficiency:</strong> {esc(EFFICIENCY_NOTE)}</p>
<table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>
<div class="charts">{figures}</div>
<h2>Hosts</h2><ul>{hosts}</ul>
<h2>Definitions</h2><dl>{defs}</dl>
</body></html>
"""


RENDERERS = {"table": render_table, "json": render_json, "csv": render_csv, "html": render_html}
