"""GPU-hours per health verdict per group: how long each model (host, GPU) spent ok, degraded,
waiting for a reset, and so on, from the health collector's `verdict` field (gpu_health).

Per GPU, the range is cut into buckets (GROUP BY time); a bucket counts for the last verdict the GPU
reported in it, for the bucket's length. Buckets without a verdict count for nothing.
"""

from __future__ import annotations

import math
from typing import Any

VERDICTS = ("ok", "degraded", "reset_required", "reboot_required", "drain", "lost")
DEFINITION = (
    "per GPU, the range in buckets of bucket_s (GROUP BY time); each bucket counts its length for the "
    "last verdict the GPU reported in it (gpu_health verdict); GPU-hours summed over the group's GPUs"
)


def bucket_for(span_s: float) -> int:
    """Whole minutes, at most ~1000 buckets per GPU over the range."""
    return max(60, math.ceil(span_s / 1000 / 60) * 60)


def health_hours(report: Any, groups: dict[tuple, dict[str, Any]]) -> int:
    """Add ``health_gpu_hours`` ({verdict: GPU-hours}, every verdict listed) to each group; the bucket (s)."""
    from gpuagent.compare.report import GPU_TAGS, _gpu_key

    span = (report.range.end_ns - report.range.start_ns) / 1e9
    bucket = bucket_for(span)
    for g in groups.values():
        g["health_gpu_hours"] = dict.fromkeys(VERDICTS, 0.0)
    rows = report._rows('LAST("verdict")', "gpu_health", GPU_TAGS, tail=f", time({bucket}s) fill(none)")
    for r in rows:
        verdict = r.get("last")
        group = groups.get(report._group_of(_gpu_key(r)))
        if group is None or verdict is None:
            continue
        hours = group["health_gpu_hours"]
        hours[verdict] = hours.get(verdict, 0.0) + bucket / 3600  # an unknown word is kept, not lost
    return bucket


def health_text(hours: dict[str, float] | None) -> str:
    """"ok 94.0, degraded 2.5" (GPU-hours, verdicts with time only); "n/a" without verdicts."""
    if not hours or not any(hours.values()):
        return "n/a"
    return ", ".join(f"{v} {h:.1f}" for v, h in hours.items() if h)
