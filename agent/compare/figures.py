"""The compare figures, each declared once: its JSON key, unit, definition, the aggregates it needs and
how it is derived from them.

Four backends compute the GPU report (`--by model|host|gpu`): InfluxQL over raw points
(report.Report), InfluxQL over rollups (rollup_report.RollupReport), PromQL over raw samples
(promql_report.PromReport) and PromQL over recording rules (promql_rollups.PromRollupReport). They
differ in how they compute an aggregate (InfluxQL MEAN; SUM/COUNT of rollup fields; `sum_over_time /
count_over_time`; the same over the recorded buckets), never in what a figure is. So:

- An `Aggregate` names one number per group the database computes: an operation (`mean`, `max`,
  `count`, `p95`) over a field of a measurement's points, optionally only where `dram_bw_source` is
  GPM. Each backend answers ONE protocol, `group_aggregates(aggregates) -> {group key: {aggregate:
  value}}` (`Backend`; a group without points is absent, a value without samples None); the energy sums behind
  the energy figures (`ENERGY_SUMS`: the group's joules and observed seconds, and those of the GPUs
  that report utilisation) are the per-GPU ones each backend adds up over the group.
- A `Figure` is a JSON key of a group with its unit, its definition (the text every document carries
  under `definitions`; `promql` where PromQL must compute it otherwise), the row of the figure table of
  docs/compare.md, the aggregates it `needs` and `derive`, which makes its value of theirs. `derive`
  turns the backends' answers into figures (`derive(figures, answers, groups)`), the same code for all
  four.
- Figures whose value is a tally or a table (throttle shares, P2P, MIG, vGPU, the L2 probe, health,
  work, limits) are declared here too (key, definition, docs, CSV columns); the backends count what
  they need per GPU or group and the registry makes the figure of it (`throttle_shares`,
  `tally_mig`, `tally_vgpu`, `l2_probe_value`), naming its key through the constants below.
- The work figures (per group, `work` -> unit ->: `WORK_FIGURES`, `unit_figures`) and what limits
  the work (`GROUP_WORK_FIGURES`, `DOCUMENT_WORK_FIGURES`) join them: build_work computes them over
  its three sources (InfluxWork, PromWork, RollupWork) alike.
- The renderers read the registry: the terminal/HTML table's columns (`COLUMNS`), the CSV columns
  (`csv_columns`), the figure table of docs/compare.md (`figure_table`, kept equal by a test), the
  definitions (`DEFINITIONS`, `PROMQL_DEFINITIONS`, `WORK_DEFINITIONS`).

Nothing here imports a backend: the backends import the registry.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpuagent.compare import health
from gpuagent.compare.core import REASONS
from gpuagent.compare.health import DEFINITION as HEALTH_DEFINITION
from gpuagent.compare.health import VERDICTS
from gpuagent.schema.measurements import GPU_CLOCKS, GPU_MEMORY, GPU_POWER

# The keys of the figures the backends fill themselves (tallies and tables), and of the power series.
THROTTLE = "throttle_share_pct"
P2P, P2P_SUMMARY = "p2p", "p2p_summary"  # core.add_p2p writes them
MIG, VGPU = "mig", "vgpu"
L2_PROBE = "l2_probe"
HEALTH = health.KEY
POWER_MEAN, POWER_P95 = "power_mean_w", "power_p95_w"  # the renderers' charts and a rollup's source name them
SERIES = "series"  # the document's power series ...
SERIES_POWER = POWER_MEAN  # ... its lines: the mean power per group label

GPM = "gpm"  # Aggregate.only: the points where dram_bw_source = 'gpm' (DRAM bandwidth as GPM measured it)


@dataclass(frozen=True)
class Aggregate:
    """One number per group: `op` (mean, max, count, p95) of a field of a measurement's points in the range."""

    op: str
    measurement: str
    field: str
    only: str = ""  # "" every point; GPM: where dram_bw_source = 'gpm'


def mean(measurement: str, name: str, only: str = "") -> Aggregate:
    return Aggregate("mean", measurement, name, only)


def largest(measurement: str, name: str) -> Aggregate:
    return Aggregate("max", measurement, name)


def count(measurement: str, name: str) -> Aggregate:
    return Aggregate("count", measurement, name)


def p95(measurement: str, name: str) -> Aggregate:
    return Aggregate("p95", measurement, name)


