"""What limits the work: each GPU's time, bucket by bucket, in one of eight classes.

The rules read measured fields only (means over the bucket of one GPU's samples) and are the
table in docs/compare.md (tests/compare/test_limits.py checks that the two agree). No class is
a default: each needs fields that say so, and a bucket no rule claims is `unclassified`.

A bucket where work was allocated is split by the GPU's busy share (mean `gpu_util_pct`): the
idle remainder is `starved` (work was there, the GPU waited for it), the busy part takes the
first rule that matches, each activity read as a share of the busy time (a 45 %-busy bucket
with DRAM at 36 % of the interval moved DRAM at 80 % of its peak while it ran). On Hopper and
newer the GPM fields decide memory and compute (DRAM bandwidth, SM and tensor activity,
occupancy); on Ada and Ampere only proxies exist: memory busy time (`memory_util_pct`, the
share of time memory was read or written, not bandwidth), power against its limit and the SM
clock against its max. A class reached through a proxy is flagged (`limits_proxy`).
"""

from __future__ import annotations

from dataclasses import dataclass

CLASSES = ("compute", "memory", "power", "thermal", "interconnect", "starved", "idle", "unclassified")

# Thresholds (%): one place, quoted by the rule table in docs/compare.md.
STARVED_UTIL_PCT = 10.0  # allocated, and a kernel ran less than this share of the time: the whole bucket
REASON_SHARE_PCT = 50.0  # a clock-event reason set in at least this share of the samples
POWER_AT_CAP_PCT = 97.0  # mean power at or above this share of the enforced limit
LINK_NEAR_PEAK_PCT = 70.0  # PCIe or NVLink TX + RX at or above this share of the links' two-way peak
DRAM_BW_PCT = 60.0  # GPM DRAM bandwidth at or above this share of the peak, while busy
TENSOR_PCT = 40.0  # GPM tensor pipes active at or above this share of the busy time
SM_ACTIVE_PCT = 80.0  # GPM SMs active at or above this share of the busy time ...
OCCUPANCY_PCT = 25.0  # ... with warps resident at or above this share of the SMs' capacity, while busy
LAUNCH_BOUND_PCT = 20.0  # GPM SMs and DRAM both below this share while busy: kernels too small to fill it
MEM_BUSY_PCT = 60.0  # memory busy time at or above this share of the busy time (proxy)
CLOCK_AT_MAX_PCT = 90.0  # SM clock at or above this share of its max ...
BUSY_POWER_PCT = 70.0  # ... with power / busy share at or above this share of the limit (proxy)


# PCIe bandwidth per lane and direction (GB/s) by generation, after line encoding (PCI-SIG:
# 8b/10b for Gen 1-2: 0.25 × 2^(gen-1); 128b/130b from Gen 3: 0.985 × 2^(gen-3), i.e. 8 GT/s × 128/130).
def pcie_lane_gbps(gen: float) -> float:
    return 0.25 * 2 ** (gen - 1) if gen < 3 else 8 * 128 / 130 / 8 * 2 ** (gen - 3)


# NVLink data rate per link and direction (GB/s) by NVML's version enum (plugins/nvlink VERSION_NAMES):
# NVLink 1.0 (P100) 20; 2.0-4.0 (V100 6 links, A100 12, H100 18: 300, 600, 900 GB/s both ways) 25;
# 5.0 (B200, 18 links: 1.8 TB/s) 50. A later version has no figure here: no peak, no ratio.
NVLINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 25.0, 7: 50.0}


def nvlink_link_gbps(version: float) -> float | None:
    return NVLINK_GBPS.get(int(version))


# (class, proxy, rule): docs/compare.md prints this table; parts() implements it, in this order.
RULES = (
    ("idle", False, "no `gpu_work` point on the GPU in the bucket and no work's span over it (no work allocated)"),
    ("starved", False, f"work allocated and mean `gpu_util_pct` < {STARVED_UTIL_PCT:g}: the whole bucket"),
    (
        "starved",
        False,
        "work allocated: the bucket's idle share, 1 - mean `gpu_util_pct` / 100; the rules below class the busy "
        "share, each activity as a share of the busy time (its mean / mean `gpu_util_pct`)",
    ),
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
        False,
        "mean `total_tx_bytes_per_sec` + `total_rx_bytes_per_sec` (`gpu_nvlink`, GPM or the NVLink counters: "
        f"measured over the interval) >= {LINK_NEAR_PEAK_PCT:g} % of the links' two-way peak (2 × the largest "
        "`links_active` × GB/s per link of the largest `version`: 20 for NVLink 1.0, 25 for 2.0-4.0, 50 for 5.0)",
    ),
    (
        "interconnect",
        True,
        "mean `tx_bytes_per_s` + `rx_bytes_per_s` (`gpu_pcie`) >= "
        f"{LINK_NEAR_PEAK_PCT:g} % of the link's two-way peak (2 × lanes × GB/s per lane of the largest `link_gen` "
        "and `link_width`: 0.25 × 2^(gen-1) for Gen 1-2, 0.985 × 2^(gen-3) from Gen 3): a ~20 ms sample per reading, "
        "so a proxy",
    ),
    ("memory", False, f"GPM (Hopper and newer): `dram_bw_util_pct` >= {DRAM_BW_PCT:g} % of the busy time"),
    (
        "compute",
        False,
        f"GPM: `tensor_active_pct` >= {TENSOR_PCT:g} % of the busy time, or `sm_active_pct` >= {SM_ACTIVE_PCT:g} % "
        f"with `sm_occupancy_pct` >= {OCCUPANCY_PCT:g} % of it",
    ),
    (
        "starved",
        False,
        f"GPM: `sm_active_pct` and `dram_bw_util_pct` both < {LAUNCH_BOUND_PCT:g} % of the busy time (kernels ran "
        "but kept few SMs and little DRAM busy: launch- or host-bound)",
    ),
    (
        "memory",
        True,
        f"no GPM: `memory_util_pct` (busy time, not bandwidth) >= {MEM_BUSY_PCT:g} % of the busy time",
    ),
    (
        "compute",
        True,
        f"no GPM: mean `sm_clock_mhz` >= {CLOCK_AT_MAX_PCT:g} % of `max_sm_clock_mhz` and mean `power_w` / the busy "
        f"share >= {BUSY_POWER_PCT:g} % of `enforced_power_limit_w` (the SMs drew power at full clock)",
    ),
    ("unclassified", False, "none of the above: no field says what held the busy share"),
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
    sm_active: float | None = None  # sm_active_pct (GPM)
    tensor_active: float | None = None  # tensor_active_pct (GPM)
    occupancy: float | None = None  # sm_occupancy_pct (GPM)
    power_ratio: float | None = None  # mean power_w / largest enforced_power_limit_w
    clock_ratio: float | None = None  # mean sm_clock_mhz / largest max_sm_clock_mhz
    power_reason_pct: float | None = None  # share of samples with sw_power_cap (or hw_power_brake), the larger
    thermal_reason_pct: float | None = None  # share of samples with a thermal slowdown reason, the larger
    pcie_ratio: float | None = None  # mean TX + RX / the link's two-way peak
    nvlink_ratio: float | None = None  # mean total TX + RX over NVLink / the active links' two-way peak


