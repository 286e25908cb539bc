#!/usr/bin/env python3
"""Write the Grafana dashboards in config/grafana/ from one description, so the InfluxQL and
PromQL variants keep the same panels in the same places.

    python config/grafana/generate.py          # rewrite the JSON files
    python config/grafana/generate.py --check  # exit 1 when a committed file differs

Each panel names its query in both languages. Template variables appear only as
`=~ /^$name$/` (InfluxQL) and `=~"$name"` (PromQL), so tests/grafana/ can substitute
them and run every query against real servers. Field names are the InfluxDB names of
the plugin READMEs; PromQL names are those the prometheus sink exposes for them
(plugins/prometheus/README.md). A panel whose data needs a feature still being built
is not described here at all (docs/grafana.md lists them).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 38  # Grafana 10.0; later 10.x and 11.x migrate it forward on load (never backward)
LANGS = ("influxql", "promql")
DS_TYPE = {"influxql": "influxdb", "promql": "prometheus"}
GPU_LEGEND = {"influxql": "$tag_host gpu $tag_gpu", "promql": "{{host}} gpu {{gpu}}"}


# -- query helpers ---------------------------------------------------------------------------


def iwhere(*extra: str, tags: tuple[str, ...] = ("model", "host", "gpu")) -> str:
    """The InfluxQL filter of a GPU panel: the template variables, then extra conditions, then time."""
    parts = [f'"{t}" =~ /^${t}$/' for t in tags] + list(extra) + ["$timeFilter"]
    return " AND ".join(parts)


def psel(tags: tuple[str, ...] = ("model", "host", "gpu"), extra: str = "") -> str:
    """The PromQL label matcher of a GPU panel."""
    parts = [f'{t}=~"${t}"' for t in tags] + ([extra] if extra else [])
    return "{" + ",".join(parts) + "}"


BY_GPU = '"model", "host", "gpu"'


def not_empty_i(tag: str) -> str:
    """InfluxQL: only points that carry `tag` (per-instance, per-link, per-sink points)."""
    return f"\"{tag}\" != ''"


def not_empty_p(tag: str) -> str:
    return f'{tag}!=""'


VGPU_I, VGPU_P = not_empty_i("vgpu_instance"), not_empty_p("vgpu_instance")
LINK_I, LINK_P = not_empty_i("link"), not_empty_p("link")
COLLECTOR_I, COLLECTOR_P = not_empty_i("collector"), not_empty_p("collector")
XID_I = '"xid" > 0'
JOB_I, JOB_P = not_empty_i("slurm_job_id"), not_empty_p("slurm_job_id")
# gpu_job.energy_j is a counter (plugins/processes/README.md), but the sink's README parser files
# the gpu_job table under gpu_process and exposes it as a gauge without _total; match both names.
JOB_ENERGY = '__name__=~"gpuagent_gpu_job_energy_joules(_total)?"'
# Grafana counts the GPUs per (model, verdict) of the per-GPU table (InfluxQL cannot group by a field).
VERDICT_COUNT = [
    {
        "id": "groupBy",
        "options": {
            "fields": {
                "model": {"aggregations": [], "operation": "groupby"},
                "verdict": {"aggregations": [], "operation": "groupby"},
                "gpu": {"aggregations": ["count"], "operation": "aggregate"},
            }
        },
    }
]


@dataclass
class Target:
    influxql: str | None
    promql: str | None
    legend: dict[str, str] = field(default_factory=dict)
    # InfluxQL result format: time_series or table
    fmt: str = "time_series"


@dataclass
class Panel:
    title: str
    targets: list[Target]
    kind: str = "timeseries"  # timeseries | table | bargauge | stat
    unit: str = "short"
    description: str = ""
    width: int = 12
    height: int = 8
    # PromQL only: "range" (default) or "instant" (tables of current values)
    instant: bool = False
    # Grafana transformations, InfluxQL only (PromQL counts in the query)
    transform: list | None = None
    # The languages that can express the panel (InfluxQL has no join across measurements).
    langs: tuple[str, ...] = LANGS


@dataclass
class Row:
    title: str


@dataclass
class Variable:
    name: str
    label: str
    influxql: str
    promql: str  # label_values(...)
    multi: bool = True
    kind: str = "query"  # query, or textbox (influxql holds the default value)
    langs: tuple[str, ...] = LANGS


@dataclass
class Annotation:
    name: str
    influxql: str
    promql: str
    text_column: str = "xid_description"
    color: str = "red"


@dataclass
class Dashboard:
    slug: str
    title: str
    description: str
    variables: list[Variable]
    items: list[Panel | Row]
    annotations: list[Annotation] = field(default_factory=list)
    time_from: str = "now-6h"


def one(
    influxql: str | None, promql: str | None, *, il: str | None = None, pl: str | None = None, fmt: str = "time_series"
) -> Target:
    return Target(
        influxql, promql, {"influxql": il or GPU_LEGEND["influxql"], "promql": pl or GPU_LEGEND["promql"]}, fmt
    )


def gpu_series(measurement: str, fld: str, metric: str, scale: str = "") -> Target:
    """mean(field) per GPU over $__interval; the PromQL metric as it is (scaled by `scale`)."""
    return one(
        f'SELECT mean("{fld}") FROM "{measurement}" WHERE {iwhere()} GROUP BY time($__interval), {BY_GPU} fill(null)',
        f"{metric}{psel()}{scale}",
    )


def model_mean(measurement: str, fld: str, metric: str, scale: str = "") -> Target:
    """Mean per GPU model (the fleet's side-by-side view)."""
    return one(
        f'SELECT mean("{fld}") FROM "{measurement}" WHERE {iwhere()} GROUP BY time($__interval), "model" fill(null)',
        f"avg by (model) ({metric}{psel()}){scale}",
        il="$tag_model",
        pl="{{model}}",
    )


# -- variables ---------------------------------------------------------------------------------


def gpu_variables(host_multi: bool = True) -> list[Variable]:
    return [
        Variable(
            "model",
            "Model",
            'SHOW TAG VALUES FROM "gpu_power" WITH KEY = "model"',
            "label_values(gpuagent_gpu_power_power_watts, model)",
        ),
        Variable(
            "host",
            "Host",
            'SHOW TAG VALUES FROM "gpu_power" WITH KEY = "host" WHERE "model" =~ /^$model$/',
            'label_values(gpuagent_gpu_power_power_watts{model=~"$model"}, host)',
            multi=host_multi,
        ),
        Variable(
            "gpu",
            "GPU",
            'SHOW TAG VALUES FROM "gpu_power" WITH KEY = "gpu" WHERE "model" =~ /^$model$/ AND "host" =~ /^$host$/',
            'label_values(gpuagent_gpu_power_power_watts{model=~"$model",host=~"$host"}, gpu)',
        ),
    ]


# -- fleet -----------------------------------------------------------------------------------

THROTTLE_REASONS = (
    "sw_power_cap",
    "hw_thermal_slowdown",
    "sw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sync_boost",
)


def throttle_by_reason() -> list[Target]:
    """Share of wall time each reason held the clocks: d(time)/dt × 100 per GPU, averaged per model.

    InfluxQL: one query, a column per reason (d(time_ns)/dt / 1e9 × 100); PromQL: a query per
    reason (rate() drops the metric name, so one regex query could not tell the reasons apart).
    """
    inner = ", ".join(f'non_negative_derivative(max("{r}_time_ns"), 1s) / 10000000 AS "{r}"' for r in THROTTLE_REASONS)
    outer = ", ".join(f'mean("{r}") AS "{r}"' for r in THROTTLE_REASONS)
    influxql = (
        f'SELECT {outer} FROM (SELECT {inner} FROM "gpu_clocks" WHERE {iwhere()} '
        f'GROUP BY time($__interval), {BY_GPU}) WHERE $timeFilter GROUP BY time($__interval), "model"'
    )
    return [
        Target(
            influxql if i == 0 else None,
            f"avg by (model) (rate(gpuagent_gpu_clocks_{r}_time_seconds_total{psel()}[$__rate_interval])) * 100",
            {"influxql": "$tag_model $col", "promql": "{{model}} " + r},
        )
        for i, r in enumerate(THROTTLE_REASONS)
    ]


# -- work per unit (gpu_work: the work collector's points) -------------------------------------

WORK_BY = '"model", "workload", "unit"'
# Prices for the cost panel (PromQL): one $ per GPU-hour for every model, $ per kWh, PUE. Per-model
# prices are `gpuagent compare`'s [compare.prices] (docs/compare.md).
PRICE_VARIABLES = [
    Variable("gpu_hour_price", "$ per GPU-hour", "2.0", "", kind="textbox", langs=("promql",)),
    Variable("kwh_price", "$ per kWh", "0.12", "", kind="textbox", langs=("promql",)),
    Variable("pue", "PUE", "1.2", "", kind="textbox", langs=("promql",)),
]
TEXTBOX_DEFAULTS = {v.name: v.influxql for v in PRICE_VARIABLES}


def work_share_p() -> str:
    """PromQL: per work series, this GPU's share of the work's units/s (the counter's rate / gpus)."""
    return f"rate(gpuagent_gpu_work_units_total{psel()}[$__rate_interval]) / gpuagent_gpu_work_gpus{psel()}"


def work_power_p() -> str:
    """PromQL: per (model, workload, unit), the power drawn by the GPUs doing that work (W)."""
    return (
        f"sum by (model, workload, unit) (gpuagent_gpu_work_gpus{psel()} * 0 + on (host, uuid) group_left "
        f"avg by (host, uuid) (gpuagent_gpu_power_power_watts{psel()}))"
    )


def units_per_gpu_hour() -> Target:
    inner = (
        f'SELECT non_negative_derivative(last("units_total"), 1s) AS "rate", last("gpus") AS "gpus" FROM "gpu_work" '
        f'WHERE {iwhere()} GROUP BY time($__interval), {WORK_BY}, "host", "uuid", "work_id"'
    )
    return one(
        f'SELECT mean("share") * 3600 FROM (SELECT mean("rate") / mean("gpus") AS "share" FROM ({inner}) WHERE $timeFilter '
        f'GROUP BY time($__interval), {WORK_BY}, "host", "uuid", "work_id") WHERE $timeFilter GROUP BY time($__interval), {WORK_BY} fill(null)',
        f"sum by (model, workload, unit) ({work_share_p()}) / count by (model, workload, unit) (gpuagent_gpu_work_gpus{psel()}) * 3600",
        il="$tag_model $tag_workload $tag_unit",
        pl="{{model}} {{workload}} {{unit}}",
    )


def units_in_range() -> Target:
    series = f'{WORK_BY}, "host", "uuid", "work_id"'
    inner = (
        f'SELECT non_negative_difference(last("units_total")) AS "d", last("gpus") AS "n" FROM "gpu_work" '
        f"WHERE {iwhere()} GROUP BY time($__interval), {series}"
    )
    middle = f'SELECT sum("d") / mean("n") AS "units" FROM ({inner}) WHERE $timeFilter GROUP BY {series}'
    return one(
        f'SELECT sum("units") FROM ({middle}) GROUP BY {WORK_BY}',
        f"sum by (model, workload, unit) (increase(gpuagent_gpu_work_units_total{psel()}[$__range]) / on (host, uuid, work_id, workload, unit) group_left "
        f"last_over_time(gpuagent_gpu_work_gpus{psel()}[$__range]))",
        il="$tag_model $tag_workload $tag_unit",
        pl="{{model}} {{workload}} {{unit}}",
        fmt="table",
    )


def limits_p() -> list[Target]:
    """PromQL: per model, the share of its GPUs in each class of docs/compare.md's rule table at each
    step (means over $__rate_interval; thresholds from gpuagent.compare.limits, the rules' first match
    wins): a GPU with work counts its busy share (mean utilisation) in the class of the first busy rule
    that holds and the rest as starved. 0, not absent, for an empty class."""
    from gpuagent.compare import limits as lim

    ri = "[$__rate_interval]"

    def avg(metric: str) -> str:
        return f"max by (host, uuid) (avg_over_time({metric}{psel()}{ri}))"

    def of_busy(metric: str) -> str:  # an activity as a share of the busy time
        return f"({avg(metric)} / {util})"

    allg = f"group by (host, uuid, model) (gpuagent_gpu_power_power_watts{psel()})"
    work = f"group by (host, uuid) (gpuagent_gpu_work_gpus{psel()})"
    alloc = f"({allg} and on (host, uuid) {work})"
    util = avg("gpuagent_gpu_memory_gpu_util_ratio")
    busy = f"(clamp_max({util}, 1) or on (host, uuid) group by (host, uuid) {alloc})"  # no utilisation: no split
    dram = avg("gpuagent_gpu_memory_dram_bw_util_ratio")
    clock = f"({avg('gpuagent_gpu_clocks_sm_clock_hertz')} / {avg('gpuagent_gpu_clocks_max_sm_clock_hertz')})"
    power = f"({avg('gpuagent_gpu_power_power_watts')} / {avg('gpuagent_gpu_power_enforced_power_limit_watts')})"
    # PCIe per lane and direction: 0.985 GB/s × 2^(gen - 3) (Gen 3+; within 2 % of Gen 1-2's 0.25 and 0.5)
    link = f"(2 * 0.985e9 * 2 ^ ({avg('gpuagent_gpu_pcie_link_gen')} - 3) * {avg('gpuagent_gpu_pcie_link_width')})"
    pcie = (
        f"(({avg('gpuagent_gpu_pcie_tx_bytes_per_second')} + {avg('gpuagent_gpu_pcie_rx_bytes_per_second')}) / {link})"
    )
    version = avg("gpuagent_gpu_nvlink_version")
    per_link = " + ".join(f"{g!r} * ({version} == bool {v})" for v, g in sorted(lim.NVLINK_GBPS.items()))
    nvlink = (
        f"(({avg('gpuagent_gpu_nvlink_total_tx_bytes_per_second')} + {avg('gpuagent_gpu_nvlink_total_rx_bytes_per_second')})"
        f" / (2e9 * ({per_link}) * {avg('gpuagent_gpu_nvlink_links_active')}))"
    )
    sm, tensor = of_busy("gpuagent_gpu_memory_sm_active_ratio"), of_busy("gpuagent_gpu_memory_tensor_active_ratio")
    occupancy, dram_busy = of_busy("gpuagent_gpu_memory_sm_occupancy_ratio"), f"({dram} / {util})"
    low = f"({util} < {lim.STARVED_UTIL_PCT / 100!r})"
    reason = lim.REASON_SHARE_PCT / 100
    peak = lim.LINK_NEAR_PEAK_PCT / 100
    # (class, condition on the busy share), in the rule table's order
    rules = [
        ("thermal", f"(({avg('gpuagent_gpu_clocks_sw_thermal_slowdown')} >= {reason!r}) or "
                    f"({avg('gpuagent_gpu_clocks_hw_thermal_slowdown')} >= {reason!r}))"),
        ("power", f"(({avg('gpuagent_gpu_clocks_sw_power_cap')} >= {reason!r}) or "
                  f"({avg('gpuagent_gpu_clocks_hw_power_brake_slowdown')} >= {reason!r}) or "
                  f"({power} >= {lim.POWER_AT_CAP_PCT / 100!r}))"),
        ("interconnect", f"({nvlink} >= {peak!r})"),
        ("interconnect", f"({pcie} >= {peak!r})"),
        ("memory", f"({dram_busy} >= {lim.DRAM_BW_PCT / 100!r})"),
        ("compute", f"(({tensor} >= {lim.TENSOR_PCT / 100!r}) or (({sm} >= {lim.SM_ACTIVE_PCT / 100!r}) and on (host, uuid) "
                    f"({occupancy} >= {lim.OCCUPANCY_PCT / 100!r}))) and on (host, uuid) {dram}"),
        ("starved", f"(({sm} < {lim.LAUNCH_BOUND_PCT / 100!r}) and on (host, uuid) ({dram_busy} < {lim.LAUNCH_BOUND_PCT / 100!r}))"),
        ("memory", f"((({avg('gpuagent_gpu_memory_memory_util_ratio')} / {util}) >= {lim.MEM_BUSY_PCT / 100!r}) unless on (host, uuid) {dram})"),
        ("compute", f"((({clock} >= {lim.CLOCK_AT_MAX_PCT / 100!r}) and on (host, uuid) (({power} / {util}) >= {lim.BUSY_POWER_PCT / 100!r})) "
                    f"unless on (host, uuid) {dram})"),
    ]  # fmt: skip
    working = f"({alloc} unless on (host, uuid) {low})"

    def share(members: str, value: str = busy) -> str:  # each member GPU's part, with its model label
        return f"({members} * on (host, uuid) group_left () {value})"

    def total(parts: list[str]) -> str:
        return " + ".join(f"(sum by (model) ({p}) or count by (model) ({allg}) * 0)" for p in parts)

    parts: dict[str, list[str]] = {c: [] for c in lim.CLASSES}
    parts["idle"].append(f"({allg} unless on (host, uuid) {work})")
    parts["starved"] += [f"({alloc} and on (host, uuid) {low})", share(working, f"(1 - {busy})")]
    for i, (cls, cond) in enumerate(rules):
        earlier = [c for _, c in rules[:i]]
        members = f"({working} and on (host, uuid) ({cond})"
        members += f" unless on (host, uuid) ({' or '.join(earlier)}))" if earlier else ")"
        parts[cls].append(share(members))
    parts["unclassified"].append(share(f"({working} unless on (host, uuid) ({' or '.join(c for _, c in rules)}))"))
    out = []
    for cls in lim.CLASSES:
        expr = f"100 * ({total(parts[cls])}) / count by (model) ({allg})"
        out.append(Target(None, f'label_replace({expr}, "class", "{cls}", "", "")', {"promql": "{{model}} " + cls}))
    return out


WORK_ITEMS = [
    Row("Work per unit"),
    Panel(
        "Units per GPU-hour by model and workload",
        [units_per_gpu_hour()],
        unit="short",
        description="Each GPU's share of its work's counter (units_total growth / gpus, from gpu_work), per hour, "
        "averaged over the GPUs of a model doing a workload. `gpuagent compare --by model,workload` "
        "gives the same over a range, with energy and cost per unit (docs/compare.md).",
    ),
    Panel(
        "Units in the range by model and workload",
        [units_in_range()],
        kind="bargauge",
        unit="short",
        instant=True,
        description="Growth of each work counter over the dashboard's range / the GPUs it spans, summed "
        "(InfluxQL: a restart's first interval is not counted; gpuagent compare counts it).",
    ),
    Panel(
        "Energy per 1,000 units by model and workload",
        [
            Target(
                None,
                f"{work_power_p()} / sum by (model, workload, unit) ({work_share_p()}) / 3.6",
                {"promql": "{{model}} {{workload}} {{unit}}"},
            )
        ],
        unit="Wh",
        langs=("promql",),
        description="Power of the GPUs doing the work / their units per second, as Wh per 1,000 units. "
        "PromQL only: InfluxQL cannot join gpu_power to gpu_work (use gpuagent compare).",
    ),
    Panel(
        "Cost per million units by model and workload",
        [
            Target(
                None,
                f"1e6 * ($gpu_hour_price * count by (model, workload, unit) (gpuagent_gpu_work_gpus{psel()}) "
                f"+ {work_power_p()} / 1000 * $kwh_price * $pue) / 3600 / sum by (model, workload, unit) ({work_share_p()})",
                {"promql": "{{model}} {{workload}} {{unit}}"},
            )
        ],
        unit="currencyUSD",
        langs=("promql",),
        description="($ per GPU-hour × GPUs + kW × PUE × $ per kWh) / units per hour × 10^6, with the prices of the "
        "dashboard's variables (one price for every model; per-model prices: gpuagent compare's [compare.prices]).",
    ),
    Panel(
        "What limits the work, by model (% of GPUs)",
        limits_p(),
        unit="percent",
        width=24,
        langs=("promql",),
        description="Each GPU at each step by the rule table of docs/compare.md (first match wins): idle (no "
        "gpu_work); with work, its idle share starved and its busy share in thermal, power, interconnect (NVLink; "
        "PCIe, a proxy), memory (GPM DRAM bandwidth; without GPM memory busy time, a proxy), compute (GPM tensor "
        "and SM activity; without GPM SM clock and power, proxies), starved (GPM: few SMs and little DRAM busy) "
        "or unclassified, never compute by elimination. PromQL only.",
    ),
]


FLEET = Dashboard(
    slug="fleet",
    title="gpuagent / Fleet",
    description="The fleet side by side by GPU model, then host, then GPU (gpuagent).",
    variables=gpu_variables(),
    items=[
        Row("Power and energy"),
        Panel(
            "Power by model (mean per GPU)",
            [model_mean("gpu_power", "power_w", "gpuagent_gpu_power_power_watts")],
            unit="watt",
        ),
        Panel("Power by GPU", [gpu_series("gpu_power", "power_w", "gpuagent_gpu_power_power_watts")], unit="watt"),
        Panel(
            "Power against the enforced limit",
            [
                one(
                    f'SELECT mean("power_w") / mean("enforced_power_limit_w") * 100 FROM "gpu_power" WHERE {iwhere()} GROUP BY time($__interval), {BY_GPU} fill(null)',
                    f"gpuagent_gpu_power_power_watts{psel()} / gpuagent_gpu_power_enforced_power_limit_watts{psel()} * 100",
                )
            ],
            unit="percent",
        ),
        Panel(
            "Energy used in the range, by model",
            [
                one(
                    f'SELECT sum("used") FROM (SELECT spread("energy_j") AS "used" FROM "gpu_power" WHERE {iwhere()} GROUP BY {BY_GPU}) GROUP BY "model"',
                    f"sum by (model) (increase(gpuagent_gpu_power_energy_joules_total{psel()}[$__range]))",
                    il="$tag_model",
                    pl="{{model}}",
                    fmt="table",
                )
            ],
            kind="bargauge",
            unit="joule",
            instant=True,
            description="The energy counter's growth over the dashboard's time range, summed over each model's GPUs.",
        ),
        Panel(
            "Energy by Slurm job in the range",
            [
                one(
                    f'SELECT sum("used") FROM (SELECT spread("energy_j") AS "used" FROM "gpu_job" WHERE {iwhere(JOB_I)} GROUP BY "slurm_job_id", "host", "gpu") GROUP BY "slurm_job_id"',
                    f"sum by (slurm_job_id) (increase({{{JOB_ENERGY},{psel(extra=JOB_P)[1:]}[$__range]))",
                    il="job $tag_slurm_job_id",
                    pl="job {{slurm_job_id}}",
                    fmt="table",
                )
            ],
            kind="bargauge",
            unit="joule",
            instant=True,
            description="Growth of each GPU's energy counter while a job's processes ran on it (gpu_job), summed over the job's GPUs. A GPU shared by two jobs at once is charged to both.",
        ),
        Row("Clocks and throttling"),
        Panel(
            "SM clock against its maximum",
            [
                one(
                    f'SELECT mean("sm_clock_mhz") / max("max_sm_clock_mhz") * 100 FROM "gpu_clocks" WHERE {iwhere()} GROUP BY time($__interval), {BY_GPU} fill(null)',
                    f"gpuagent_gpu_clocks_sm_clock_hertz{psel()} / gpuagent_gpu_clocks_max_sm_clock_hertz{psel()} * 100",
                )
            ],
            unit="percent",
        ),
        Panel(
            "SM clock by model",
            [model_mean("gpu_clocks", "sm_clock_mhz", "gpuagent_gpu_clocks_sm_clock_hertz", " / 1e6")],
            unit="MHz",
        ),
        Panel(
            "Throttle time by reason (share of wall time)",
            throttle_by_reason(),
            unit="percent",
            width=24,
            description="Growth of NVML's per-reason clock-event time counters (datacenter cards, driver r535+), as a share of wall time, averaged over each model's GPUs.",
        ),
        Row("Utilisation"),
        Panel(
            "GPM: SM, tensor and DRAM bandwidth (Hopper and newer)",
            [
                one(
                    f'SELECT mean("sm_active_pct") AS "sm_active", mean("tensor_active_pct") AS "tensor_active" FROM "gpu_memory" WHERE {iwhere()} GROUP BY time($__interval), "model" fill(null)',
                    f"avg by (model) (gpuagent_gpu_memory_sm_active_ratio{psel()}) * 100",
                    il="$tag_model $col",
                    pl="{{model}} SM active",
                ),
                one(
                    f'SELECT mean("dram_bw_util_pct") AS "dram_bw" FROM "gpu_memory" WHERE {iwhere()} AND "sm_active_pct" >= 0 GROUP BY time($__interval), "model" fill(null)',
                    f"avg by (model) (gpuagent_gpu_memory_tensor_active_ratio{psel()}) * 100",
                    il="$tag_model $col",
                    pl="{{model}} tensor active",
                ),
                one(
                    None,
                    f"avg by (model) (gpuagent_gpu_memory_dram_bw_util_ratio{psel()} and on (host, gpu) gpuagent_gpu_memory_sm_active_ratio) * 100",
                    pl="{{model}} DRAM bandwidth",
                ),
            ],
            unit="percent",
            description="GPU Performance Monitoring counters: only Hopper and newer have them; DRAM bandwidth here is a true bandwidth ratio.",
        ),
        Panel(
            "Memory busy time (all cards; not bandwidth)",
            [model_mean("gpu_memory", "memory_util_pct", "gpuagent_gpu_memory_memory_util_ratio", " * 100")],
            unit="percent",
            description="NVML utilization.memory: the share of time the memory controller was busy. On Ada and Ampere this is the only memory reading NVML has; it is not a bandwidth.",
        ),
        Panel(
            "GPU busy time by model",
            [model_mean("gpu_memory", "gpu_util_pct", "gpuagent_gpu_memory_gpu_util_ratio", " * 100")],
            unit="percent",
        ),
        Panel(
            "DRAM bandwidth (GPM) against peak",
            [
                one(
                    f'SELECT mean("dram_bw_gbps") AS "used", max("dram_peak_gbps") AS "peak" FROM "gpu_memory" WHERE {iwhere()} AND "sm_active_pct" >= 0 GROUP BY time($__interval), "model" fill(null)',
                    f"avg by (model) (gpuagent_gpu_memory_dram_bw_bytes_per_second{psel()})",
                    il="$tag_model $col",
                    pl="{{model}} used",
                ),
                one(
                    None,
                    f"max by (model) (gpuagent_gpu_memory_dram_peak_bytes_per_second{psel()})",
                    pl="{{model}} peak",
                ),
            ],
            unit="GBs",
        ),
        Row("Memory"),
        Panel(
            "Framebuffer used",
            [
                one(
                    f'SELECT mean("fb_used_bytes") / mean("fb_total_bytes") * 100 FROM "gpu_memory" WHERE {iwhere()} GROUP BY time($__interval), {BY_GPU} fill(null)',
                    f"gpuagent_gpu_memory_fb_used_bytes{psel()} / gpuagent_gpu_memory_fb_total_bytes{psel()} * 100",
                )
            ],
            unit="percent",
        ),
        Panel(
            "Framebuffer used by model (mean per GPU)",
            [model_mean("gpu_memory", "fb_used_bytes", "gpuagent_gpu_memory_fb_used_bytes")],
            unit="bytes",
        ),
        Row("PCIe"),
        Panel(
            "PCIe throughput",
            [
                one(
                    f'SELECT mean("tx_bytes_per_s") AS "tx", mean("rx_bytes_per_s") AS "rx" FROM "gpu_pcie" WHERE {iwhere()} GROUP BY time($__interval), {BY_GPU} fill(null)',
                    f"gpuagent_gpu_pcie_tx_bytes_per_second{psel()}",
                    il="$tag_host gpu $tag_gpu $col",
                    pl="{{host}} gpu {{gpu}} tx",
                ),
                one(
                    None,
                    f"gpuagent_gpu_pcie_rx_bytes_per_second{psel()}",
                    pl="{{host}} gpu {{gpu}} rx",
                ),
            ],
            unit="Bps",
        ),
        Panel(
            "PCIe link against its maximum",
            [
                one(
                    f'SELECT last("link_gen") AS "gen", last("max_link_gen") AS "max gen", last("link_width") AS "width", last("max_link_width") AS "max width" FROM "gpu_pcie" WHERE {iwhere()} GROUP BY {BY_GPU}',
                    f"gpuagent_gpu_pcie_link_gen{psel()}",
                    fmt="table",
                ),
                one(
                    None,
                    f"gpuagent_gpu_pcie_max_link_gen{psel()}",
                    fmt="table",
                ),
                one(
                    None,
                    f"gpuagent_gpu_pcie_link_width{psel()}",
                    fmt="table",
                ),
                one(
                    None,
                    f"gpuagent_gpu_pcie_max_link_width{psel()}",
                    fmt="table",
                ),
            ],
            kind="table",
            instant=True,
        ),
        Panel(
            "PCIe replays per second",
            [
                one(
                    f'SELECT non_negative_derivative(max("replays_total"), 1s) FROM "gpu_pcie" WHERE {iwhere()} GROUP BY time($__interval), {BY_GPU} fill(null)',
                    f"rate(gpuagent_gpu_pcie_replays_total{psel()}[$__rate_interval])",
                )
            ],
            unit="ops",
        ),
        Row("L2, probe and P2P"),
        Panel(
            "L2 size and peak DRAM bandwidth by model",
            [
                one(
                    f'SELECT max("l2_cache_bytes") AS "L2", max("dram_peak_gbps") AS "peak DRAM GB/s", max("bus_width_bits") AS "bus bits" FROM "gpu_memory" WHERE {iwhere()} GROUP BY "model"',
                    f"max by (model) (gpuagent_gpu_memory_l2_cache_bytes{psel()})",
                    il="$tag_model",
                    pl="{{model}}",
                    fmt="table",
                ),
                one(
                    None,
                    f"max by (model) (gpuagent_gpu_memory_dram_peak_bytes_per_second{psel()})",
                    pl="{{model}}",
                    fmt="table",
                ),
            ],
            kind="table",
            instant=True,
        ),
        Panel(
            "L2 probe knees (gpuagent.probe --send)",
            [
                one(
                    f'SELECT last("l2_effective_bytes") AS "effective L2", last("reported_l2_bytes") AS "reported L2", last("l2_bw_gbps") AS "L2 GB/s", last("dram_bw_gbps") AS "DRAM GB/s", last("l2_dram_ratio") AS "ratio" FROM "gpu_l2_probe" WHERE {iwhere()} AND "knee_found" = true GROUP BY {BY_GPU}',
                    f"gpuagent_gpu_l2_probe_l2_effective_bytes{psel()}",
                    fmt="table",
                ),
                one(
                    None,
                    f"gpuagent_gpu_l2_probe_l2_dram_ratio{psel()}",
                    fmt="table",
                ),
            ],
            kind="table",
            instant=True,
            description="Where bandwidth falls from L2 to DRAM, measured by `python -m gpuagent.probe --send` (docs/probe.md).",
        ),
        Panel(
            "P2P class between GPUs",
            [
                one(
                    f'SELECT last("topology") AS "topology", last("read_status") AS "read", last("nvlink_count") AS "NVLinks" FROM "gpu_p2p" WHERE {iwhere()} GROUP BY {BY_GPU}, "peer_gpu"',
                    f"gpuagent_gpu_p2p_topology_info{psel()}",
                    fmt="table",
                ),
                one(
                    None,
                    f"gpuagent_gpu_p2p_nvlinks{psel()}",
                    fmt="table",
                ),
            ],
            kind="table",
            instant=True,
            width=24,
            description="As nvidia-smi topo -m names it: NV# over NVLink, else the PCIe level (PIX, PXB, PHB, NODE, SYS); read is NVML's P2P read status.",
        ),
        Row("Health"),
        Panel(
            "Health verdicts by model",
            [
                one(
                    f'SELECT last("verdict") AS "verdict" FROM "gpu_health" WHERE {iwhere()} GROUP BY {BY_GPU}',
                    f"count by (model, verdict) (gpuagent_gpu_health_verdict_info{psel()})",
                    il="$tag_model",
                    pl="{{model}} {{verdict}}",
                    fmt="table",
                )
            ],
            kind="table",
            instant=True,
            width=8,
            transform=VERDICT_COUNT,
            description="GPUs per model in each verdict (ok, degraded, reset_required, reboot_required, drain, lost) "
            "from the health collector's documented rules (plugins/health/README.md).",
        ),
        Panel(
            "Lost GPUs by model",
            [
                one(
                    f'SELECT count("lost") AS "lost" FROM "gpu_health" WHERE {iwhere()} AND "lost" = true GROUP BY "model"',
                    f"count by (model) (gpuagent_gpu_health_lost{psel()} == 1)",
                    il="$tag_model",
                    pl="{{model}}",
                    fmt="table",
                )
            ],
            kind="bargauge",
            instant=True,
            width=8,
            description="GPUs that answered GPU_IS_LOST (fell off the bus) in the range.",
        ),
        Panel(
            "Health by GPU",
            [
                one(
                    f'SELECT last("verdict") AS "verdict", last("verdict_reason") AS "reason", last("lost") AS "lost", last("xid_events_total") AS "XIDs", last("ecc_uncorrected_volatile_total") AS "ECC uncorrected", last("remapped_rows_pending") AS "remap pending", last("remapped_rows_failure") AS "remap failed" FROM "gpu_health" WHERE {iwhere()} GROUP BY {BY_GPU}',
                    f"gpuagent_gpu_health_xid_events_total{psel()}",
                    fmt="table",
                ),
                one(
                    None,
                    f"gpuagent_gpu_health_ecc_uncorrected_volatile_total{psel()}",
                    fmt="table",
                ),
                one(
                    None,
                    f"gpuagent_gpu_health_remapped_rows_pending{psel()}",
                    fmt="table",
                ),
                one(
                    None,
                    f"gpuagent_gpu_health_verdict_reason_info{psel()}",
                    fmt="table",
                ),
            ],
            kind="table",
            instant=True,
            width=24,
            description="Each GPU's verdict with the evidence behind it.",
        ),
        Panel(
            "XID events by model",
            [
                one(
                    f'SELECT count("xid") FROM "gpu_health" WHERE {iwhere()} AND "xid" > 0 GROUP BY time($__interval), "model" fill(0)',
                    f"sum by (model) (increase(gpuagent_gpu_health_xid_events_total{psel()}[$__rate_interval]))",
                    il="$tag_model",
                    pl="{{model}}",
                )
            ],
            kind="timeseries",
            unit="short",
        ),
    ],
)

FLEET.items.extend(WORK_ITEMS)
FLEET.variables.extend(PRICE_VARIABLES)


# -- node ------------------------------------------------------------------------------------

NODE_TAGS = ("host", "gpu")
# Owners of a process (plugins/processes/README.md); tags of gpu_process and gpu_job only.
OWNER_TAGS = '"slurm_job_id", "k8s_namespace", "k8s_pod", "k8s_pod_uid", "container_id", "systemd_unit"'


def node_series(
    measurement: str,
    fld: str,
    metric: str,
    scale: str = "",
    extra_i: str = "",
    extra_p: str = "",
    by: str = '"gpu"',
    legend_i: str = "gpu $tag_gpu",
    legend_p: str = "gpu {{gpu}}",
) -> Target:
    cond = (extra_i,) if extra_i else ()
    return one(
        f'SELECT mean("{fld}") FROM "{measurement}" WHERE {iwhere(*cond, tags=NODE_TAGS)} GROUP BY time($__interval), {by} fill(null)',
        f"{metric}{psel(NODE_TAGS, extra_p)}{scale}",
        il=legend_i,
        pl=legend_p,
    )


NODE = Dashboard(
    slug="node",
    title="gpuagent / Node",
    description="One machine: every GPU's readings, MIG and vGPU instances, NVLink per link, processes, XIDs (gpuagent).",
    variables=[
        Variable(
            "host",
            "Host",
            'SHOW TAG VALUES FROM "gpu_power" WITH KEY = "host"',
            "label_values(gpuagent_gpu_power_power_watts, host)",
            multi=False,
        ),
        Variable(
            "gpu",
            "GPU",
            'SHOW TAG VALUES FROM "gpu_power" WITH KEY = "gpu" WHERE "host" =~ /^$host$/',
            'label_values(gpuagent_gpu_power_power_watts{host=~"$host"}, gpu)',
        ),
    ],
    annotations=[
        Annotation(
            "XID events",
            'SELECT "xid", "xid_description", "gpu" FROM "gpu_health" WHERE "host" =~ /^$host$/ AND "gpu" =~ /^$gpu$/ AND "xid" > 0 AND $timeFilter',
            # The sink keeps a GPU's last XID (value: the code) until the series expires.
            'gpuagent_gpu_health_xid{host=~"$host",gpu=~"$gpu"} > 0',
        )
    ],
    items=[
        Row("GPUs"),
        Panel("Power", [node_series("gpu_power", "power_w", "gpuagent_gpu_power_power_watts")], unit="watt", width=8),
        Panel(
            "Temperature",
            [node_series("gpu_power", "temperature_c", "gpuagent_gpu_power_temperature_celsius")],
            unit="celsius",
            width=8,
        ),
        Panel(
            "SM clock",
            [node_series("gpu_clocks", "sm_clock_mhz", "gpuagent_gpu_clocks_sm_clock_hertz", " / 1e6")],
            unit="MHz",
            width=8,
        ),
        Panel(
            "GPU busy time",
            [node_series("gpu_memory", "gpu_util_pct", "gpuagent_gpu_memory_gpu_util_ratio", " * 100")],
            unit="percent",
            width=8,
        ),
        Panel(
            "Memory busy time (not bandwidth)",
            [node_series("gpu_memory", "memory_util_pct", "gpuagent_gpu_memory_memory_util_ratio", " * 100")],
            unit="percent",
            width=8,
        ),
        Panel(
            "Framebuffer used",
            [node_series("gpu_memory", "fb_used_bytes", "gpuagent_gpu_memory_fb_used_bytes")],
            unit="bytes",
            width=8,
        ),
        Panel(
            "PCIe TX",
            [node_series("gpu_pcie", "tx_bytes_per_s", "gpuagent_gpu_pcie_tx_bytes_per_second")],
            unit="Bps",
            width=8,
        ),
        Panel(
            "PCIe RX",
            [node_series("gpu_pcie", "rx_bytes_per_s", "gpuagent_gpu_pcie_rx_bytes_per_second")],
            unit="Bps",
            width=8,
        ),
        Panel(
            "Energy per GPU over the range",
            [
                one(
                    f'SELECT spread("energy_j") FROM "gpu_power" WHERE {iwhere(tags=NODE_TAGS)} GROUP BY "gpu"',
                    f"increase(gpuagent_gpu_power_energy_joules_total{psel(NODE_TAGS)}[$__range])",
                    il="gpu $tag_gpu",
                    pl="gpu {{gpu}}",
                    fmt="table",
                )
            ],
            kind="bargauge",
            unit="joule",
            width=8,
            instant=True,
        ),
        Row("MIG instances"),
        Panel(
            "MIG instance memory used",
            [
                node_series(
                    "gpu_mig",
                    "fb_used_pct",
                    "gpuagent_gpu_mig_fb_used_ratio",
                    " * 100",
                    extra_i="\"gi_id\" != ''",
                    extra_p='gi_id!=""',
                    by='"gpu", "gi_id", "ci_id", "mig_profile"',
                    legend_i="gpu $tag_gpu GI $tag_gi_id CI $tag_ci_id $tag_mig_profile",
                    legend_p="gpu {{gpu}} GI {{gi_id}} CI {{ci_id}} {{mig_profile}}",
                )
            ],
            unit="percent",
        ),
        Panel(
            "MIG instance SM activity (GPM, Hopper and newer)",
            [
                node_series(
                    "gpu_mig",
                    "sm_util_pct",
                    "gpuagent_gpu_mig_sm_util_ratio",
                    " * 100",
                    extra_i="\"gi_id\" != ''",
                    extra_p='gi_id!=""',
                    by='"gpu", "gi_id", "ci_id", "mig_profile"',
                    legend_i="gpu $tag_gpu GI $tag_gi_id CI $tag_ci_id $tag_mig_profile",
                    legend_p="gpu {{gpu}} GI {{gi_id}} CI {{ci_id}} {{mig_profile}}",
                )
            ],
            unit="percent",
        ),
        Row("vGPU instances"),
        Panel(
            "vGPU instances",
            [
                one(
                    f'SELECT last("vgpu_type_name") AS "type", last("vm_id") AS "VM", last("fb_used_bytes") AS "fb used", last("license_state") AS "licence" FROM "gpu_vgpu" WHERE {iwhere(VGPU_I, tags=NODE_TAGS)} GROUP BY "gpu", "vgpu_instance"',
                    f"gpuagent_gpu_vgpu_fb_used_bytes{psel(NODE_TAGS, VGPU_P)}",
                    il="gpu $tag_gpu vGPU $tag_vgpu_instance",
                    pl="gpu {{gpu}} vGPU {{vgpu_instance}}",
                    fmt="table",
                )
            ],
            kind="table",
            instant=True,
        ),
        Panel(
            "vGPU SM utilisation",
            [
                node_series(
                    "gpu_vgpu",
                    "sm_util_pct",
                    "gpuagent_gpu_vgpu_sm_util_ratio",
                    " * 100",
                    extra_i="\"vgpu_instance\" != ''",
                    extra_p='vgpu_instance!=""',
                    by='"gpu", "vgpu_instance", "vgpu_type"',
                    legend_i="gpu $tag_gpu vGPU $tag_vgpu_instance $tag_vgpu_type",
                    legend_p="gpu {{gpu}} vGPU {{vgpu_instance}} {{vgpu_type}}",
                )
            ],
            unit="percent",
        ),
        Row("NVLink"),
        Panel(
            "NVLink RX per link (GPM)",
            [
                node_series(
                    "gpu_nvlink",
                    "rx_bytes_per_sec",
                    "gpuagent_gpu_nvlink_rx_bytes_per_second",
                    extra_i="\"link\" != ''",
                    extra_p='link!=""',
                    by='"gpu", "link"',
                    legend_i="gpu $tag_gpu link $tag_link",
                    legend_p="gpu {{gpu}} link {{link}}",
                )
            ],
            unit="Bps",
        ),
        Panel(
            "NVLink TX per link (GPM)",
            [
                node_series(
                    "gpu_nvlink",
                    "tx_bytes_per_sec",
                    "gpuagent_gpu_nvlink_tx_bytes_per_second",
                    extra_i="\"link\" != ''",
                    extra_p='link!=""',
                    by='"gpu", "link"',
                    legend_i="gpu $tag_gpu link $tag_link",
                    legend_p="gpu {{gpu}} link {{link}}",
                )
            ],
            unit="Bps",
        ),
        Panel(
            "NVLink links",
            [
                one(
                    f'SELECT last("state") AS "state", last("version_name") AS "version", last("remote_device_type") AS "far end", last("remote_pci_bus_id") AS "far bus id" FROM "gpu_nvlink" WHERE {iwhere(LINK_I, tags=NODE_TAGS)} GROUP BY "gpu", "link"',
                    f"gpuagent_gpu_nvlink_active{psel(NODE_TAGS, LINK_P)}",
                    il="gpu $tag_gpu link $tag_link",
                    pl="gpu {{gpu}} link {{link}}",
                    fmt="table",
                )
            ],
            kind="table",
            instant=True,
            width=24,
        ),
        Row("Processes and XIDs"),
        Panel(
            "Processes",
            [
                one(
                    f'SELECT last("name") AS "name", last("user") AS "user", last("type") AS "type", last("used_memory_bytes") AS "memory" FROM "gpu_process" WHERE {iwhere(tags=NODE_TAGS)} GROUP BY "gpu", "pid", {OWNER_TAGS}',
                    f"gpuagent_gpu_process_used_memory_bytes{psel(NODE_TAGS)}",
                    il="gpu $tag_gpu pid $tag_pid",
                    pl="gpu {{gpu}} pid {{pid}}",
                    fmt="table",
                )
            ],
            kind="table",
            instant=True,
            description="Each process with its owner where known: Slurm job, Kubernetes pod, container, systemd unit.",
        ),
        Panel(
            "Jobs on this node: energy and memory in the range",
            [
                one(
                    f'SELECT spread("energy_j") AS "energy J", max("used_memory_bytes") AS "max memory" FROM "gpu_job" WHERE {iwhere(JOB_I, tags=NODE_TAGS)} GROUP BY "slurm_job_id", "slurm_user", "gpu"',
                    f"increase({{{JOB_ENERGY},{psel(NODE_TAGS, JOB_P)[1:]}[$__range])",
                    il="job $tag_slurm_job_id gpu $tag_gpu",
                    pl="job {{slurm_job_id}} gpu {{gpu}}",
                    fmt="table",
                ),
                one(
                    None,
                    f"max_over_time(gpuagent_gpu_job_used_memory_bytes{psel(NODE_TAGS, JOB_P)}[$__range])",
                    pl="job {{slurm_job_id}} gpu {{gpu}}",
                    fmt="table",
                ),
            ],
            kind="table",
            instant=True,
        ),
        Panel(
            "XID events",
            [
                one(
                    f'SELECT "xid", "xid_description" FROM "gpu_health" WHERE {iwhere(XID_I, tags=NODE_TAGS)} GROUP BY "gpu"',
                    f"gpuagent_gpu_health_xid_events_total{psel(NODE_TAGS)}",
                    il="gpu $tag_gpu",
                    pl="gpu {{gpu}}",
                    fmt="table",
                )
            ],
            kind="table",
            instant=True,
        ),
    ],
)


# -- agent -----------------------------------------------------------------------------------

AGENT_TAGS = ("host",)


def agent_rate(fld: str, metric: str, tag: str) -> Target:
    """Per-second growth of one of the agent's own counters, per collector or sink."""
    return one(
        f'SELECT non_negative_derivative(max("{fld}"), 1s) FROM "gpuagent" WHERE {iwhere(not_empty_i(tag), tags=AGENT_TAGS)} GROUP BY time($__interval), "host", "{tag}" fill(null)',
        f"rate({metric}{psel(AGENT_TAGS, not_empty_p(tag))}[$__rate_interval])",
        il=f"$tag_host $tag_{tag}",
        pl="{{host}} {{" + tag + "}}",
    )


def agent_gauge(fld: str, metric: str, tag: str, scale: str = "") -> Target:
    return one(
        f'SELECT mean("{fld}") FROM "gpuagent" WHERE {iwhere(not_empty_i(tag), tags=AGENT_TAGS)} GROUP BY time($__interval), "host", "{tag}" fill(null)',
        f"{metric}{psel(AGENT_TAGS, not_empty_p(tag))}{scale}",
        il=f"$tag_host $tag_{tag}",
        pl="{{host}} {{" + tag + "}}",
    )


AGENT = Dashboard(
    slug="agent",
    title="gpuagent / Agent",
    description="The agent's own health: the gpuagent measurement (collector time, errors, delivery, spool).",
    variables=[
        Variable(
            "host",
            "Host",
            'SHOW TAG VALUES FROM "gpuagent" WITH KEY = "host"',
            "label_values(gpuagent_runs_total, host)",
        ),
    ],
    time_from="now-1h",
    items=[
        Row("Collectors"),
        Panel(
            "Collector gather time",
            [agent_gauge("gather_time_ms", "gpuagent_gather_time_seconds", "collector", " * 1000")],
            unit="ms",
        ),
        Panel("Collector runs per second", [agent_rate("runs_total", "gpuagent_runs_total", "collector")], unit="ops"),
        Panel(
            "Collector errors per second",
            [agent_rate("errors_total", "gpuagent_errors_total", "collector")],
            unit="ops",
        ),
        Panel(
            "Collector timeouts per second",
            [agent_rate("timeouts_total", "gpuagent_timeouts_total", "collector")],
            unit="ops",
        ),
        Panel(
            "Points per second, by collector",
            [agent_rate("points_total", "gpuagent_points_total", "collector")],
            unit="ops",
        ),
        Panel(
            "Last error, by collector",
            [
                one(
                    f'SELECT last("last_error") AS "last error" FROM "gpuagent" WHERE {iwhere(COLLECTOR_I, tags=AGENT_TAGS)} GROUP BY "host", "collector"',
                    f"gpuagent_last_error_info{psel(AGENT_TAGS, COLLECTOR_P)}",
                    il="$tag_host $tag_collector",
                    pl="{{host}} {{collector}}",
                    fmt="table",
                )
            ],
            kind="table",
            instant=True,
            description="Empty while every collector is healthy.",
        ),
        Panel(
            "NVML refusals per second, by collector, call and code",
            [
                one(
                    f'SELECT non_negative_derivative(max("nvml_errors_total"), 1s) FROM "gpuagent" WHERE {iwhere(not_empty_i("nvml_call"), tags=AGENT_TAGS)} GROUP BY time($__interval), "host", "collector", "nvml_call", "nvml_error" fill(null)',
                    f"rate(gpuagent_nvml_errors_total{psel(AGENT_TAGS, not_empty_p('nvml_call'))}[$__rate_interval])",
                    il="$tag_host $tag_collector $tag_nvml_call $tag_nvml_error",
                    pl="{{host}} {{collector}} {{nvml_call}} {{nvml_error}}",
                )
            ],
            unit="ops",
            description="The NVML error policy's counts (docs/plugins/reference.md): a permanent refusal "
            "(NOT_SUPPORTED, DEPRECATED, NO_PERMISSION) is asked once per GPU, a transient one (TIMEOUT, UNKNOWN) every cycle.",
        ),
        Row("Delivery"),
        Panel(
            "Points written per second, by sink",
            [agent_rate("points_written_total", "gpuagent_points_written_total", "sink")],
            unit="ops",
        ),
        Panel(
            "Points dropped per second, by sink",
            [agent_rate("dropped_total", "gpuagent_dropped_total", "sink")],
            unit="ops",
            description="Lost to a full spool or buffer (influxdb sink).",
        ),
        Panel("Spool depth (points)", [agent_gauge("spool_points", "gpuagent_spool_points", "sink")], unit="short"),
        Panel("Spool size", [agent_gauge("spool_bytes", "gpuagent_spool_bytes", "sink")], unit="bytes"),
        Panel(
            "Write errors per second, by sink",
            [agent_rate("write_errors_total", "gpuagent_write_errors_total", "sink")],
            unit="ops",
        ),
        Panel(
            "Points in memory, by sink",
            [agent_gauge("buffered_points", "gpuagent_buffered_points", "sink")],
            unit="short",
        ),
    ],
)

DASHBOARDS = (FLEET, NODE, AGENT)


# -- Grafana JSON ----------------------------------------------------------------------------


def _datasource(lang: str) -> dict:
    return {"type": DS_TYPE[lang], "uid": "${datasource}"}


def _target(t: Target, lang: str, ref: str, instant: bool) -> dict | None:
    query = getattr(t, lang)
    if query is None:
        return None
    if lang == "influxql":
        return {
            "refId": ref,
            "datasource": _datasource(lang),
            "rawQuery": True,
            "query": query,
            "resultFormat": "table" if t.fmt == "table" else "time_series",
            "alias": t.legend["influxql"],
        }
    out = {
        "refId": ref,
        "datasource": _datasource(lang),
        "expr": query,
        "legendFormat": t.legend["promql"],
        "range": not instant,
        "instant": instant,
    }
    if instant:
        out["format"] = "table"
    return out


def _panel(p: Panel, lang: str, pid: int, x: int, y: int) -> dict:
    targets = [t for i, tg in enumerate(p.targets) if (t := _target(tg, lang, chr(65 + i), p.instant)) is not None]
    out = {
        "id": pid,
        "type": p.kind,
        "title": p.title,
        "datasource": _datasource(lang),
        "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
        "options": {},
        "targets": targets,
    }
    if p.description:
        out["description"] = p.description
    if p.kind == "timeseries":
        out["options"] = {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif p.kind == "bargauge":
        out["options"] = {
            "orientation": "horizontal",
            "displayMode": "basic",
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        }
    elif p.kind == "table":
        out["options"] = {"showHeader": True}
        if lang == "influxql" and p.transform:
            out["transformations"] = p.transform
        elif lang == "promql" or len(targets) > 1:
            out["transformations"] = [{"id": "merge", "options": {}}]
    return out


def _variable(v: Variable, lang: str) -> dict:
    if v.kind == "textbox":
        return {
            "name": v.name,
            "label": v.label,
            "type": "textbox",
            "query": v.influxql,
            "current": {"text": v.influxql, "value": v.influxql},
            "hide": 0,
        }
    # A plain string: every Grafana from 9 on reads it (10+ turns label_values() into its editor's form).
    query = v.influxql if lang == "influxql" else v.promql
    return {
        "name": v.name,
        "label": v.label,
        "type": "query",
        "datasource": _datasource(lang),
        "query": query,
        "definition": v.influxql if lang == "influxql" else v.promql,
        "refresh": 2,  # on time range change
        "multi": v.multi,
        "includeAll": v.multi,
        "allValue": ".*" if v.multi else None,
        "current": {},
        "sort": 3,  # numerical ascending: gpu 2 before gpu 10
        "regex": "",
        "hide": 0,
    }


def _annotation(a: Annotation, lang: str) -> dict:
    out = {"name": a.name, "enable": True, "iconColor": a.color, "datasource": _datasource(lang)}
    if lang == "influxql":
        out.update({"query": a.influxql, "textColumn": a.text_column, "tagsColumn": "gpu", "titleColumn": "xid"})
    else:
        out.update(
            {
                "expr": a.promql,
                "titleFormat": "XID on gpu {{gpu}}",
                "tagKeys": "gpu",
                "useValueForTime": False,
                "step": "60s",
            }
        )
    return out


def render(d: Dashboard, lang: str) -> dict:
    panels, pid, x, y, row_h = [], 1, 0, 0, 0
    for item in d.items:
        if isinstance(item, Row):
            if x:
                y, x = y + row_h, 0
            panels.append(
                {
                    "id": pid,
                    "type": "row",
                    "title": item.title,
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                    "panels": [],
                }
            )
            y, row_h = y + 1, 0
        elif lang in item.langs:
            if x + item.width > 24:
                y, x, row_h = y + row_h, 0, 0
            panels.append(_panel(item, lang, pid, x, y))
            x, row_h = x + item.width, max(row_h, item.height)
        pid += 1
    builtin = {
        "builtIn": 1,
        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
        "enable": True,
        "hide": True,
        "iconColor": "rgba(0, 211, 255, 1)",
        "name": "Annotations & Alerts",
        "type": "dashboard",
    }
    name = "InfluxQL" if lang == "influxql" else "PromQL"
    datasource_var = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": DS_TYPE[lang],
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "includeAll": False,
        "multi": False,
    }
    return {
        "uid": f"gpuagent-{d.slug}-{lang}",
        "title": f"{d.title} ({name})",
        "description": d.description,
        "tags": ["gpuagent", "gpu", lang],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "1m",
        "time": {"from": d.time_from, "to": "now"},
        "timepicker": {},
        "timezone": "",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "links": [],
        "annotations": {"list": [builtin] + [_annotation(a, lang) for a in d.annotations]},
        "templating": {"list": [datasource_var] + [_variable(v, lang) for v in d.variables if lang in v.langs]},
        "panels": panels,
    }


def files() -> dict[Path, str]:
    return {
        HERE / lang / f"gpuagent-{d.slug}.json": json.dumps(render(d, lang), indent=2, ensure_ascii=False) + "\n"
        for d in DASHBOARDS
        for lang in LANGS
    }


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for path, text in files().items():
        if check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print("stale, rerun config/grafana/generate.py: " + ", ".join(str(p) for p in stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