# The per-GPU sums behind the energy figures, added up over the group's GPUs by each backend.
ENERGY_J, OBSERVED_S, BUSY_ENERGY_J, BUSY_S = "energy_j", "observed_s", "busy_energy_j", "busy_s"
ENERGY_SUMS = (ENERGY_J, OBSERVED_S, BUSY_ENERGY_J, BUSY_S)
# Keys more than one document holds: the energy section and work figures (GPU_HOURS), the work
# figures and the --by job document (both).
GPU_HOURS, ENERGY_WH = "gpu_hours", "energy_wh"

SAME_ROW = "^"  # Figure.docs: the figure shares the row of the one before it in the docs table


def _itself(value):
    return value


@dataclass(frozen=True)
class Figure:
    key: str  # the JSON key of a group
    unit: str
    definition: str = ""  # under `definitions` of every document ("" for none)
    promql: str = ""  # the definition where PromQL computes it otherwise
    docs: str = ""  # the docs table's definition ("" not in the table, SAME_ROW with the one before)
    influxql: str = ""  # the docs table's InfluxQL column
    needs: tuple[Any, ...] = ()  # Aggregates (or ENERGY_SUMS names) that derive reads, in order
    derive: Callable[..., Any] | None = None  # their values -> the figure's value; None: filled by its section
    csv: bool = True  # a CSV column of its own (structured figures: csv_columns flattens them)


def _ratio_pct(value: float | None, whole: float | None) -> float | None:
    return 100.0 * value / whole if value is not None and whole else None


def _per_hour(joules: float, seconds: float) -> float | None:
    """Wh per hour (the mean draw in W) from joules over seconds."""
    return (joules / 3600.0) / (seconds / 3600.0) if seconds > 0 else None


def _samples(n) -> int:
    return int(n or 0)


POWER_W = (GPU_POWER, "power_w")

