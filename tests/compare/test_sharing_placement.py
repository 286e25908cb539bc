"""The sharing and placement rules on their own, without a server (the fast lane runs them; the
servers' tests check them end to end: test_compare_shared.py, test_compare_work_servers.py)."""

from __future__ import annotations

import pytest

from gpuagent.compare.placement import placement
from gpuagent.compare.sharing import shared_segments

S = 1_000_000_000


def _charged(segs):
    return sum((b - a) * f for a, b, f in segs)


def test_two_pieces_on_one_gpu_share_the_overlap_evenly_and_never_sum_above_the_gpu():
    a, b = shared_segments([("a", 0, 100 * S, None), ("b", 50 * S, 150 * S, None)])
    assert a == [(0, 50 * S, 1.0), (50 * S, 100 * S, 0.5)]
    assert b == [(50 * S, 100 * S, 0.5), (100 * S, 150 * S, 1.0)]
    assert _charged(a) + _charged(b) == 150 * S  # the GPU's own busy time, not 200 s


def test_weights_share_by_sm_and_a_piece_alone_keeps_its_span():
    a, b = shared_segments([("a", 0, 10 * S, 30.0), ("b", 0, 10 * S, 10.0)])
    assert a == [(0, 10 * S, 0.75)] and b == [(0, 10 * S, 0.25)]
    # One weight missing: evenly (a share by SM needs every piece's SM).
    a, b = shared_segments([("a", 0, 10 * S, 30.0), ("b", 0, 10 * S, None)])
    assert a == [(0, 10 * S, 0.5)] and b == [(0, 10 * S, 0.5)]
    # Two runs of one piece are one piece: they do not share with each other.
    assert shared_segments([("a", 0, 5 * S, None), ("a", 7 * S, 9 * S, None)]) == [
        [(0, 5 * S, 1.0)],
        [(7 * S, 9 * S, 1.0)],
    ]


def _model(name, units, gpu_hours, units_per_dollar):
    return {"model": name, "units": units, "gpu_hours": gpu_hours, "units_per_dollar": units_per_dollar}


def test_placement_names_the_cheapest_priced_model_and_its_saving_recomputes():
    doc = {
        "groups": [{"key": {"model": "H100", "workload": "chat"}, "limits": {"memory": 80.0, "starved": 20.0}}],
        "unpriced": ["RTX 4090"],
        "cross_model": [
            {
                "workload": "chat",
                "unit": "tokens_out",
                "models": [
                    _model("L40S", 1_000_000, 2.0, 500_000.0),  # $2 per M units
                    _model("H100", 3_000_000, 0.5, 1_000_000.0),  # $1 per M units
                    _model("RTX 4090", 10_000, 0.1, None),
                ],
            },
            {"workload": "solo", "unit": "requests", "models": [_model("L40S", 5, 1.0, 1.0)]},
        ],
    }
    (p,) = placement(doc)  # "solo" ran on one priced model only: nothing to compare
    assert p["cheapest"] == "H100" and [m["model"] for m in p["models"]] == ["L40S", "H100"]
    spent = 1_000_000 * 2 / 1e6 + 3_000_000 * 1 / 1e6
    there = 4_000_000 * 1 / 1e6
    assert p["saving"] == pytest.approx(spent - there, rel=1e-12)
    assert p["saving_pct"] == pytest.approx(100 * (spent - there) / spent, rel=1e-12)
    assert any("under 1" in c and c.startswith("H100") for c in p["caveats"])  # 0.5 GPU-hours of evidence
    assert any("limited by memory" in c for c in p["caveats"])
    assert any("unpriced models left out: RTX 4090" in c for c in p["caveats"])
