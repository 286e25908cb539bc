"""The rules of 'what limits the work' (gpuagent.compare.limits), one cell at a time, and the table
of docs/compare.md that documents them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpuagent.compare.limits import CLASSES, Cell, classify, nvlink_link_gbps, parts, rule_table, shares

DOCS = Path(__file__).resolve().parents[2] / "docs" / "compare.md"

# A busy Ada card (no GPM): SM clock at its max, memory busy 40 % of its busy time, drawing 250 W of 350.
ADA = dict(
    allocated=True,
    util=95.0,
    mem_busy=38.0,
    power_ratio=250 / 350,
    clock_ratio=1.0,
    power_reason_pct=0.0,
    thermal_reason_pct=0.0,
    pcie_ratio=0.06,
)
# A busy Hopper card: GPM's DRAM, SM, tensor and occupancy figures, all means over the bucket.
HOPPER = {**ADA, "dram_bw": 30.0, "sm_active": 85.0, "tensor_active": 60.0, "occupancy": 40.0}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({**ADA, "allocated": False}, ("idle", False)),
        ({**ADA, "util": 3.0}, ("starved", False)),
        ({**ADA, "util": 30.0, "power_ratio": 0.3}, ("starved", False)),  # idle 70 % of the bucket
        ({**ADA, "thermal_reason_pct": 60.0, "power_reason_pct": 60.0}, ("thermal", False)),
        ({**ADA, "power_reason_pct": 55.0}, ("power", False)),
        ({**ADA, "power_ratio": 345 / 350}, ("power", False)),  # 98.6 % of the enforced limit
        ({**ADA, "pcie_ratio": 0.75}, ("interconnect", True)),
        ({**HOPPER, "nvlink_ratio": 0.8}, ("interconnect", False)),
        ({**HOPPER, "nvlink_ratio": 0.5}, ("compute", False)),
        ({**ADA, "pcie_ratio": 0.5}, ("compute", True)),
        ({**ADA, "mem_busy": 65.0}, ("memory", True)),
        # 50 % busy, memory busy 40 % of the bucket: 80 % of the busy time
        ({**ADA, "util": 50.0, "mem_busy": 40.0, "power_ratio": 0.4}, ("memory", True)),
        ({**ADA, "clock_ratio": 0.8}, ("unclassified", False)),  # no field says compute: not by elimination
        ({**ADA, "power_ratio": 0.5}, ("unclassified", False)),  # 53 % of the limit while busy
        ({**ADA}, ("compute", True)),
        ({**HOPPER, "dram_bw": 72.0}, ("memory", False)),
        ({**HOPPER, "util": 50.0, "dram_bw": 36.0}, ("memory", False)),  # 72 % of the busy time
        ({**HOPPER, "mem_busy": 90.0, "tensor_active": 10.0, "occupancy": 10.0}, ("unclassified", False)),
        ({**HOPPER, "tensor_active": 10.0}, ("compute", False)),  # SMs 89 % busy, 42 % occupied
        ({**HOPPER}, ("compute", False)),
        # 100 % busy by NVML, GPM: SMs 2 %, DRAM 3 %: launch- or host-bound, not compute
        ({**HOPPER, "util": 100.0, "sm_active": 2.0, "dram_bw": 3.0, "tensor_active": 0.5}, ("starved", False)),
        ({**HOPPER, "util": None}, ("unclassified", False)),  # no busy share: no GPM ratio to read
    ],
)
def test_each_rule(fields, expected):
    assert classify(Cell(**fields)) == expected


def test_the_idle_remainder_of_a_busy_bucket_is_starved():
    # 45 % busy, DRAM at 36 % of the bucket (80 % of the busy time): 45 % memory, 55 % starved.
    cell = Cell(**{**HOPPER, "util": 45.0, "dram_bw": 36.0})
    assert parts(cell) == [("memory", False, 0.45), ("starved", False, 0.55)]
    pct, _ = shares([(cell, 2.0)])
    assert math.isclose(pct["memory"], 45.0) and math.isclose(pct["starved"], 55.0)
    assert parts(Cell(**{**HOPPER, "util": 100.0})) == [("compute", False, 1.0)]


@pytest.mark.parametrize(("version", "gbps"), [(1, 20), (4, 25), (6, 25), (7, 50), (8, None)])
def test_nvlink_rates(version, gbps):
    assert nvlink_link_gbps(version) == gbps


def test_shares_add_up_to_100_weighted_by_gpu_hours():
    full = {**ADA, "util": 100.0, "power_ratio": 0.8}
    cells = [(Cell(**full), 2.0), (Cell(**{**ADA, "util": 1.0}), 1.0), (Cell(**{**ADA, "allocated": False}), 1.0)]
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