FIGURES: tuple[Figure, ...] = (
    Figure("label", "", csv=True),
    Figure(
        "gpus",
        "GPUs",
        docs="GPUs (distinct `host`+`uuid`) with `gpu_power`, `gpu_memory` or `gpu_clocks` points in the range; "
        "their hosts and models",
        influxql="`COUNT` per GPU",
    ),
    Figure("hosts", "", docs=SAME_ROW),
    Figure("models", "", docs=SAME_ROW),
    Figure(
        "power_samples",
        "samples",
        needs=(count(*POWER_W),),
        derive=_samples,
        csv=False,
    ),
    Figure(
        POWER_MEAN,
        "W",
        "mean of the group's power_w samples (gpu_power)",
        docs="mean of the group's `power_w` samples",
        influxql="`MEAN(power_w)`",
        needs=(mean(*POWER_W),),
        derive=_itself,
    ),
    Figure(
        POWER_P95,
        "W",
        "95th percentile of the group's power_w samples, nearest rank (InfluxQL PERCENTILE)",
        promql="the highest of the group's per-GPU 95th percentiles of power_w (quantile_over_time, "
        "interpolated): an upper bound of the 95th percentile over all the group's samples, which PromQL "
        "cannot compute across series",
        docs="95th percentile of the same samples, nearest rank: sorted values, index ⌊n·0.95 + 0.5⌋ − 1",
        influxql="`PERCENTILE(power_w, 95)`",
        needs=(p95(*POWER_W),),
        derive=_itself,
    ),
    Figure(
        "energy_kwh",
        "kWh",
        "energy the group's GPUs used in the range: per GPU, the sum of the non-negative increases of the "
        "energy_j counter between consecutive samples (a counter reset costs one interval)",
        promql="energy the group's GPUs used in the range: per GPU, last - first energy_j sample "
        "(max_over_time - min_over_time); for a GPU whose counter reset in the range, PromQL increase()",
        docs="energy used in the range: per GPU, the sum of the non-negative increases of the `energy_j` counter "
        "between consecutive samples (a driver reload costs one interval, never a negative energy), summed over "
        "the group",
        influxql="`SUM` over a subquery of `NON_NEGATIVE_DIFFERENCE(energy_j)`",
        needs=(ENERGY_J,),
        derive=lambda joules: joules / 3.6e6,
    ),
    Figure(
        GPU_HOURS,
        "h",
        "per GPU, the time from its first to its last energy_j sample in the range, summed",
        promql="per GPU, the time from its first to its last energy_j sample in the range, summed "
        "(VictoriaMetrics tfirst/tlast_over_time; Prometheus: timestamps read through a subquery at "
        "range/1000 resolution)",
        docs="per GPU, time from its first to its last `energy_j` sample in the range, summed",
        influxql="`FIRST`, `LAST` timestamps",
        needs=(OBSERVED_S,),
        derive=lambda seconds: seconds / 3600.0,
    ),
    Figure(
        "energy_wh_per_gpu_hour",
        "Wh/h",
        "energy per hour: energy (Wh) / GPU-hours, i.e. the mean draw of one GPU",
        docs="**energy per hour**: energy (Wh) / GPU-hours, the mean draw of one GPU measured by the counter",
        needs=(ENERGY_J, OBSERVED_S),
        derive=_per_hour,
    ),
    Figure(
        "busy_gpu_hours",
        "h",
        docs="per GPU, observed time × its mean `gpu_util_pct` / 100, summed",
        influxql="`MEAN(gpu_util_pct)` per GPU",
        needs=(BUSY_S,),
        derive=lambda seconds: seconds / 3600.0,
    ),
    Figure(
        "energy_wh_per_busy_gpu_hour",
        "Wh/h",
        "efficiency: energy (Wh) divided by busy GPU-hours, where a GPU's busy "
        "time is its observed time × its mean gpu_util_pct / 100 (GPUs that report no utilisation, e.g. "
        "with MIG on, are left out of both); idle draw is charged to the busy time, so lower is better",
        docs="**efficiency**: energy (Wh) / busy GPU-hours. GPUs that report no utilisation (whole-GPU utilisation "
        "is refused with MIG on) are left out of both sums. Idle draw is charged to the busy time, so a card that "
        "idles a lot scores worse; lower is better",
        needs=(BUSY_ENERGY_J, BUSY_S),
        derive=_per_hour,
    ),
    Figure(
        "sm_clock_mean_mhz",
        "MHz",
        docs="mean `sm_clock_mhz`, mean `max_sm_clock_mhz`, and their ratio × 100",
        influxql="`MEAN`",
        needs=(mean(GPU_CLOCKS, "sm_clock_mhz"),),
        derive=_itself,
    ),
    Figure(
        "sm_clock_max_mhz",
        "MHz",
        docs=SAME_ROW,
        needs=(mean(GPU_CLOCKS, "max_sm_clock_mhz"),),
        derive=_itself,
    ),
    Figure(
        "sm_clock_pct_of_max",
        "%",
        "mean sm_clock_mhz / mean max_sm_clock_mhz × 100 (gpu_clocks)",
        docs=SAME_ROW,
        needs=(mean(GPU_CLOCKS, "sm_clock_mhz"), mean(GPU_CLOCKS, "max_sm_clock_mhz")),
        derive=_ratio_pct,
    ),
    Figure(
        THROTTLE,
        "%",
        "per clock-event reason: samples with the reason set / samples that report the reason × 100",
        docs="per clock-event reason the group reports: samples with the boolean true / samples that carry it × 100 "
        "(`idle` included; the chart shows the throttling ones: `sw_power_cap`, `hw_slowdown`, thermal, power "
        "brake, sync boost)",
        influxql="`COUNT(r)` and `COUNT(r) WHERE r = true`",
        csv=False,
    ),
    Figure(
        "gpu_util_mean_pct",
        "%",
        "mean gpu_util_pct (gpu_memory)",
        docs="mean `gpu_util_pct`",
        influxql="`MEAN`",
        needs=(mean(GPU_MEMORY, "gpu_util_pct"),),
        derive=_itself,
    ),
    Figure(
        "dram_bw_util_mean_pct",
        "%",
        "mean dram_bw_util_pct: GPM DRAM bandwidth (Hopper and newer) only; "
        "none for cards without GPM (their memory busy time, memory_util_pct, is not bandwidth)",
        docs="mean `dram_bw_util_pct` where `dram_bw_source` is `gpm`: GPM DRAM bandwidth (Hopper and newer) only; "
        "empty for Ada and Ampere, whose `memory_util_pct` is busy time, not bandwidth (see plugins/memory)",
        influxql="`MEAN`",
        needs=(mean(GPU_MEMORY, "dram_bw_util_pct", GPM),),
        derive=_itself,
    ),
    Figure(
        "dram_bw_mean_gbps",
        "GB/s",
        "mean dram_bw_gbps; dram_peak_gbps is the largest peak reported in the group",
        docs="mean `dram_bw_gbps`; the largest `dram_peak_gbps` beside it",
        influxql="`MEAN`, `MAX`",
        needs=(mean(GPU_MEMORY, "dram_bw_gbps", GPM),),
        derive=_itself,
    ),
    Figure("dram_peak_gbps", "GB/s", docs=SAME_ROW, needs=(largest(GPU_MEMORY, "dram_peak_gbps"),), derive=_itself),
    Figure(
        "fb_used_mean_bytes",
        "bytes",
        "mean fb_used_bytes per GPU sample; fb_total_bytes is the largest total",
        docs="mean and largest `fb_used_bytes` per GPU sample; largest `fb_total_bytes`",
        influxql="`MEAN`, `MAX`",
        needs=(mean(GPU_MEMORY, "fb_used_bytes"),),
        derive=_itself,
    ),
    Figure("fb_used_max_bytes", "bytes", docs=SAME_ROW, needs=(largest(GPU_MEMORY, "fb_used_bytes"),), derive=_itself),
    Figure("fb_total_bytes", "bytes", docs=SAME_ROW, needs=(largest(GPU_MEMORY, "fb_total_bytes"),), derive=_itself),
    Figure(
        "l2_cache_bytes",
        "bytes",
        "largest l2_cache_bytes in the group",
        docs="largest `l2_cache_bytes`",
        influxql="`MAX`",
        needs=(largest(GPU_MEMORY, "l2_cache_bytes"),),
        derive=_itself,
    ),
    Figure(
        P2P,
        "GPUs",
        "per GPU, its best P2P link to any peer seen in the range (gpu_p2p): nvlink (nvlink_ok), "
        "pcie (read_ok over PCIe), none (no peer reachable, or no gpu_p2p point)",
        docs="per GPU, its best P2P link to any peer among `gpu_p2p` points in the range: `nvlink` when some pair "
        "has `nvlink_ok`, else `pcie` when some pair has `read_ok`, else `none` (also when the GPU has no `gpu_p2p` "
        "point: a single-GPU host, a MIG GPU, or a range shorter than the p2p collector's 300 s interval). The "
        "summary is the one class, or `NVLink 2, none 2`",
        influxql="`COUNT … WHERE nvlink_ok = true` / `read_ok = true` per GPU",
        csv=False,
    ),
    Figure(P2P_SUMMARY, "", docs=SAME_ROW),
    Figure(
        MIG,
        "GPUs",
        "capable: GPUs with gpu_mig points; enabled: GPUs with mig_mode_current true at some point; "
        "devices: sum over GPUs of their largest mig_devices",
        docs="`capable_gpus`: GPUs with per-GPU `gpu_mig` points; `enabled_gpus`: GPUs with `mig_mode_current` true "
        "at some point; `devices`: sum over GPUs of their largest `mig_devices`; `profiles`: `mig_profile` tags seen",
        influxql="`MAX`, `COUNT … WHERE`, `GROUP BY mig_profile`",
        csv=False,
    ),
    Figure(
        VGPU,
        "GPUs",
        "modes: GPUs by their last virtualization_mode; instances: sum over GPUs of their largest active_instances",
        promql="modes: GPUs by virtualization_mode (the _info series of /metrics; line protocol in "
        "VictoriaMetrics keeps no strings, so none there); instances: sum over GPUs of their largest "
        "active_instances",
        docs="`modes`: GPUs counted by their last `virtualization_mode`; `instances`: sum over GPUs of their largest "
        "`active_instances`; `types`: `vgpu_type` tags seen",
        influxql="`LAST`, `MAX`, `GROUP BY vgpu_type`",
        csv=False,
    ),
    Figure(
        L2_PROBE,
        "",
        "means over gpu_l2_probe summary points in the range (gpuagent probe l2 --send): "
        "l2_effective_bytes, l2_bw_gbps, dram_bw_gbps, l2_dram_ratio",
        docs="when `gpu_l2_probe` summary points exist in the range (`gpuagent probe l2 --send`, docs/probe.md): "
        "`runs` (summaries with a knee), means of `l2_effective_bytes`, `l2_bw_gbps`, `dram_bw_gbps` and "
        "`l2_dram_ratio`; `null` otherwise",
        influxql="`MEAN`, `COUNT`",
        csv=False,
    ),
    Figure(
        SERIES,
        "W",
        "mean power_w per group in each time bucket (GROUP BY time, aligned to the epoch)",
        promql="mean power_w per group in each time bucket (query_range, step = bucket, each point "
        "covering the bucket before it, aligned to the epoch)",
        csv=False,
    ),
    Figure(
        HEALTH,
        "h",
        HEALTH_DEFINITION,
        promql=HEALTH_DEFINITION + "; from the verdict _info series (count_over_time per bucket; "
        "/metrics names only: line protocol in VictoriaMetrics keeps no string fields, so there it is {})",
        docs="GPU-hours per health verdict (`ok`, `degraded`, `reset_required`, `reboot_required`, `drain`, `lost`; "
        "every verdict listed, 0 when none): per GPU, the range in whole-minute buckets aligned to the epoch (at "
        "most about 1000); each bucket counts its time inside the range (the first and last buckets only their "
        "part of it), shared among the `verdict`s the GPU reported in it by their count of samples "
        "(plugins/health); summed over the group's GPUs, so never more than GPUs × the range, wherever the "
        "range's edges fall. Table row `health GPU-h` lists the verdicts with time",
        influxql='`DISTINCT("verdict")`, then `COUNT("verdict") … GROUP BY time(B)` per verdict',
        csv=False,
    ),
)
# The docs table's last row: the document's power series, not a group's figure.
SERIES_ROW = (
    "`series.power_mean_w`",
    "per group, mean `power_w` in each time bucket (`bucket_s`: 10 s … 1 d, about 100 buckets over the range; "
    "buckets aligned to the epoch); `[time_ns, W]` pairs",
    "`MEAN … GROUP BY time(B)`",
)
BY_KEY = {f.key: f for f in FIGURES}


