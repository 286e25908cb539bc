"""Batching NVML reads changes no field: every built-in profile gives the same stream (same
seed, same sim clock) as the golden files written from the code before batching (issue 21)."""

from __future__ import annotations

import json

import pytest
from cost.stream import FLEETS, GOLDEN, stream


def _by_point(points):
    return {(m, tuple(sorted(t.items())), i): f for i, (m, t, f) in enumerate(points)}


@pytest.mark.parametrize("profile", sorted(FLEETS))
def test_same_points_fields_and_values(profile):
    before = json.loads((GOLDEN / f"{profile}.json").read_text())
    after = stream(profile)
    assert [(m, t) for m, t, _ in after] == [(m, t) for m, t, _ in before], "points differ"
    for (m, t, fa), (_, _, fb) in zip(after, before, strict=True):
        assert set(fa) == set(fb), f"{m} {t.get('gpu')}: fields {set(fa) ^ set(fb)}"
        diff = {k: (fb[k], fa[k]) for k in fb if fa[k] != fb[k] or type(fa[k]) is not type(fb[k])}
        assert not diff, f"{m} {t}: (before, after) {diff}"
