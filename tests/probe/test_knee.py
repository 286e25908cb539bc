"""The knee finder on synthetic curves whose knee is known."""

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuagent.probe.knee import find_knees, noise_sigma
from gpuagent.probe.sweep import MIB, working_set_sizes

SIZES = working_set_sizes(1 * MIB, 240 * MIB, 24)  # a 60 MB-L2 GPU's sweep
STEP = math.log(SIZES[1] / SIZES[0])  # one sweep step, in log size


def curve(sizes, knee, high, low, noise, seed, sharpness=None):
    """Bandwidth: `high` below `knee`, `low` above; a sharp step, or a smooth one (hit fraction)."""
    rng = random.Random(seed)
    out = []
    for s in sizes:
        if sharpness is None:
            bw = high if s <= knee else low
        else:
            hit = 1 / (1 + (s / knee) ** sharpness)
            bw = 1 / (hit / high + (1 - hit) / low)
        out.append(bw * math.exp(rng.gauss(0, noise)))
    return out


def steps_off(found, true):
    return abs(math.log(found / true)) / STEP


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    position=st.floats(3.5, 19.5),  # in steps from the first size: plateaus of >= 3 points
    ratio=st.floats(1.6, 8.0),
    noise=st.floats(0.0, 0.04),
    seed=st.integers(0, 2**32 - 1),
)
@pytest.mark.slow
def test_sharp_knee_recovered_within_one_step(position, ratio, noise, seed):
    knee = SIZES[0] * math.exp(position * STEP)
    bws = curve(SIZES, knee, 5000.0 * ratio, 5000.0, noise, seed)
    knees = find_knees(SIZES, bws)
    assert len(knees) == 1, knees
    assert steps_off(knees[0].bytes, knee) <= 1.0
    assert knees[0].ratio == pytest.approx(ratio, rel=0.15)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    position=st.floats(4.5, 18.5),
    ratio=st.floats(2.0, 8.0),
    sharpness=st.floats(4.0, 16.0),
    noise=st.floats(0.0, 0.03),
    seed=st.integers(0, 2**32 - 1),
)
def test_smooth_knee_recovered_within_one_step(position, ratio, sharpness, noise, seed):
    # A gradual fall (replacement is not perfect LRU). The finder's knee is where bandwidth is the
    # geometric mean of the plateaus; on this model that is where the hit fraction is h below.
    capacity = SIZES[0] * math.exp(position * STEP)
    high, low = 4000.0 * ratio, 4000.0
    h = (1 / math.sqrt(high * low) - 1 / low) / (1 / high - 1 / low)
    knee = capacity * ((1 - h) / h) ** (1 / sharpness)
    bws = curve(SIZES, capacity, high, low, noise, seed, sharpness)
    knees = find_knees(SIZES, bws)
    assert len(knees) == 1, knees
    assert steps_off(knees[0].bytes, knee) <= 1.0
    assert steps_off(knees[0].bytes, capacity) <= 1.5  # and near the capacity itself


@pytest.mark.parametrize("seed", range(20))
def test_flat_noisy_curve_has_no_knee(seed):
    rng = random.Random(seed)
    bws = [3000 * math.exp(rng.gauss(0, 0.04)) for _ in SIZES]
    assert find_knees(SIZES, bws) == []


def test_one_outlier_is_not_a_knee():
    bws = [1000.0] * len(SIZES)
    bws[10] = 300.0  # a neighbour's burst, in one sample
    assert find_knees(SIZES, bws) == []


@pytest.mark.parametrize("seed", range(10))
def test_two_levels_give_two_knees_with_their_plateaus(seed):
    # CPU-like: L2 (512 KiB) -> L3 (8 MiB) -> DRAM, swept from 64 KiB to 32 MiB.
    sizes = working_set_sizes(64 << 10, 32 << 20, 24)
    rng = random.Random(seed)
    bws = []
    for s in sizes:
        bw = 60.0 if s <= 512 << 10 else 40.0 if s <= 8 << 20 else 14.0
        bws.append(bw * math.exp(rng.gauss(0, 0.02)))
    knees = find_knees(sizes, bws)
    assert len(knees) == 2
    step = math.log(sizes[1] / sizes[0])
    assert abs(math.log(knees[0].bytes / (512 << 10))) <= step
    assert abs(math.log(knees[1].bytes / (8 << 20))) <= step
    assert knees[0].bw_below_gbps == pytest.approx(60, rel=0.05)
    assert knees[0].bw_above_gbps == pytest.approx(40, rel=0.05)
    assert knees[1].bw_above_gbps == pytest.approx(14, rel=0.05)


def test_noise_estimate_ignores_a_step():
    y = [0.0] * 12 + [-1.0] * 12
    assert noise_sigma(y) == 0.0


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="increasing"):
        find_knees([2, 1, 3, 4], [1, 1, 1, 1])
    with pytest.raises(ValueError, match="positive"):
        find_knees([1, 2, 3, 4], [1, 0, 1, 1])