def _of_busy(v: float | None, busy: float | None) -> float | None:
    """An activity's mean over the bucket as a % of the busy time (None without either)."""
    return 100.0 * v / busy if v is not None and busy else None


def busy_class(c: Cell) -> tuple[str, bool]:
    """(class, reached through a proxy) of the busy share of an allocated cell, by RULES 4 on."""
    busy = c.util  # % of the bucket a kernel ran
    if c.thermal_reason_pct is not None and c.thermal_reason_pct >= REASON_SHARE_PCT:
        return "thermal", False
    if (c.power_reason_pct is not None and c.power_reason_pct >= REASON_SHARE_PCT) or (
        c.power_ratio is not None and c.power_ratio >= POWER_AT_CAP_PCT / 100
    ):
        return "power", False
    if c.nvlink_ratio is not None and c.nvlink_ratio >= LINK_NEAR_PEAK_PCT / 100:
        return "interconnect", False
    if c.pcie_ratio is not None and c.pcie_ratio >= LINK_NEAR_PEAK_PCT / 100:
        return "interconnect", True
    dram, sm = _of_busy(c.dram_bw, busy), _of_busy(c.sm_active, busy)
    tensor, occ = _of_busy(c.tensor_active, busy), _of_busy(c.occupancy, busy)
    if dram is not None:  # GPM decides
        if dram >= DRAM_BW_PCT:
            return "memory", False
        if (tensor is not None and tensor >= TENSOR_PCT) or (
            sm is not None and occ is not None and sm >= SM_ACTIVE_PCT and occ >= OCCUPANCY_PCT
        ):
            return "compute", False
        if sm is not None and sm < LAUNCH_BOUND_PCT and dram < LAUNCH_BOUND_PCT:
            return "starved", False
        return "unclassified", False
    mem = _of_busy(c.mem_busy, busy)
    if mem is not None and mem >= MEM_BUSY_PCT:
        return "memory", True
    if (
        c.clock_ratio is not None
        and c.clock_ratio >= CLOCK_AT_MAX_PCT / 100
        and c.power_ratio is not None
        and busy
        and c.power_ratio / (busy / 100) >= BUSY_POWER_PCT / 100
    ):
        return "compute", True
    return "unclassified", False


def parts(c: Cell) -> list[tuple[str, bool, float]]:
    """[(class, by a proxy, share of the cell)] for one cell, the shares adding up to 1."""
    if not c.allocated:
        return [("idle", False, 1.0)]
    if c.util is not None and c.util < STARVED_UTIL_PCT:
        return [("starved", False, 1.0)]
    busy = min(1.0, c.util / 100.0) if c.util is not None else 1.0  # no busy share read: none split off
    cls, proxy = busy_class(c)
    out = [(cls, proxy, busy)]
    if busy < 1.0:
        out.append(("starved", False, 1.0 - busy))
    return out


def classify(c: Cell) -> tuple[str, bool]:
    """(class, by a proxy) of the larger part of one cell (parts() gives the split)."""
    cls, proxy, _ = max(parts(c), key=lambda p: p[2])
    return cls, proxy


def shares(cells: list[tuple[Cell, float]]) -> tuple[dict[str, float], dict[str, bool]]:
    """[(cell, GPU-hours)] -> (class -> % of the GPU-hours, adding up to 100; class -> reached by a proxy)."""
    hours = dict.fromkeys(CLASSES, 0.0)
    proxy = dict.fromkeys(CLASSES, False)
    for cell, weight in cells:
        for cls, by_proxy, share in parts(cell):
            hours[cls] += weight * share
            proxy[cls] = proxy[cls] or (by_proxy and weight * share > 0)
    total = sum(hours.values())
    if total <= 0:
        return dict.fromkeys(CLASSES, 0.0), proxy
    return {k: 100.0 * v / total for k, v in hours.items()}, proxy


def rule_table() -> str:
    """RULES as the Markdown table docs/compare.md holds (a test keeps the two the same)."""
    lines = ["| order | class | proxy | rule |", "| --- | --- | --- | --- |"]
    lines += [f"| {i} | `{c}` | {'yes' if p else 'no'} | {r} |" for i, (c, p, r) in enumerate(RULES, 1)]
    return "\n".join(lines)
