"""The line cache (gpuagent.pipeline.metric: a series' text and boolean values written into its
format while they hold) writes byte for byte what the general path writes, for every point of
every simulated profile and for values that change under it."""

from __future__ import annotations

import pytest
from cost.stream import FLEETS, stream

from gpuagent.pipeline import metric
from gpuagent.pipeline.metric import Point


def _general(p: Point) -> str:
    return metric._serialize(p.measurement, p.tags, p.fields, p.time_ns)


@pytest.mark.parametrize("profile", sorted(FLEETS))
def test_every_point_of_every_profile_is_written_as_the_general_path_writes_it(profile):
    points = stream(profile, runs=True)
    assert points
    for n, (measurement, tags, fields, _run) in enumerate(points):
        for t in (1_700_000_000_000_000_000 + n, 1_700_000_000_000_000_001 + n):  # a miss, then the kept format
            p = Point(measurement, tags, fields, t)
            assert p.to_line() == _general(p), (measurement, tags)


def test_a_series_whose_text_or_boolean_values_change_is_written_with_the_new_ones():
    tags = {"host": "h", "gpu": "0"}
    shapes = [
        {"state": "active", "ok": True, "n": 1, "x": 0.5},
        {"state": "active", "ok": True, "n": 2, "x": 1.5},  # numbers move: the kept format
        {"state": "down", "ok": True, "n": 2, "x": 1.5},
        {"state": "down", "ok": False, "n": 2, "x": 1.5},
        {"state": 'a "quoted" 100% \\ value\n', "ok": False, "n": -3, "x": 1e300},
        {"state": "active", "ok": True, "n": 1, "x": 0.5},
    ]
    for i, fields in enumerate(shapes):
        p = Point("m_line_cache", tags, fields, 10 + i)
        assert p.to_line() == _general(p)
    nan = Point("m_line_cache", tags, {"state": "active", "ok": True, "n": 1, "x": float("nan")}, 1)
    for write in (nan.to_line, lambda: _general(nan)):  # no form (the Accumulator leaves NaN out)
        with pytest.raises(ValueError):
            write()
    one = [Point("m_line_cache_one", {"k": "v"}, {"s": s}, 1).to_line() for s in ("a", "b", "a")]
    assert one == ['m_line_cache_one,k=v s="a" 1', 'm_line_cache_one,k=v s="b" 1', 'm_line_cache_one,k=v s="a" 1']