def _definitions(promql: bool) -> dict[str, str]:
    return {f.key: (f.promql if promql and f.promql else f.definition) for f in FIGURES if f.definition}


DEFINITIONS = _definitions(promql=False)
PROMQL_DEFINITIONS = _definitions(promql=True)


def section(*keys: str) -> tuple[Figure, ...]:
    """The derived figures of one section of a report, in the document's order."""
    return tuple(BY_KEY[k] for k in keys)


POWER = section("power_samples", "power_mean_w", "power_p95_w")
ENERGY = section("energy_kwh", GPU_HOURS, "energy_wh_per_gpu_hour", "busy_gpu_hours", "energy_wh_per_busy_gpu_hour")
CLOCKS = section("sm_clock_mean_mhz", "sm_clock_max_mhz", "sm_clock_pct_of_max")
MEMORY = section(
    "gpu_util_mean_pct",
    "dram_bw_util_mean_pct",
    "dram_bw_mean_gbps",
    "dram_peak_gbps",
    "fb_used_mean_bytes",
    "fb_used_max_bytes",
    "fb_total_bytes",
    "l2_cache_bytes",
)
PLAIN = (*POWER, *CLOCKS, *MEMORY)  # the figures derived from Aggregates alone
# The PromQL documents' order of them (the corpus compares the text): those one aggregate gives first.
PROMQL_ORDER = tuple(sorted(PLAIN, key=lambda f: f.derive is not _itself))


