"""GPU-hours per health verdict per group: how long each model (host, GPU) spent ok, degraded,
waiting for a reset, and so on, from the health collector's `verdict` field (gpu_health).

Per GPU, the range is cut into buckets aligned to the epoch (GROUP BY time); a bucket counts its
time inside the range (the first and last buckets only their part of it), shared among the verdicts
the GPU reported in it by their count of samples. A GPU's hours are so bounded by the range and a
group's by its GPUs × the range, whatever its edges. Buckets without a verdict count for nothing.
The InfluxQL report (health_hours) and the PromQL one (promql_report) compute the same figure.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from gpuagent.compare.core import GPU_TAGS, gpu_key
from gpuagent.schema.measurements import GPU_HEALTH

KEY = "health_gpu_hours"  # the figure (gpuagent.compare.figures.HEALTH)
VERDICTS = ("ok", "degraded", "reset_required", "reboot_required", "drain", "lost")
DEFINITION = (
    "per GPU, the range in buckets of whole minutes aligned to the epoch (GROUP BY time); each bucket "
    "counts its time inside the range (the first and last only their part), shared among the verdicts "
    "the GPU reported in it (gpu_health verdict) by their count of samples; GPU-hours summed over the "
    "group's GPUs, so at most GPUs × the range"
)


def bucket_for(span_s: float) -> int:
    """Whole minutes, at most ~1000 buckets per GPU over the range."""
    return max(60, math.ceil(span_s / 1000 / 60) * 60)


def inside_s(bucket_ns: int, bucket_s: int, start_ns: int, end_ns: int) -> float:
    """Seconds of the bucket starting at bucket_ns that lie in [start_ns, end_ns)."""
    return max(0, min(bucket_ns + bucket_s * 10**9, end_ns) - max(bucket_ns, start_ns)) / 1e9


def pieces(start_ns: int, end_ns: int, bucket_s: int) -> list[tuple[int, int]]:
    """[start, end) cut at the epoch-aligned bucket edges: [(from_ns, to_ns), ...]."""
    step = bucket_s * 10**9
    out, a = [], start_ns
    while a < end_ns:
        b = min((a // step + 1) * step, end_ns)
        out.append((a, b))
        a = b
    return out


def _literal(word: str) -> str:
    return "'" + word.replace("\\", "\\\\").replace("'", "\\'") + "'"


def health_hours(report: Any, groups: dict[tuple, dict[str, Any]]) -> int:
    """Add ``health_gpu_hours`` ({verdict: GPU-hours}, every verdict listed) to each group; the bucket (s)."""
    rng = report.range
    bucket = bucket_for((rng.end_ns - rng.start_ns) / 1e9)
    for g in groups.values():
        g[KEY] = dict.fromkeys(VERDICTS, 0.0)
    words = sorted(
        {
            r["distinct"]
            for r in report.client.rows(f'SELECT DISTINCT("verdict") FROM "{GPU_HEALTH}" WHERE {report._where()}')
            if r.get("distinct")
        }
    )
    if not words:
        return bucket
    tail = f", time({bucket}s) fill(none)"

    def counts(extra: str = "") -> dict[tuple, float]:
        rows = report._rows('COUNT("verdict")', GPU_HEALTH, GPU_TAGS, extra, tail=tail)
        return {(gpu_key(r), r["time"]): r["count"] for r in rows if r.get("count")}

    total = counts()
    # Samples per verdict per GPU and bucket; one word alone has them all (no query for it).
    per_word = {w: counts(f'"verdict" = {_literal(w)}') for w in words} if len(words) > 1 else {words[0]: total}
    add_hours(report, groups, total, per_word, bucket)
    return bucket


def add_hours(
    report: Any, groups: dict[tuple, dict[str, Any]], total: dict, per_word: dict[str, dict], bucket: int
) -> None:
    """Add each verdict's share of each (GPU, bucket) to its group, from sample counts per
    (gpu key, bucket time): total, and per verdict word (the raw report's and the rollup report's)."""
    rng = report.range
    hours: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for word, found in per_word.items():
        for (gpu, t), n in found.items():
            share = n / total[(gpu, t)] if total.get((gpu, t)) else 0.0
            hours[report._group_of(gpu)][word] += share * inside_s(t, bucket, rng.start_ns, rng.end_ns) / 3600
    for gkey, by_word in hours.items():
        group = groups.get(gkey)
        if group is not None:
            for word, h in sorted(by_word.items()):
                group[KEY][word] = group[KEY].get(word, 0.0) + h  # unknown words kept


def health_text(hours: dict[str, float] | None) -> str:
    """ "ok 94.0, degraded 2.5" (GPU-hours, verdicts with time only); "n/a" without verdicts."""
    if not hours or not any(hours.values()):
        return "n/a"
    return ", ".join(f"{v} {h:.1f}" for v, h in hours.items() if h)
