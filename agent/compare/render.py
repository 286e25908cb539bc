"""The report as a table (rich), JSON, CSV or one self-contained HTML page with SVG charts."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from gpuagent.compare import tables
from gpuagent.compare.core import THROTTLE_REASONS
from gpuagent.compare.health import VERDICTS as HEALTH_VERDICTS
from gpuagent.compare.health import health_text

GIB = 2**30
MIB = 2**20


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
    return (
        f"GPUs by {doc['by']}, {r['start']} .. {r['end']}{where} ({doc['source']['url']}, {doc['source']['database']})"
    )


def _approximate_note(doc: dict) -> str:
    """What a rollup report computed approximately (its JSON's source.approximate), and by how much."""
    p95 = (doc["source"].get("approximate") or {}).get("power_p95_w")
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
    columns = [("energy", lambda g: _energy(g["energy_kwh"])) if t == "energy kWh" else (t, f) for t, f in COLUMNS]
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
        *(f"health_{v}_gpu_hours" for v in HEALTH_VERDICTS),
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
        row += [(g.get("health_gpu_hours") or {}).get(v) for v in HEALTH_VERDICTS]
        w.writerow(["" if v is None else v for v in row])
    return buf.getvalue()