def power_series(bucket_s: int, lines: Mapping[str, list]) -> dict[str, Any]:
    """The document's `series`: per group label its [time_ns, W] pairs in time order."""
    return {"bucket_s": bucket_s, SERIES_POWER: {k: sorted(v) for k, v in sorted(lines.items())}}


class Backend(Protocol):
    """What each report backend answers (Report, RollupReport, PromReport, PromRollupReport): per group
    key, each wanted aggregate's value (a group without points absent, a value without samples None)."""

    def group_aggregates(self, wanted: tuple[Aggregate, ...]) -> dict[tuple, dict[Aggregate, Any]]: ...


def aggregates(figures: Iterable[Figure]) -> tuple[Aggregate, ...]:
    """The Aggregates the figures need, each once, in order."""
    return tuple(dict.fromkeys(a for f in figures for a in f.needs if isinstance(a, Aggregate)))


def derive(figures: Iterable[Figure], answers: Mapping[tuple, Mapping[Any, Any]], groups: dict[tuple, dict]) -> None:
    """Each group's figures from the backend's answers for it ({aggregate or energy sum: value}); a group
    the backend did not answer for has None (an energy sum: 0, nothing measured)."""
    figures = tuple(figures)
    for gkey, g in groups.items():
        got = answers.get(gkey, {})
        for f in figures:
            assert f.derive is not None, f.key
            values = [got.get(a, 0.0 if a in ENERGY_SUMS else None) for a in f.needs]
            g[f.key] = f.derive(*values)


# -- the tallied figures: the backends count, these make the figure (one shape for all four) -------------
def throttle_shares(
    groups: dict[tuple, dict],
    totals: Mapping[tuple, Mapping[str, Any]],
    hits: Callable[[str], Mapping[tuple, Any]],
) -> None:
    """THROTTLE per group: per clock-event reason, samples with it set / samples that carry it × 100, of
    the samples per group and reason (`totals`) and those with it set (`hits(reason)`, asked only for
    the reasons some group carries)."""
    shares: dict[tuple, dict[str, float]] = defaultdict(dict)
    for reason in REASONS:
        if not any(t.get(reason) for t in totals.values()):
            continue
        found = hits(reason)
        for gkey, total in totals.items():
            n = total.get(reason) or 0
            if n:
                shares[gkey][reason] = 100.0 * (found.get(gkey) or 0) / n
    for gkey, g in groups.items():
        g[THROTTLE] = dict(shares.get(gkey, {}))


