"""The `gpuagent` measurement folded for `run --test`: one line per collector.

A one-GPU `run --once --test` printed 38 `gpuagent` lines beside 9 lines of readings, most of them
one per refused NVML call (agent/service/measurement.md: "Per refused NVML call"). On a terminal the
refusals are read per collector, so `--test` folds each call's series into its collector's line:
`nvml_errors_total` (the counts added up) and `nvml_errors` (each call and code, with its count
where over 1). Calls made outside any collector's run fold into the agent process line. What the
sinks receive in a normal run is not folded (the per-call series are counters to alert on).
"""

from __future__ import annotations

from dataclasses import replace

from gpuagent.gpus.gpu import OUTSIDE_COLLECTORS
from gpuagent.pipeline.metric import Point
from gpuagent.schema.measurements import GPUAGENT

MEASUREMENT = GPUAGENT


def _is_call(p: Point) -> bool:
    return p.measurement == MEASUREMENT and "nvml_call" in p.tags


def fold_nvml_errors(points: list[Point]) -> list[Point]:
    """`points` with each per-call NVML error series folded into its collector's point."""
    calls: dict[str, list[Point]] = {}
    for p in points:
        if _is_call(p):
            calls.setdefault(p.tags.get("collector", OUTSIDE_COLLECTORS), []).append(p)
    out = []
    for p in points:
        if _is_call(p):
            continue
        name = None
        if p.measurement == MEASUREMENT:
            # A collector's line, or the agent process line (the one with uptime_s).
            name = p.tags.get("collector") or (OUTSIDE_COLLECTORS if "uptime_s" in p.fields else None)
        mine = calls.pop(name, None) if name else None
        out.append(_folded(p, mine) if mine else p)
    # A call whose collector has no line (none should): kept as it was, never lost.
    out.extend(p for rest in calls.values() for p in rest)
    return out


def _folded(p: Point, calls: list[Point]) -> Point:
    total = sum(int(c.fields.get("nvml_errors_total", 0)) for c in calls)
    listed = []
    for c in calls:
        n = int(c.fields.get("nvml_errors_total", 0))
        listed.append(f"{c.tags['nvml_call']}:{c.tags.get('nvml_error', '?')}" + (f"({n})" if n > 1 else ""))
    fields = {**p.fields, "nvml_errors_total": total, "nvml_errors": " ".join(listed)}
    return replace(p, fields=fields, _line=None)
