"""The comparison over PromQL: the same groups, figures and document as the InfluxQL report.

Every figure is aggregated by the server (`sum by`, `count by`, `*_over_time`
over the whole range in one instant query at its end); the client receives
one number per group (per host for the host lists, per GPU with `--by gpu`),
never raw points, so its cost does not grow with the range or the sample rate.
Two name schemes (docs/compare.md):

- ``influx``: line protocol written into VictoriaMetrics, `<measurement>_<field>`
  (`gpu_power_power_w`), values as written; string fields are dropped there.
- ``prometheus``: the agent's /metrics scraped by Prometheus
  (`gpuagent_gpu_power_power_watts`), base units undone with the sink's own
  mapping (the prometheus sink's metric_for), string fields as `_info` series.

Where PromQL must differ from InfluxQL (the p95, the observed time), the registry's PromQL definitions
say how (gpuagent.compare.figures: Figure.promql).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from gpuagent.compare import figures
from gpuagent.compare.core import (
    GROUP_TAGS,
    REASONS,
    NoData,
    Range,
    bucket_seconds,
    p2p_summary,
    report_document,
    rfc3339,
)
from gpuagent.compare.health import VERDICTS, bucket_for, pieces
from gpuagent.compare.prices import Prices
from gpuagent.compare.promql import PromNames, PromQL
from gpuagent.compare.work import PromWork, work_section
from gpuagent.errors import AgentError
from gpuagent.plugin_host import registered
from gpuagent.schema.measurements import (
    GPU_CLOCKS,
    GPU_HEALTH,
    GPU_L2_PROBE,
    GPU_MEMORY,
    GPU_MIG,
    GPU_P2P,
    GPU_POWER,
    GPU_VGPU,
)

GPU = "host, uuid, model, gpu"
MERGE = {"sum": "sum", "count": "sum", "max": "max", "min": "min"}  # how values of one figure combine

PROMQL_DEFINITIONS = figures.PROMQL_DEFINITIONS


class PromReport(PromNames):
    """`build()` -> the same JSON-able document as gpuagent.compare.report.Report."""

    def __init__(self, client: PromQL, rng: Range, by: str = "model", where: str | None = None):
        if by not in GROUP_TAGS:
            raise AgentError(f"--by {by!r}: expected one of {', '.join(GROUP_TAGS)}")
        super().__init__(client, rng, where)
        self.by = by
        self.group = ", ".join(GROUP_TAGS[by])
        self.prices = Prices()  # [compare.prices], set by the CLI

    # -- aggregates over the range ----------------------------------------------------------------
    def over_range(self, fn: str, measurement: str, field: str, by: str) -> str:
        """`<fn>_over_time` (sum, count, max, min) of one field over the range, merged `by` those labels
        (sums and counts added, max/min selected): the one shape the rollup report
        (gpuagent.compare.promql_rollups) answers piece by piece."""
        return f"{MERGE[fn]} by ({by}) ({fn}_over_time({self.range_selector(measurement, field)}))"

    def mean(self, measurement: str, field: str, by: str | None = None) -> str:
        by = by or self.group
        scale = self.name(measurement, field)[1]
        expr = f"{self.over_range('sum', measurement, field, by)} / {self.over_range('count', measurement, field, by)}"
        return expr if scale == 1.0 else f"({expr}) / {scale!r}"

    def max(self, measurement: str, field: str, by: str | None = None) -> str:
        scale = self.name(measurement, field)[1]
        expr = self.over_range("max", measurement, field, by or self.group)
        return expr if scale == 1.0 else f"({expr}) / {scale!r}"

    # -- the registry's aggregates (gpuagent.compare.figures) -------------------------------------------
    def aggregate_query(self, agg: figures.Aggregate) -> str:
        """One aggregate per group as one query. `only` (GPM) needs no matcher: dram_bw_source is a
        string field, which neither scheme keeps, and only GPM writes dram_bw_util_pct there."""
        if agg.op == "mean":
            return self.mean(agg.measurement, agg.field)
        if agg.op == "max":
            return self.max(agg.measurement, agg.field)
        if agg.op == "count":
            return self.over_range("count", agg.measurement, agg.field, self.group)
        # PromQL has no percentile over the samples of many series: the highest per-GPU one (PROMQL_DEFINITIONS)
        scale = self.name(agg.measurement, agg.field)[1]
        p95 = f"max by ({self.group}) (quantile_over_time(0.95, {self.range_selector(agg.measurement, agg.field)}))"
        return p95 if scale == 1.0 else f"({p95}) / {scale!r}"

    def group_aggregates(self, wanted: tuple[figures.Aggregate, ...]) -> dict[tuple, dict[figures.Aggregate, Any]]:
        """Per group, each aggregate as the server computes it (asked at once)."""
        answers = self._ask({str(i): (self.aggregate_query(a), f"{a.op} {a.field}") for i, a in enumerate(wanted)})
        return self._answered(wanted, [answers[str(i)] for i in range(len(wanted))])

    def _answered(self, wanted, results: list[list[dict]]) -> dict[tuple, dict[figures.Aggregate, Any]]:
        out: dict[tuple, dict[figures.Aggregate, Any]] = defaultdict(dict)
        for agg, result in zip(wanted, results, strict=True):
            for gkey, value in self._by_group(result).items():
                out[gkey][agg] = value
        return out

    # -- running queries --------------------------------------------------------------------------
    def _ask(self, queries: dict[str, tuple[str, str]]) -> dict[str, list[dict]]:
        names = list(queries)
        results = self.client.many([(queries[n][0], self.at, queries[n][1]) for n in names])
        return dict(zip(names, results, strict=True))

    def _by_group(self, result: list[dict]) -> dict[tuple, float]:
        tags = GROUP_TAGS[self.by]
        out = {}
        for r in result:
            value = float(r["value"][1])
            if math.isfinite(value):
                out[tuple(r["metric"].get(t, "") for t in tags)] = value
        return out

    # -- the report -------------------------------------------------------------------------------
    def build(self) -> dict[str, Any]:
        if not self.client.engine:
            self.client.detect_engine(self.at)
        self.detect_scheme()
        gpu_of = {"model": "host, model", "host": "host, model", "gpu": GPU}[self.by]
        any_gpu = " or ".join(
            f"group by ({GPU}) ({self.over_range('count', m, f, GPU)})"
            for m, f in ((GPU_POWER, "power_w"), (GPU_CLOCKS, "sm_clock_mhz"), (GPU_MEMORY, "fb_used_bytes"))
        )
        inventory = self.client.query(f"count by ({gpu_of}) ({any_gpu})", self.at, "the GPU inventory")
        if not inventory:
            where = f" matching {self.where}" if self.where else ""
            raise NoData(
                f"no GPU readings{where} between {rfc3339(self.range.start_ns)} and {rfc3339(self.range.end_ns)} "
                f"in {self.client.conn.label}"
            )
        groups: dict[tuple, dict[str, Any]] = {}
        tags = GROUP_TAGS[self.by]
        for r in inventory:
            m = r["metric"]
            gkey = tuple(m.get(t, "") for t in tags)
            g = groups.setdefault(
                gkey, {"key": dict(zip(tags, gkey, strict=True)), "_hosts": set(), "_models": set(), "gpus": 0}
            )
            g["_hosts"].add(m.get("host", ""))
            g["_models"].add(m.get("model", ""))
            g["gpus"] += int(float(r["value"][1]))
            if self.by == "gpu":
                g["label"] = f"{m.get('host', '')}/gpu{m.get('gpu', '')} {m.get('model', '')}"
        for gkey, g in groups.items():
            g.setdefault("label", gkey[0])
            g["models"] = sorted(g.pop("_models"))
            g["hosts"] = sorted(g.pop("_hosts"))
        answers = self._ask(self._queries())
        self._energy(groups, answers)
        self._fill(groups, answers)
        self._health(groups)
        self._work(groups)
        series = self._series(groups)
        source = {
            "url": self.client.conn.url,
            "database": f"PromQL ({self.client.engine}, {self.scheme} names)",
            "kind": "raw",
            "resolution": None,
        }
        return report_document(
            self.range,
            self.by,
            self.where,
            source,
            {**PROMQL_DEFINITIONS, **figures.WORK_DEFINITIONS},
            groups,
            series=series,
        )

    def _work(self, groups) -> None:
        """Per unit of work and what limits it, from gpu_work (gpuagent.compare.work)."""
        shadow: dict[tuple, dict] = {gkey: {} for gkey in groups}
        work_section(
            PromWork(self.client, self.range, self.where, gpu_where=True),
            self.range,
            self.by,
            self.prices,
            self.where,
            shadow,
        )
        for gkey, fields in shadow.items():
            groups[gkey].update(fields)

    def _health(self, groups) -> None:
        """health_gpu_hours per group from the verdict's _info series, as the InfluxQL report computes it
        (gpuagent.compare.health): epoch-aligned buckets cut at the range's edges, each shared among
        the verdicts of a GPU by their samples in it. Whole buckets in one range query; the partial
        first and last ones each in an instant query over their own part."""
        for g in groups.values():
            g[figures.HEALTH] = {}
        if self.scheme != "prometheus":  # strings are not kept by VictoriaMetrics' line protocol
            return
        spec = registered("sinks", "prometheus").metric_for(self.namespace, GPU_HEALTH, "verdict", True)
        for g in groups.values():
            g[figures.HEALTH] = dict.fromkeys(VERDICTS, 0.0)
        bucket = bucket_for((self.range.end_ns - self.range.start_ns) / 1e9)
        sel = f"{spec.name}{{{self.where}}}" if self.where else spec.name

        def shares(window_ms: int) -> str:
            # Per GPU and verdict: its samples / the GPU's samples in the window; summed per group.
            c = f"count_over_time({sel}[{max(1, window_ms)}ms])"
            return f"sum by ({self.group}, {spec.label}) ({c} / on ({GPU}) group_left () sum by ({GPU}) ({c}))"

        purpose = "GPU-hours per health verdict"
        cut = pieces(self.range.start_ns, self.range.end_ns, bucket)
        whole = [(a, b) for a, b in cut if b - a == bucket * 10**9]
        answers: list[tuple[list[tuple[dict, float]], float]] = []  # ([(labels, GPUs)], seconds each)
        if whole:  # the point at b - 1 ms covers [a, b), as in _series
            rows = self.client.query_range(
                shares(bucket * 1000), whole[0][1] / 1e9 - 0.001, whole[-1][1] / 1e9 - 0.001, bucket, purpose
            )
            answers.append(([(r["metric"], float(v)) for r in rows for _, v in r["values"]], float(bucket)))
        for a, b in cut:
            if (a, b) not in whole:
                rows = self.client.query(shares((b - a) // 1_000_000), b / 1e9 - 0.001, purpose)
                answers.append(([(r["metric"], float(r["value"][1])) for r in rows], (b - a) / 1e9))
        tags = GROUP_TAGS[self.by]
        for found, seconds in answers:
            for metric, gpus in found:
                group = groups.get(tuple(metric.get(t, "") for t in tags))
                verdict = metric.get(spec.label)
                if group is None or not verdict or not math.isfinite(gpus):
                    continue
                hours = group[figures.HEALTH]
                hours[verdict] = hours.get(verdict, 0.0) + gpus * seconds / 3600

    def _span_per_gpu(self) -> str:
        e = self.range_selector(GPU_POWER, "energy_j")
        if self.client.engine == "victoriametrics":
            return f"sum by ({GPU}) (tlast_over_time({e}) - tfirst_over_time({e}))"
        span_ms = (self.range.end_ns - self.range.start_ns) // 1_000_000
        res = f"{max(1, span_ms // 1000)}ms"
        s = self.selector(GPU_POWER, "energy_j")
        start = self.range.start_ns / 1e9
        return (
            f"sum by ({GPU}) (max_over_time(timestamp({s})[{self.window}:{res}]) "
            f"- min_over_time((timestamp({s}) >= {start:.3f})[{self.window}:{res}]))"
        )

    def _energy_queries(self) -> dict[str, tuple[str, str]]:
        G = self.group
        e = self.range_selector(GPU_POWER, "energy_j")
        escale = self.name(GPU_POWER, "energy_j")[1]
        energy_gpu = (
            f"sum by ({GPU}) ((max_over_time({e}) - min_over_time({e})) and (resets({e}) == 0) or increase({e}))"
        )
        if escale != 1.0:
            energy_gpu = f"({energy_gpu}) / {escale!r}"
        span_gpu = self._span_per_gpu()
        util_gpu = self.mean(GPU_MEMORY, "gpu_util_pct", by=GPU)
        return {
            figures.ENERGY_J: (f"sum by ({G}) ({energy_gpu})", "energy per group"),
            figures.OBSERVED_S: (f"sum by ({G}) ({span_gpu})", "observed time per group"),
            figures.BUSY_ENERGY_J: (
                f"sum by ({G}) (({energy_gpu}) and on ({GPU}) ({util_gpu}))",
                "energy of GPUs with utilisation",
            ),
            figures.BUSY_S: (f"sum by ({G}) (({span_gpu}) * on ({GPU}) ({util_gpu}) / 100)", "busy time per group"),
        }

    def _queries(self) -> dict[str, tuple[str, str]]:
        G = self.group
        q: dict[str, tuple[str, str]] = self._energy_queries()
        for i, agg in enumerate(figures.aggregates(figures.PLAIN)):
            q[f"aggregate:{i}"] = (self.aggregate_query(agg), f"{agg.op} {agg.field}")
        for reason in REASONS:
            q[f"throttle:{reason}"] = (
                f"100 * {self.over_range('sum', GPU_CLOCKS, reason, G)} / {self.over_range('count', GPU_CLOCKS, reason, G)}",
                f"share of time under {reason}",
            )

        def best(measurement: str, field: str) -> str:
            return self.over_range("max", measurement, field, GPU)

        # Per GPU its best link, 2 (NVLink) or 1 (PCIe read), counted per class in one query. The
        # booleans are 0/1: a sum above 0 is a sample set (what the rollups count).
        nv, rd = self.over_range("sum", GPU_P2P, "nvlink_ok", GPU), self.over_range("sum", GPU_P2P, "read_ok", GPU)
        link = f"max by ({GPU}) ((2 * (({nv}) > bool 0) > 0) or ((({rd}) > bool 0) > 0))"
        q["p2p_class"] = (f'count_values by ({G}) ("p2p_class", {link})', "GPUs by P2P link")
        q["mig:capable"] = (
            f"count by ({G}) ({self.over_range('max', GPU_MIG, 'max_mig_devices', GPU)})",
            "MIG-capable GPUs",
        )
        q["mig:devices"] = (f"sum by ({G}) ({best(GPU_MIG, 'mig_devices')})", "MIG devices")
        q["mig:enabled"] = (
            f"count by ({G}) ({self.over_range('sum', GPU_MIG, 'mig_mode_current', GPU)} > 0)",
            "GPUs with MIG on",
        )
        q["mig:profiles"] = (
            f"group by ({G}, mig_profile) ({self.over_range('count', GPU_MIG, 'mig_index', f'{G}, mig_profile')})",
            "MIG profiles",
        )
        q["vgpu:instances"] = (f"sum by ({G}) ({best(GPU_VGPU, 'active_instances')})", "vGPU instances")
        q["vgpu:types"] = (
            f"group by ({G}, vgpu_type) ({self.over_range('count', GPU_VGPU, 'vgpu_type_id', f'{G}, vgpu_type')})",
            "vGPU types",
        )
        if self.scheme == "prometheus":
            mode = f"{self.selector(GPU_VGPU, 'virtualization_mode', True)}[{self.window}]"
            q["vgpu:modes"] = (
                f"count by ({G}, virtualization_mode) (group by ({GPU}, virtualization_mode) (last_over_time({mode})))",
                "virtualization modes",
            )
        for f in figures.L2_PROBE_MEANS:
            q[f"l2:{f}"] = (self.mean(GPU_L2_PROBE, f), f"L2 probe {f}")
        q["l2:runs"] = (self.over_range("count", GPU_L2_PROBE, "l2_dram_ratio", G), "L2 probe runs")
        return q

    def _energy(self, groups, a) -> None:
        sums = {name: self._by_group(a[name]) for name in figures.ENERGY_SUMS}
        figures.derive(figures.ENERGY, {gkey: {n: sums[n].get(gkey, 0.0) for n in sums} for gkey in groups}, groups)

    def _fill(self, groups, a) -> None:
        tags = GROUP_TAGS[self.by]
        wanted = figures.aggregates(figures.PLAIN)
        figures.derive(
            figures.PROMQL_ORDER, self._answered(wanted, [a[f"aggregate:{i}"] for i in range(len(wanted))]), groups
        )
        throttle = {r: self._by_group(a[f"throttle:{r}"]) for r in REASONS}
        counts = {
            k: self._by_group(a[k]) for k in ("mig:capable", "mig:devices", "mig:enabled", "vgpu:instances", "l2:runs")
        }
        for cls, name in (("2", "p2p:nvlink"), ("1", "p2p:pcie")):
            counts[name] = self._by_group([r for r in a["p2p_class"] if r["metric"].get("p2p_class") == cls])
        l2 = {f: self._by_group(a[f"l2:{f}"]) for f in figures.L2_PROBE_MEANS}
        profiles: defaultdict[tuple, set[str]] = defaultdict(set)
        types: defaultdict[tuple, set[str]] = defaultdict(set)
        modes: defaultdict[tuple, dict[str, int]] = defaultdict(dict)
        for r in a["mig:profiles"]:
            if r["metric"].get("mig_profile"):
                profiles[tuple(r["metric"].get(t, "") for t in tags)].add(r["metric"]["mig_profile"])
        for r in a["vgpu:types"]:
            if r["metric"].get("vgpu_type"):
                types[tuple(r["metric"].get(t, "") for t in tags)].add(r["metric"]["vgpu_type"])
        for r in a.get("vgpu:modes", []):
            mode = r["metric"].get("virtualization_mode")
            if mode:
                modes[tuple(r["metric"].get(t, "") for t in tags)][mode] = int(float(r["value"][1]))
        for gkey, g in groups.items():
            g[figures.THROTTLE] = {r: throttle[r][gkey] for r in REASONS if gkey in throttle[r]}
            nvlink = int(counts["p2p:nvlink"].get(gkey, 0))
            pcie = int(counts["p2p:pcie"].get(gkey, 0))
            g[figures.P2P] = {"nvlink": nvlink, "pcie": pcie, "none": g["gpus"] - nvlink - pcie}
            g[figures.P2P_SUMMARY] = p2p_summary(g[figures.P2P])
            g[figures.MIG] = figures.mig_value(
                int(counts["mig:capable"].get(gkey, 0)),
                int(counts["mig:enabled"].get(gkey, 0)),
                int(counts["mig:devices"].get(gkey, 0)),
                profiles.get(gkey, ()),
            )
            g[figures.VGPU] = figures.vgpu_value(
                modes.get(gkey, {}), int(counts["vgpu:instances"].get(gkey, 0)), types.get(gkey, ())
            )
            runs = counts["l2:runs"].get(gkey)
            g[figures.L2_PROBE] = figures.l2_probe_value(int(runs) if runs else None, {f: l2[f].get(gkey) for f in l2})

    def _series(self, groups) -> dict[str, Any]:
        span = (self.range.end_ns - self.range.start_ns) / 1e9
        bucket = bucket_seconds(span)
        first = self.range.start_ns / 1e9 // bucket * bucket
        last = (self.range.end_ns / 1e9 - 0.001) // bucket * bucket
        r = f"{self.selector(GPU_POWER, 'power_w')}[{bucket}s]"
        scale = self.name(GPU_POWER, "power_w")[1]
        expr = f"sum by ({self.group}) (sum_over_time({r})) / sum by ({self.group}) (count_over_time({r}))"
        if scale != 1.0:
            expr = f"({expr}) / {scale!r}"
        # The point at t + bucket - 1 ms covers [t, t + bucket): InfluxQL's bucket t.
        result = self.client.query_range(expr, first + bucket - 0.001, last + bucket - 0.001, bucket, "power over time")
        return self._series_doc(result, groups, bucket, bucket - 0.001)

    def _series_doc(self, result, groups, bucket: int, lag_s: float) -> dict[str, Any]:
        """The power series from a range query whose point at t is the bucket starting at t - lag_s."""
        tags = GROUP_TAGS[self.by]
        lines: dict[str, list] = defaultdict(list)
        for s in result:
            gkey = tuple(s["metric"].get(t, "") for t in tags)
            if gkey not in groups:
                continue
            for t, v in s["values"]:
                value = float(v)
                if math.isfinite(value):
                    # To the millisecond: t (seconds, 1.8e9) times 1e9 is past a float's precision.
                    lines[groups[gkey]["label"]].append([int(round((float(t) - lag_s) * 1000)) * 10**6, value])
        return figures.power_series(bucket, lines)