def mig_value(capable: int, enabled: int, devices: int, profiles: Iterable[str]) -> dict[str, Any]:
    return {"capable_gpus": capable, "enabled_gpus": enabled, "devices": devices, "profiles": sorted(profiles)}


def vgpu_value(modes: Mapping[str, int], instances: int, types: Iterable[str]) -> dict[str, Any]:
    return {"modes": dict(sorted(modes.items())), "instances": instances, "types": sorted(types)}


def tally_mig(groups, gpus, group_of, devices: Mapping[tuple, int], enabled, profiles: Mapping[tuple, set]) -> None:
    """MIG per group of per-GPU facts: the MIG-capable GPUs and their largest device count, the GPUs
    with MIG on at some point, and the profiles seen per group."""
    for gkey, g in groups.items():
        g[MIG] = mig_value(0, 0, 0, profiles.get(gkey, ()))
    for key in gpus:
        m = groups[group_of(key)][MIG]
        if key in devices:
            m["capable_gpus"] += 1
            m["devices"] += devices[key]
        if key in enabled:
            m["enabled_gpus"] += 1


def tally_vgpu(groups, gpus, group_of, modes: Mapping[tuple, str], instances: Mapping[tuple, int], types) -> None:
    """VGPU per group of per-GPU facts: each GPU's last virtualization mode and largest instance count,
    and the vGPU types seen per group."""
    counted: dict[tuple, dict[str, int]] = {gkey: {} for gkey in groups}
    total: dict[tuple, int] = dict.fromkeys(groups, 0)
    for key in gpus:
        gkey = group_of(key)
        if key in modes:
            counted[gkey][modes[key]] = counted[gkey].get(modes[key], 0) + 1
        if key in instances:
            total[gkey] += instances[key]
    for gkey, g in groups.items():
        g[VGPU] = vgpu_value(counted[gkey], total[gkey], types.get(gkey, ()))


L2_PROBE_MEANS = ("l2_effective_bytes", "l2_bw_gbps", "dram_bw_gbps", "l2_dram_ratio")


def l2_probe_value(runs, means: Mapping[str, Any]) -> dict[str, Any] | None:
    """L2_PROBE of a group: its probe runs and the means of their summaries; None without runs."""
    return {"runs": runs, **{f: means.get(f) for f in L2_PROBE_MEANS}} if runs else None


# -- the work figures (per group, `work` -> unit ->) and what limits the work ---------------------------
@dataclass(frozen=True)
class WorkFigure:
    key: str
    unit: str
    definition: str = ""  # under definitions as work.<key> ("" for none)


# The keys the work renderers, cross_model and placement read (GPU_HOURS and ENERGY_WH are also the
# --by job document's: gpuagent.compare.jobs).
UNITS, WORK_GPU_HOURS, UNITS_PER_GPU_HOUR = "units", GPU_HOURS, "units_per_gpu_hour"
WH_PER_UNIT, COST_PER_MILLION = "wh_per_unit", "cost_per_million_units"

