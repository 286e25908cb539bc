"""The real sweep on this machine's CPU: its knees must be the caches the kernel reports.

The machine is shared and noisy: each size is the median of interleaved
rounds, and a sweep that a neighbour disturbed is retried (twice at most).
Every attempt must find a knee within a factor of two of L2, one of L3 (the
last, into DRAM), and no knee that matches neither, so a finder that
misplaces or invents knees still fails.
"""

import pytest

from gpuagent.probe.backends import NumpyBackend, cpu_caches
from gpuagent.probe.result import run_probe
from gpuagent.probe.sweep import working_set_sizes

pytest.importorskip("numpy")

ATTEMPTS = 3


def within_2x(a, b):
    return b / 2 <= a <= 2 * b


def problems(knees, l2, l3):
    found = [k.bytes for k in knees]
    out = []
    if not any(within_2x(k, l2) for k in found):
        out.append(f"no knee within 2x of L2 {l2}")
    if not found or not within_2x(found[-1], l3):
        out.append(f"last knee not within 2x of L3 {l3}")
    out += [f"stray knee {k}" for k in found if not (within_2x(k, l2) or within_2x(k, l3))]
    return out


def test_cpu_sweep_finds_the_l2_and_l3_knees():
    levels = {c.level: c.bytes for c in cpu_caches()}
    if 2 not in levels or 3 not in levels:
        pytest.skip(f"this CPU reports no L2 and L3 in sysfs ({levels})")
    l1, l2, l3 = levels.get(1, 32 << 10), levels[2], levels[3]
    if l3 < 4 * l2:
        pytest.skip(f"L3 ({l3}) is too close to L2 ({l2}) for two separate knees")
    sizes = working_set_sizes(2 * l1, 4 * l3, 24)
    report = []
    for attempt in range(ATTEMPTS):
        result = run_probe(NumpyBackend(), sizes, rounds=9, seed=attempt)
        found = problems(result.knees, l2, l3)
        if not found:
            assert result.knee.ratio > 1.5  # cache to DRAM is a real drop, not a wobble
            return
        curve = ", ".join(
            f"{s >> 10}K:{b:.0f}"
            for s, b in zip(result.sweep.sizes, result.sweep.bandwidth_gbps, strict=False)
        )
        report.append(
            f"attempt {attempt}: {found}; knees {[k.bytes for k in result.knees]}; curve {curve}"
        )
    pytest.fail("\n".join(report))
