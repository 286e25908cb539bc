"""The working-set sweep: which sizes to probe, and measuring each robustly.

Rounds are interleaved (every size once per round, sizes in a shuffled order
each round), so a burst of load from a neighbour on a shared machine costs a
few samples spread over many sizes instead of bending one stretch of the
curve into a false knee.

Each size's bandwidth is the median of the faster half of its samples.
Interference only ever slows a sample down (a neighbour's cache traffic, a
preempted core), so the plain median fails once half the samples are hit,
which happens on a busy two-core machine; the best sample alone would trust
one lucky run. The upper half's median survives both.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

MIB = 1 << 20
ALIGN = 4096  # sizes are whole pages: every backend's element type divides it


class Backend(Protocol):
    """Something that can stream-read the first ``nbytes`` of a buffer and time it."""

    name: str  # method: "numpy-cpu", "cupy", "torch", "simulated"
    device: str  # what was measured, in words
    target_bytes: int  # bytes to read per timed sample (sets the sample's duration)

    def prepare(self, max_bytes: int) -> None:
        """Allocate (and touch) a buffer of at least ``max_bytes``."""

    def read_gbps(self, nbytes: int) -> float:
        """One timed sample: read the first ``nbytes`` repeatedly, warm; return GB/s (1e9 bytes/s)."""

    def close(self) -> None: ...


def working_set_sizes(min_bytes: int, max_bytes: int, steps: int = 24) -> list[int]:
    """``steps`` log-spaced sizes from ``min_bytes`` to ``max_bytes``, page-aligned, strictly increasing."""
    if steps < 2:
        raise ValueError("steps must be at least 2")
    if min_bytes < ALIGN:
        raise ValueError(f"min bytes must be at least {ALIGN}")
    if max_bytes <= min_bytes:
        raise ValueError("max bytes must be larger than min bytes")
    ratio = (max_bytes / min_bytes) ** (1 / (steps - 1))
    sizes: list[int] = []
    for i in range(steps):
        size = max(ALIGN, round(min_bytes * ratio**i / ALIGN) * ALIGN)
        if sizes and size <= sizes[-1]:
            size = sizes[-1] + ALIGN  # a range too narrow for the steps: keep sizes distinct
        sizes.append(size)
    return sizes


@dataclass
class SweepResult:
    sizes: list[int]
    bandwidth_gbps: list[float]  # per size, upper_median over rounds
    samples: list[list[float]] = field(default_factory=list)  # per size, every round's GB/s
    rounds: int = 0
    duration_s: float = 0.0

    @property
    def spread(self) -> list[float]:
        """Per size, (max - min) / median over rounds: how noisy the machine was."""
        return [(max(s) - min(s)) / statistics.median(s) for s in self.samples]


def upper_median(samples: Sequence[float]) -> float:
    """Median of the faster half (the middle one included when the count is odd)."""
    ordered = sorted(samples)
    return statistics.median(ordered[len(ordered) // 2 :])


def run_sweep(backend: Backend, sizes: Sequence[int], rounds: int = 7, seed: int = 0) -> SweepResult:
    """Measure every size ``rounds`` times, interleaved; report each size's upper_median."""
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    rng = random.Random(seed)
    start = time.monotonic()
    backend.prepare(max(sizes))
    samples: list[list[float]] = [[] for _ in sizes]
    order = list(range(len(sizes)))
    for _ in range(rounds):
        rng.shuffle(order)
        for i in order:
            samples[i].append(backend.read_gbps(sizes[i]))
    medians = [upper_median(s) for s in samples]
    if any(not math.isfinite(m) or m <= 0 for m in medians):
        raise RuntimeError(f"{backend.name}: a sample came back non-positive or non-finite: {medians}")
    return SweepResult(list(sizes), medians, samples, rounds, time.monotonic() - start)