WORK_FIGURES = (
    WorkFigure(
        UNITS,
        "units",
        "per work series (a piece of work on one GPU), the increase of units_total from its first "
        "to its last sample in the range (a decrease is a restart: that interval adds the new value), / gpus; summed",
    ),
    WorkFigure(
        WORK_GPU_HOURS,
        "h",
        "per work series, its last - first sample time less its absences (runs of the limits' buckets "
        "without a sample, 3 or more of its mean sampling intervals long) × its gpu_share (a MIG slice's share of "
        "the GPU; absent: 1), shared with the other work on its GPU at the same time (by the pieces' mean "
        "sm_util_pct where each has one, evenly otherwise); summed (a piece of work on N GPUs counts N)",
    ),
    WorkFigure(ENERGY_WH, "Wh"),
    WorkFigure(UNITS_PER_GPU_HOUR, "units/h", "units / gpu_hours"),
    WorkFigure(
        WH_PER_UNIT,
        "Wh",
        "energy / units, the energy per work series being the GPU's energy_j increase "
        "(non-negative steps) between the series' first and last sample (less its absences) × its gpu_share and "
        "its part of a shared GPU: exactly its GPUs (or MIG slices' shares of them) over exactly its time; null "
        "where a GPU has no energy_j",
    ),
    WorkFigure("cost", "$"),
    WorkFigure(
        COST_PER_MILLION,
        "$",
        "1e6 × cost / units; cost per work series = gpu_hours × [compare.prices] "
        "gpu_hour of its model (else default) + energy kWh × pue × kwh; null without prices, for a model without "
        "a GPU-hour price (unpriced) and where kwh is priced but a GPU has no energy_j",
    ),
    WorkFigure("spread", "units/h", "units_per_gpu_hour of each GPU of the group: min, max and the number of GPUs"),
)
WORK_BY_KEY = {f.key: f for f in WORK_FIGURES}
# The group's figures beside `work` (what limits the work: gpuagent.compare.limits), and the document's.
WORK, LIMITS, LIMITS_PROXY, LIMITS_GPU_HOURS = "work", "limits", "limits_proxy", "limits_gpu_hours"
GROUP_WORK_FIGURES = (
    Figure(WORK, "", csv=False),  # per unit: WORK_FIGURES
    Figure(
        LIMITS,
        "%",
        "share of the group's GPU-hours in each class, bucket by bucket per GPU (docs/compare.md, "
        "'What limits the work'); limits_proxy: the class was reached through a proxy field in some bucket",
        csv=False,
    ),
    Figure(LIMITS_PROXY, "", csv=False),
    Figure(LIMITS_GPU_HOURS, "h", csv=False),
)
UNPRICED, PLACEMENT, CROSS_MODEL = "unpriced", "placement", "cross_model"
DOCUMENT_WORK_FIGURES = (
    Figure(
        UNPRICED,
        "",
        "the work's models without a GPU-hour price in [compare.prices] (no default): their cost, "
        "cost_per_million_units and units_per_dollar are null, never priced at energy only",
    ),
    Figure(
        PLACEMENT,
        "$",
        "per workload and unit seen on two or more priced models: the cheapest model per unit at the "
        "measured rates; saving = sum of the models' cost of their units - all the units × the cheapest's cost per "
        "unit (saving_pct: over the first), with each model's units and GPU-hours and caveats",
    ),
    Figure(
        CROSS_MODEL,
        "",
        "per workload and unit seen on two or more models, per model: units/s per GPU (units / "
        "GPU-seconds), units/s per kW drawn (units / kJ, the same thing) and units per $ (units / cost), each with "
        "its _best_pct (the figure / the best model's × 100), the GPU-hours behind it and its spread across GPUs",
    ),
)
WORK_DEFINITIONS = {
    **{f"work.{f.key}": f.definition for f in WORK_FIGURES if f.definition},
    **{f.key: f.definition for f in (*GROUP_WORK_FIGURES, *DOCUMENT_WORK_FIGURES) if f.definition},
}


def unit_figures(
    units: float,
    seconds: float,
    joules: float | None,
    cost: float | None,
    rates: list[float],
) -> dict[str, Any]:
    """One unit's work figures (WORK_FIGURES, in order) of its sums: units, GPU-seconds, joules (None where
    a GPU has no energy counter), cost (None unpriced) and each GPU's units per GPU-hour."""
    hours = seconds / 3600
    wh = joules / 3600 if joules is not None else None
    values = {
        UNITS: units,
        WORK_GPU_HOURS: hours,
        ENERGY_WH: wh,
        UNITS_PER_GPU_HOUR: units / hours if hours > 0 else None,
        WH_PER_UNIT: wh / units if wh is not None and units > 0 else None,
        "cost": cost,
        COST_PER_MILLION: 1e6 * cost / units if cost is not None and units > 0 else None,
        "spread": {"gpus": len(rates), "min": min(rates), "max": max(rates)} if rates else None,
    }
    return {f.key: values[f.key] for f in WORK_FIGURES}


# -- the renderers' view -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Column:
    """A column of the terminal and HTML tables: one figure, or two shown as `a / b`; `text` names the
    renderer's formatter of a structured figure (gpuagent.compare.render.TEXT) instead of a number."""

    title: str
    keys: tuple[str, ...]
    digits: tuple[int, ...] = (1,)
    scale: tuple[float, ...] = (1.0,)
    text: str = ""


GIB = 2**30
MIB = 2**20

