"""`placement`: where each workload should run, from the work document's own per-model figures.

For each (workload, unit) seen on two or more priced models (the document's `cross_model`), the
model with the lowest cost per unit at the rates measured, and what moving the units that ran
elsewhere onto it would have saved over the range. Computed once from the document (never from
points), so it is the same over InfluxQL, PromQL and rollups, and recomputes from the figures shown.
"""

from __future__ import annotations

from typing import Any

from gpuagent.compare import figures

MIN_EVIDENCE_H = 1.0  # GPU-hours under which a model's rate is flagged as thin evidence


def placement(doc: dict[str, Any]) -> list[dict[str, Any]]:
    limits_of = {
        (g["key"].get("model"), g["key"].get("workload")): g.get(figures.LIMITS) or {}
        for g in doc.get("groups", ())
        if "model" in g["key"] and "workload" in g["key"]
    }
    out = []
    for c in doc.get(figures.CROSS_MODEL) or ():
        priced = [m for m in c["models"] if m.get("units_per_dollar") and m[figures.UNITS] > 0]
        unpriced = [m["model"] for m in c["models"] if not m.get("units_per_dollar")]
        if len(priced) < 2:
            continue
        rows = [
            {
                "model": m["model"],
                figures.UNITS: m[figures.UNITS],
                figures.WORK_GPU_HOURS: m[figures.WORK_GPU_HOURS],
                figures.COST_PER_MILLION: 1e6 / m["units_per_dollar"],
            }
            for m in priced
        ]
        cheapest = min(rows, key=lambda r: (r[figures.COST_PER_MILLION], r["model"]))
        spent = sum(r[figures.UNITS] * r[figures.COST_PER_MILLION] / 1e6 for r in rows)
        there = sum(r[figures.UNITS] for r in rows) * cheapest[figures.COST_PER_MILLION] / 1e6
        caveats = [
            f"{r['model']}: {r[figures.WORK_GPU_HOURS]:.2f} GPU-hours of evidence (under {MIN_EVIDENCE_H:g})"
            for r in rows
            if r[figures.WORK_GPU_HOURS] < MIN_EVIDENCE_H
        ]
        limits = limits_of.get((cheapest["model"], c["workload"]))
        if limits:
            top = max(sorted(limits), key=lambda k: limits[k] or 0.0)
            caveats.append(f"{cheapest['model']} is limited by {top} ({limits[top]:.0f} % of its GPU-hours)")
        priceless = set(doc.get(figures.UNPRICED) or ())
        if [m for m in unpriced if m in priceless]:
            caveats.append(f"unpriced models left out: {', '.join(m for m in unpriced if m in priceless)}")
        if [m for m in unpriced if m not in priceless]:  # priced per hour, but no energy counter to price
            caveats.append(f"left out, cost unknown: {', '.join(m for m in unpriced if m not in priceless)}")
        out.append(
            {
                "workload": c["workload"],
                "unit": c["unit"],
                "models": rows,
                "cheapest": cheapest["model"],
                "saving": spent - there,
                "saving_pct": 100 * (spent - there) / spent if spent > 0 else None,
                "caveats": caveats,
            }
        )
    return out
