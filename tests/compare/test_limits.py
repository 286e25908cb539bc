"""The rules of 'what limits the work' (gpuagent.compare.limits), one cell at a time, and the table
of docs/compare.md that documents them."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuagent.compare.limits import CLASSES, Cell, classify, rule_table, shares

DOCS = Path(__file__).resolve().parents[2] / "docs" / "compare.md"

# A busy Ada card (no GPM): SM clock at its max, memory moderately busy, well under its power cap.
ADA = dict(
    allocated=True,
    util=95.0,
    mem_busy=40.0,
    power_ratio=250 / 350,
    clock_ratio=1.0,
    power_reason_pct=0.0,
    thermal_reason_pct=0.0,
    pcie_ratio=0.06,
)
HOPPER = {**ADA, "dram_bw": 30.0}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({**ADA, "allocated": False}, ("idle", False)),
        ({**ADA, "util": 3.0}, ("starved", False)),
        ({**ADA, "thermal_reason_pct": 60.0, "power_reason_pct": 60.0}, ("thermal", False)),
        ({**ADA, "power_reason_pct": 55.0}, ("power", False)),
        ({**ADA, "power_ratio": 345 / 350}, ("power", False)),  # 98.6 % of the enforced limit
        ({**ADA, "pcie_ratio": 0.75}, ("interconnect", True)),
        ({**ADA, "pcie_ratio": 0.5}, ("compute", True)),
        ({**ADA, "mem_busy": 65.0}, ("memory", True)),
        ({**ADA, "mem_busy": 96.0, "clock_ratio": 0.8}, ("memory", True)),  # busier than the SMs, clock held
        ({**ADA, "mem_busy": 50.0, "clock_ratio": 0.8}, ("compute", True)),
        ({**ADA}, ("compute", True)),
        ({**HOPPER, "dram_bw": 72.0}, ("memory", False)),
        ({**HOPPER, "mem_busy": 90.0}, ("compute", False)),  # GPM decides: busy time is not bandwidth
        ({**HOPPER}, ("compute", False)),
    ],
)
def test_each_rule(fields, expected):
    assert classify(Cell(**fields)) == expected


def test_shares_add_up_to_100_weighted_by_gpu_hours():
    cells = [(Cell(**ADA), 2.0), (Cell(**{**ADA, "util": 1.0}), 1.0), (Cell(**{**ADA, "allocated": False}), 1.0)]
    pct, proxy = shares(cells)
    assert set(pct) == set(CLASSES) == set(proxy)
    assert pct["compute"] == 50.0 and pct["starved"] == 25.0 and pct["idle"] == 25.0
    assert sum(pct.values()) == 100.0
    assert proxy["compute"] is True and proxy["starved"] is False and proxy["memory"] is False


@pytest.mark.parametrize(("gen", "lane_gbps"), [(1, 0.25), (2, 0.5), (3, 0.985), (4, 1.969), (5, 3.938)])
def test_pcie_lane_rates(gen, lane_gbps):
    from gpuagent.compare.limits import pcie_lane_gbps

    assert abs(pcie_lane_gbps(gen) - lane_gbps) < 0.001


def test_no_time_is_all_zero():
    pct, proxy = shares([])
    assert pct == dict.fromkeys(CLASSES, 0.0) and not any(proxy.values())


def test_docs_hold_the_rule_table():
    assert rule_table() in DOCS.read_text(), "docs/compare.md: paste gpuagent.compare.limits.rule_table()"
    for cls in CLASSES:
        assert f"| `{cls}` |" in rule_table()
