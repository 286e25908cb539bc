"""Finding the knees of a bandwidth-vs-working-set curve.

A cache shows as a plateau (the set fits: cache bandwidth), a drop, and a
lower plateau (the set spills to the next level). We work on log(size) and
log(bandwidth) so a ratio is a distance, fit "plateau, linear ramp, plateau"
to the curve by brute force (24 points: a few hundred candidate fits), and
recurse on each side of an accepted knee to find the next level's knee
(binary segmentation). Plateau levels are medians and the fit cost is the
sum of absolute residuals, so one noisy point neither makes nor moves a
knee. A knee is accepted only when its drop is both a real ratio
(``min_ratio``) and well above the point-to-point noise of the stretch of
curve it was found in.

The knee's position is where the curve crosses the geometric mean of the two
plateau bandwidths (interpolated in log size): for a sharp step that is the
geometric middle of the last fast and first slow size, so it lies within one
sweep step of the true capacity.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_PLATEAU = 3  # points a plateau needs on each side of a knee (two can be a ramp's tail)
NOISE_SIGMAS = 5.0  # a drop must exceed this many noise sigmas (log units)


@dataclass(frozen=True)
class Knee:
    bytes: int  # effective cache capacity: where bandwidth is halfway (geometrically) down the drop
    bw_below_gbps: float  # plateau for working sets smaller than the knee (cache speed)
    bw_above_gbps: float  # plateau for working sets larger than the knee (next level's speed)
    ratio: float  # bw_below / bw_above
    last_fast: int  # index of the last point of the upper plateau
    first_slow: int  # index of the first point of the lower plateau


def noise_sigma(logs: Sequence[float]) -> float:
    """Robust noise estimate of a curve: MAD of point-to-point differences (steps are outliers to it)."""
    diffs = [b - a for a, b in zip(logs, logs[1:], strict=False)]
    if len(diffs) < 2:
        return 0.0
    med = statistics.median(diffs)
    mad = statistics.median(abs(d - med) for d in diffs)
    # Differences of two independent noisy points have sqrt(2) times the points' sigma.
    return 1.4826 * mad / math.sqrt(2)


def _fit_one(x: list[float], y: list[float], lo: int, hi: int):
    """Best plateau-ramp-plateau fit on points lo..hi (inclusive): (cost, a, b, high, low) or None."""
    best = None
    for a in range(lo + MIN_PLATEAU - 1, hi - MIN_PLATEAU + 1):
        high = statistics.median(y[lo : a + 1])
        cost_high = sum(abs(v - high) for v in y[lo : a + 1])
        for b in range(a + 1, hi - MIN_PLATEAU + 2):
            low = statistics.median(y[b : hi + 1])
            if low >= high:
                continue
            cost = cost_high + sum(abs(v - low) for v in y[b : hi + 1])
            span = x[b] - x[a]
            for i in range(a + 1, b):
                cost += abs(y[i] - (high + (low - high) * (x[i] - x[a]) / span))
            # Ties go to the narrower ramp (found first: b grows).
            if best is None or cost < best[0] - 1e-12:
                best = (cost, a, b, high, low)
    return best


def _crossing(x: list[float], y: list[float], lo: int, hi: int, a: int, b: int, high: float, low: float) -> float:
    """log2 size where the curve falls through the plateaus' midpoint level.

    Searched over the whole fitted range (noise can put the last fast point
    below the midpoint already); of several crossings, the one nearest the
    middle of the fitted ramp.
    """
    mid = (high + low) / 2
    centre = (x[a] + x[b]) / 2
    best = None
    for i in range(lo, hi):
        if y[i] >= mid > y[i + 1]:
            cross = x[i] + (x[i + 1] - x[i]) * (y[i] - mid) / (y[i] - y[i + 1])
            if best is None or abs(cross - centre) < abs(best - centre):
                best = cross
    return centre if best is None else best


def find_knees(
    sizes: Sequence[int],
    bandwidths: Sequence[float],
    min_ratio: float = 1.15,
    max_knees: int = 4,
) -> list[Knee]:
    """All significant knees, smallest working set first. Sizes must be increasing."""
    if len(sizes) != len(bandwidths):
        raise ValueError("sizes and bandwidths differ in length")
    if any(b <= 0 or not math.isfinite(b) for b in bandwidths):
        raise ValueError("bandwidths must be positive and finite")
    if any(s2 <= s1 for s1, s2 in zip(sizes, sizes[1:], strict=False)):
        raise ValueError("sizes must be strictly increasing")
    x = [math.log2(s) for s in sizes]
    y = [math.log(b) for b in bandwidths]
    floor = math.log(min_ratio)
    found: list[tuple[int, int, float]] = []  # (a, b, log2 knee)

    def split(lo: int, hi: int) -> None:
        if len(found) >= max_knees or hi - lo + 1 < 2 * MIN_PLATEAU:
            return
        fit = _fit_one(x, y, lo, hi)
        if fit is None:
            return
        _, a, b, high, low = fit
        # Noise measured on this stretch only: DRAM samples on a busy machine are far noisier
        # than cache samples, and must not drown a small cache knee elsewhere on the curve.
        if high - low < max(floor, NOISE_SIGMAS * noise_sigma(y[lo : hi + 1])):
            return
        found.append((a, b, _crossing(x, y, lo, hi, a, b, high, low)))
        split(lo, a)
        split(b, hi)

    split(0, len(sizes) - 1)
    found.sort()
    # Plateau levels between consecutive knees, now that all knees are known.
    knees = []
    for k, (a, b, log2_knee) in enumerate(found):
        start = found[k - 1][1] if k > 0 else 0
        end = found[k + 1][0] if k + 1 < len(found) else len(sizes) - 1
        below = statistics.median(bandwidths[start : a + 1])
        above = statistics.median(bandwidths[b : end + 1])
        knees.append(
            Knee(
                bytes=int(round(2**log2_knee)),
                bw_below_gbps=below,
                bw_above_gbps=above,
                ratio=below / above,
                last_fast=a,
                first_slow=b,
            )
        )
    return knees


def largest_drop(knees: Sequence[Knee]) -> Knee | None:
    """The knee with the largest bandwidth ratio: the summary knee.

    On a GPU that is the fall from L2 into DRAM; on a shared VM whose L2 step
    is flat and whose L3 share is small, it is still the curve's real drop,
    where "the last knee" could be a small wobble past it.
    """
    return max(knees, key=lambda k: k.ratio) if knees else None
