"""What limits the work: each GPU's time, bucket by bucket, in one of seven classes.

The rules read measured fields only (means over the bucket of one GPU's samples), first match
wins, and are the table in docs/compare.md (tests/compare/test_compare_work.py checks that the
two agree). On Hopper and newer the GPM fields decide memory and compute (DRAM bandwidth against
its peak, SM activity); on Ada and Ampere only proxies exist: memory busy time
(`memory_util_pct`, the share of time memory was read or written, not bandwidth), SM clock
against its max, the clock-event reasons and PCIe throughput against the link. A class reached
through a proxy is flagged (`limits_proxy`), and no proxy is ever shown as a bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

CLASSES = ("compute", "memory", "power", "thermal", "interconnect", "starved", "idle")

# Thresholds (%): one place, quoted by the rule table in docs/compare.md.
STARVED_UTIL_PCT = 10.0  # allocated, and a kernel ran less than this share of the time
REASON_SHARE_PCT = 50.0  # a clock-event reason set in at least this share of the samples
POWER_AT_CAP_PCT = 97.0  # mean power at or above this share of the enforced limit
PCIE_NEAR_PEAK_PCT = 70.0  # PCIe TX + RX at or above this share of the link's peak
DRAM_BW_PCT = 60.0  # GPM DRAM bandwidth at or above this share of the peak
MEM_BUSY_PCT = 60.0  # memory busy time at or above this share (proxy)
CLOCK_HELD_PCT = 90.0  # SM clock below this share of its max with memory busy: memory holds it (proxy)


# PCIe bandwidth per lane and direction (GB/s) by generation, after line encoding (PCI-SIG:
# 8b/10b for Gen 1-2: 0.25 × 2^(gen-1); 128b/130b from Gen 3: 0.985 × 2^(gen-3), i.e. 8 GT/s × 128/130).
def pcie_lane_gbps(gen: float) -> float:
    return 0.25 * 2 ** (gen - 1) if gen < 3 else 8 * 128 / 130 / 8 * 2 ** (gen - 3)


# (class, proxy, rule): docs/compare.md prints this table; classify() implements it, in this order.
RULES = (
    ("idle", False, "no `gpu_work` point on the GPU in the bucket (no work allocated)"),
    ("starved", False, f"work allocated and mean `gpu_util_pct` < {STARVED_UTIL_PCT:g}"),
    (
        "thermal",
        False,
        f"`sw_thermal_slowdown` or `hw_thermal_slowdown` set in >= {REASON_SHARE_PCT:g} % of the `gpu_clocks` samples",
    ),
    (
        "power",
        False,
        f"`sw_power_cap` or `hw_power_brake_slowdown` set in >= {REASON_SHARE_PCT:g} % of the samples, "
        f"or mean `power_w` >= {POWER_AT_CAP_PCT:g} % of `enforced_power_limit_w`",
    ),
    (
        "interconnect",
        True,
        "mean `tx_bytes_per_s` + `rx_bytes_per_s` (`gpu_pcie`) >= "
        f"{PCIE_NEAR_PEAK_PCT:g} % of the link's two-way peak (2 × lanes × GB/s per lane of the largest `link_gen` "
        "and `link_width`: 0.25 × 2^(gen-1) for Gen 1-2, 0.985 × 2^(gen-3) from Gen 3): a ~20 ms sample per reading, "
        "so a proxy",
    ),
    ("memory", False, f"GPM (Hopper and newer): mean `dram_bw_util_pct` >= {DRAM_BW_PCT:g}"),
    (
        "memory",
        True,
        f"no GPM: mean `memory_util_pct` (busy time, not bandwidth) >= {MEM_BUSY_PCT:g}, "
        f"or >= the mean `gpu_util_pct` with mean `sm_clock_mhz` < {CLOCK_HELD_PCT:g} % of `max_sm_clock_mhz`",
    ),
    ("compute", False, "GPM: none of the above (the SMs were busy with the DRAM below its threshold)"),
    ("compute", True, "no GPM: none of the above (by elimination)"),
)


@dataclass
class Cell:
    """One GPU over one bucket: the figures the rules read, each a mean over the bucket's samples
    (None where the GPU has no such field). Ratios are computed where the means are (the database
    for PromQL), so both engines compare the same numbers with the thresholds."""

    allocated: bool = False
    util: float | None = None  # gpu_util_pct
    mem_busy: float | None = None  # memory_util_pct
    dram_bw: float | None = None  # dram_bw_util_pct (GPM)
    power_ratio: float | None = None  # mean power_w / largest enforced_power_limit_w
    clock_ratio: float | None = None  # mean sm_clock_mhz / largest max_sm_clock_mhz
    power_reason_pct: float | None = None  # share of samples with sw_power_cap (or hw_power_brake), the larger
    thermal_reason_pct: float | None = None  # share of samples with a thermal slowdown reason, the larger
    pcie_ratio: float | None = None  # mean TX + RX / the link's two-way peak


def classify(c: Cell) -> tuple[str, bool]:
    """(class, reached through a proxy) for one cell, by RULES in order."""
    if not c.allocated:
        return "idle", False
    if c.util is not None and c.util < STARVED_UTIL_PCT:
        return "starved", False
    if c.thermal_reason_pct is not None and c.thermal_reason_pct >= REASON_SHARE_PCT:
        return "thermal", False
    if (c.power_reason_pct is not None and c.power_reason_pct >= REASON_SHARE_PCT) or (
        c.power_ratio is not None and c.power_ratio >= POWER_AT_CAP_PCT / 100
    ):
        return "power", False
    if c.pcie_ratio is not None and c.pcie_ratio >= PCIE_NEAR_PEAK_PCT / 100:
        return "interconnect", True
    if c.dram_bw is not None:  # GPM decides
        return ("memory", False) if c.dram_bw >= DRAM_BW_PCT else ("compute", False)
    if c.mem_busy is not None:
        held = c.clock_ratio is not None and c.clock_ratio < CLOCK_HELD_PCT / 100
        if c.mem_busy >= MEM_BUSY_PCT or (held and c.util is not None and c.mem_busy >= c.util):
            return "memory", True
    return "compute", True


def shares(cells: list[tuple[Cell, float]]) -> tuple[dict[str, float], dict[str, bool]]:
    """[(cell, GPU-hours)] -> (class -> % of the GPU-hours, adding up to 100; class -> reached by a proxy)."""
    hours = dict.fromkeys(CLASSES, 0.0)
    proxy = dict.fromkeys(CLASSES, False)
    for cell, weight in cells:
        cls, by_proxy = classify(cell)
        hours[cls] += weight
        proxy[cls] = proxy[cls] or (by_proxy and weight > 0)
    total = sum(hours.values())
    if total <= 0:
        return dict.fromkeys(CLASSES, 0.0), proxy
    return {k: 100.0 * v / total for k, v in hours.items()}, proxy


def rule_table() -> str:
    """RULES as the Markdown table docs/compare.md holds (a test keeps the two the same)."""
    lines = ["| order | class | proxy | rule |", "| --- | --- | --- | --- |"]
    lines += [f"| {i} | `{c}` | {'yes' if p else 'no'} | {r} |" for i, (c, p, r) in enumerate(RULES, 1)]
    return "\n".join(lines)
