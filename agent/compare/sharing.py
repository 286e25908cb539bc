"""A GPU's time (and so its energy) shared among the work on it at the same time.

Two servers on one GPU, or two jobs time-sliced on it, each hold the GPU over their own span; charged
the whole GPU each, the work on a GPU would add up to more than the GPU did. So each span is cut
where another piece of work on the same GPU (or MIG slice) starts or ends, and over each cut the
pieces present share it: by their weight where every one of them has one (a job's SM share, from
the processes collector's per-process sm_util_pct), evenly otherwise. Per cut the fractions add up
to 1, so per GPU the charged time and energy never exceed the GPU's own. One piece alone on its GPU
keeps its whole span as one cut (fraction 1): the windows asked for its energy are as before.
"""

from __future__ import annotations

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
