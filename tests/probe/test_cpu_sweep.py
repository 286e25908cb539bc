"""The real sweep on this machine's CPU, judged by what the code can guarantee.

Where a shared host's caches show up in NumPy's copy bandwidth is a fact of
the host (a VM's L2 step can be flat, its share of L3 a fraction of what
sysfs reports), not of the project, so nothing here compares knees with
cache sizes. The knee finder's accuracy is proved on synthetic curves with
known knees (test_knee.py). Here a real sweep must run end to end and
report a curve and knees that are consistent with each other: every knee
sits where its own curve drops, with the plateaus the curve really has.
"""

import math
import statistics

import pytest

from gpuagent.probe.backends import NumpyBackend, cpu_caches
from gpuagent.probe.knee import MIN_PLATEAU
from gpuagent.probe.result import run_probe
from gpuagent.probe.sweep import working_set_sizes

pytest.importorskip("numpy")

STEPS = 24


@pytest.fixture(scope="module")
def result():
    levels = {c.level: c.bytes for c in cpu_caches()}
    # Sizes only steer the sweep's range: 64 KiB to 64 MiB when sysfs says nothing.
    l1 = levels.get(1, 32 << 10)
    top = max(4 * levels.get(3, levels.get(2, 16 << 20)), 64 << 20)
    sizes = working_set_sizes(2 * l1, top, STEPS)
    return run_probe(NumpyBackend(), sizes, rounds=5, seed=0)


def test_sweep_runs_end_to_end(result):
    sweep = result.sweep
    assert len(sweep.sizes) == STEPS and sweep.sizes == sorted(set(sweep.sizes))
    assert len(sweep.bandwidth_gbps) == STEPS
    assert all(math.isfinite(b) and b > 0 for b in sweep.bandwidth_gbps)
    assert sweep.duration_s > 0 and result.method == "numpy-cpu"
    doc = result.as_json()
    assert doc["sizes"] == sweep.sizes and len(doc["knees"]) == len(result.knees)


def test_curve_falls_rather_than_rises(result):
    # Small working sets live in a cache at least as fast as DRAM: whatever the host, the
    # smallest quarter of the sweep is not markedly slower than the largest quarter.
    bws = result.sweep.bandwidth_gbps
    q = STEPS // 4
    assert statistics.median(bws[:q]) >= 0.8 * statistics.median(bws[-q:]), bws


def test_each_knee_is_where_its_own_curve_drops(result):
    sizes, bws = result.sweep.sizes, result.sweep.bandwidth_gbps
    knees = result.knees
    assert [k.bytes for k in knees] == sorted(k.bytes for k in knees)
    for i, k in enumerate(knees):
        assert sizes[0] <= k.bytes <= sizes[-1]
        assert k.last_fast < k.first_slow
        assert k.last_fast + 1 >= MIN_PLATEAU and STEPS - k.first_slow >= MIN_PLATEAU
        # The plateaus are the medians of the curve between this knee and its neighbours.
        start = knees[i - 1].first_slow if i else 0
        end = knees[i + 1].last_fast if i + 1 < len(knees) else STEPS - 1
        assert k.bw_below_gbps == statistics.median(bws[start : k.last_fast + 1])
        assert k.bw_above_gbps == statistics.median(bws[k.first_slow : end + 1])
        assert k.ratio == pytest.approx(k.bw_below_gbps / k.bw_above_gbps)
        assert k.ratio >= 1.15  # the finder's floor: no knee without a real drop
        # The curve does cross from the upper plateau to the lower one around the knee.
        assert max(bws[start : k.last_fast + 1]) > min(bws[k.first_slow : end + 1])
    if knees:
        assert result.knee.ratio == max(k.ratio for k in knees)
        assert result.as_json()["knee_bytes"] == result.knee.bytes
    else:
        assert result.knee is None and result.as_json()["knee_bytes"] is None
