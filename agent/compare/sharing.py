"""A GPU's time (and so its energy) shared among the work on it at the same time.

Two servers on one GPU, or two jobs time-sliced on it, each hold the GPU over their own span; charged
the whole GPU each, the work on a GPU would add up to more than the GPU did. So each span is cut
where another piece of work on the same GPU (or MIG slice) starts or ends, and over each cut the
pieces present share it: by their weight where every one of them has one (a job's SM share, from
the processes collector's per-process sm_util_pct), evenly otherwise. Per cut the fractions add up
to 1, so per GPU the charged time and energy never exceed the GPU's own. One piece alone on its GPU
keeps its whole span as one cut (fraction 1): the windows asked for its energy are as before.

The work series (gpuagent.compare.work.WorkSeries) are charged here: their absences cut out first
(cut_absences), then their GPU shared (share_gpus).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

Segment = tuple[int, int, float]  # (start ns, end ns, the fraction of the GPU charged over it)


def shared_segments(items: Sequence[tuple[Hashable, int, int, float | None]]) -> list[list[Segment]]:
    """Per item (piece, t0_ns, t1_ns, weight) on one GPU, its charge: segments of [t0, t1] and the
    fraction of the GPU over each. Items of the same piece (one server's units, the runs of a work
    series between its absences) are the same work: they do not share with each other; a piece is
    present where one of its items is."""
    held: dict[Hashable, list] = {}  # piece -> [weight, [(t0, t1), ...]]
    for piece, t0, t1, weight in items:
        h = held.setdefault(piece, [weight, []])
        h[0] = weight if h[0] is None else h[0]
        h[1].append((t0, t1))
    if len(held) == 1:
        return [[(t0, t1, 1.0)] for _, t0, t1, _ in items]
    cuts = sorted({t for _, spans in held.values() for span in spans for t in span})
    out = []
    for piece, t0, t1, _ in items:
        segs: list[Segment] = []
        for lo, hi in zip(cuts, cuts[1:], strict=False):
            a, b = max(lo, t0), min(hi, t1)
            if b <= a:
                continue
            here = [w for w, spans in held.values() if any(x <= a and b <= y for x, y in spans)]
            total = sum(w for w in here if w is not None)
            if all(w is not None and w >= 0 for w in here) and total > 0:
                f = held[piece][0] / total
            else:
                f = 1.0 / len(here)
            if segs and segs[-1][1] == a and segs[-1][2] == f:  # one window where the share holds
                segs[-1] = (segs[-1][0], b, f)
            else:
                segs.append((a, b, f))
        out.append(segs or [(t0, t1, 1.0)])
    return out


def share_gpus(series: list, gpu_tags: tuple[str, ...]) -> None:
    """Each series' charge: its GPU's (MIG slice's) time shared among the pieces of work on it at the
    same time (shared_segments), by their mean sm_util_pct where each has one, else evenly."""
    slots: dict[tuple, list] = defaultdict(list)
    for s in series:
        slots[(*(s.tags[t] for t in gpu_tags), s.tags.get("mig_uuid", ""))].append(s)
    for members in slots.values():
        items, owner = [], []
        for s in members:
            for a, b in s.spans:
                items.append(((s.tags.get("work_id", ""), s.tags.get("workload", "")), a, b, s.sm))
                owner.append(s)
        charges: dict[int, list] = defaultdict(list)
        for s, segs in zip(owner, shared_segments(items), strict=True):
            charges[id(s)].extend(segs)
        for s in members:
            s.charge = charges[id(s)]


def cut_absences(
    series: list, absent: dict[tuple, set], bucket_s: int, series_tags: tuple[str, ...], least_intervals: float
) -> None:
    """A series' absences out of its time: a run of the limits' buckets inside its span where it has no
    sample, at least `least_intervals` × its mean sampling interval long (a server that stopped
    answering), is neither its GPU-hours nor its energy nor its limits (those buckets are `idle`)."""
    b = bucket_s * 1_000_000_000
    for s in series:
        empty = absent.get(tuple(s.tags.get(t, "") for t in series_tags))
        if not empty or s.samples < 3:
            continue
        least = least_intervals * (s.t1_ns - s.t0_ns) / (s.samples - 1)
        runs, start, t = [], s.t0_ns, s.t0_ns // b * b + b
        while t < s.t1_ns // b * b:
            if t not in empty:
                t += b
                continue
            end = t
            while end < s.t1_ns // b * b and end in empty:
                end += b
            if end - t >= least:
                runs.append((start, t))
                start = end
            t = end
        if runs:
            s.runs = [*runs, (start, s.t1_ns)]