COLUMNS = (
    Column("group", ("label",), text="label"),
    Column("GPUs", ("gpus",), text="count"),
    Column("hosts", ("hosts",), text="length"),
    Column("power mean W", ("power_mean_w",)),
    Column("power p95 W", ("power_p95_w",)),
    Column("Wh / GPU-h", ("energy_wh_per_gpu_hour",)),
    Column("energy kWh", ("energy_kwh",), digits=(3,)),
    Column("Wh / busy GPU-h", ("energy_wh_per_busy_gpu_hour",)),
    Column("SM clock MHz", ("sm_clock_mean_mhz", "sm_clock_max_mhz"), digits=(0, 0), scale=(1.0, 1.0)),
    Column("SM % of max", ("sm_clock_pct_of_max",)),
    Column("throttled", (THROTTLE,), text="throttle"),
    Column("GPU util %", ("gpu_util_mean_pct",)),
    Column("DRAM util %", ("dram_bw_util_mean_pct",)),
    Column("DRAM GB/s", ("dram_bw_mean_gbps", "dram_peak_gbps"), digits=(0, 0), scale=(1.0, 1.0)),
    Column("mem used GiB", ("fb_used_mean_bytes", "fb_total_bytes"), digits=(1, 0), scale=(GIB, GIB)),
    Column("L2 MiB", ("l2_cache_bytes",), digits=(0,), scale=(MIB,)),
    Column("P2P", (P2P_SUMMARY,), text="label"),
    Column("MIG", (MIG,), text="mig_tally"),
    Column("vGPU", (VGPU,), text="vgpu_tally"),
    Column("L2 probe", (L2_PROBE,), text="l2_probe"),
    Column("health GPU-h", (HEALTH,), text="health"),
)
ENERGY_COLUMN = "energy kWh"  # the terminal shows it in Wh below 1 kWh


def csv_columns(groups: list[dict]) -> list[tuple[str, Callable[[dict], Any]]]:
    """(header, value of a group) for each CSV column: the figures with a column of their own, then the
    structured ones flattened (throttle_<reason>_pct of the reasons the groups report, p2p_*, mig_*, ...)."""

    def plain(key: str) -> Callable[[dict], Any]:
        return lambda g: ";".join(g[key]) if isinstance(g[key], list) else g[key]

    def nested(key: str, *path: str, default: Any = None) -> Callable[[dict], Any]:
        def get(g: dict) -> Any:
            value: Any = g.get(key) or {}
            for p in path[:-1]:
                value = value.get(p) or {}
            return value.get(path[-1], default)

        return get

    reasons = sorted({r for g in groups for r in g["throttle_share_pct"]})
    return [
        *((f.key, plain(f.key)) for f in FIGURES if f.csv),
        *((f"throttle_{r}_pct", nested("throttle_share_pct", r)) for r in reasons),
        *((f"p2p_{k}_gpus", nested("p2p", k)) for k in ("nvlink", "pcie", "none")),
        ("mig_capable_gpus", nested("mig", "capable_gpus")),
        ("mig_enabled_gpus", nested("mig", "enabled_gpus")),
        ("mig_devices", nested("mig", "devices")),
        ("vgpu_host_gpus", nested("vgpu", "modes", "host_vgpu", default=0)),
        ("vgpu_instances", nested("vgpu", "instances")),
        ("l2_probe_runs", nested("l2_probe", "runs")),
        ("l2_effective_bytes", nested("l2_probe", "l2_effective_bytes")),
        ("l2_probe_l2_bw_gbps", nested("l2_probe", "l2_bw_gbps")),
        ("l2_probe_dram_bw_gbps", nested("l2_probe", "dram_bw_gbps")),
        ("l2_dram_ratio", nested("l2_probe", "l2_dram_ratio")),
        *((f"health_{v}_gpu_hours", nested("health_gpu_hours", v)) for v in VERDICTS),
    ]


def figure_table() -> str:
    """The figure table of docs/compare.md, made of FIGURES (a test keeps the two the same)."""
    rows: list[list[Any]] = []
    for f in FIGURES:
        if f.docs == SAME_ROW:
            rows[-1][0].append(f.key)
        elif f.docs:
            rows.append([[f.key], f.docs, f.influxql])
    lines = ["| JSON key | definition | InfluxQL |", "| --- | --- | --- |"]
    for keys, docs, influxql in rows:
        label = ", ".join(f"`{k}`" for k in keys)
        if keys[0] == "p2p":  # its classes beside it
            label = "`p2p` (`nvlink`, `pcie`, `none`), `p2p_summary`"
        lines.append(f"| {label} | {docs} | {influxql} |".replace("|  |", "| |"))
    lines.append(f"| {' | '.join(SERIES_ROW)} |")
    return "\n".join(lines)
