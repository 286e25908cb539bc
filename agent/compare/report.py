"""The comparison: per group (GPU model, host or GPU), figures aggregated by InfluxDB.

Every mean, percentile, count and sum is computed by the database (InfluxQL
MEAN, PERCENTILE, MAX, COUNT, NON_NEGATIVE_DIFFERENCE in a subquery, GROUP BY
tags); Python only combines the few per-GPU rows into per-group figures (the
energy and busy-time sums behind the efficiency figure, the P2P, MIG and vGPU
tallies). What each figure is, its definition and how it is derived from the
aggregates this backend answers (`group_aggregates`) are in gpuagent.compare.figures.
"""

from __future__ import annotations

import re
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpuagent.compare import figures
from gpuagent.compare import where as where_rule
from gpuagent.compare.core import (
    GPU_TAGS,
    GROUP_TAGS,
    REASONS,
    WORKERS,
    NoData,
    Range,
    add_p2p,
    bucket_seconds,
    gpu_key,
    report_document,
    rfc3339,
)
from gpuagent.compare.health import health_hours
from gpuagent.compare.prices import Prices
from gpuagent.compare.query import InfluxQL
from gpuagent.compare.work import InfluxWork, work_section
from gpuagent.errors import AgentError
from gpuagent.schema.measurements import GPU_CLOCKS, GPU_L2_PROBE, GPU_MEMORY, GPU_MIG, GPU_P2P, GPU_POWER, GPU_VGPU

DEFINITIONS = figures.DEFINITIONS  # the definitions every document carries (gpuagent.compare.figures)

_PARSE_ERROR = re.compile(r"^error parsing query: (?P<what>.*) at line 1, char (?P<char>\d+)$")


def check_where(client: InfluxQL, where: str | None) -> None:
    """A --where the server cannot parse, told against the user's own text: asked alone (the
    condition last in a query of its own), before the report's queries, whose positions count
    characters of the generated query (issue 29) and whose tokens the user never wrote."""
    where = (where or "").strip()
    if not where:
        return
    prefix = f'SELECT * FROM "{GPU_POWER}" WHERE '
    try:
        client.query(f"{prefix}{where} LIMIT 1")
    except AgentError as exc:
        m = _PARSE_ERROR.match(str(exc).split(": ", 1)[-1].removeprefix("refused a query: "))
        if m is None:
            raise
        at, what = int(m["char"]) - len(prefix), m["what"]
        if 1 <= at <= len(where):
            raise AgentError(f"--where {where!r}: at character {at} ({where[at - 1 : at + 9]!r}): {what}") from None
        expected = what.partition("expected ")[2] or what  # what was "found" is this query's, not the user's
        raise AgentError(f"--where {where!r}: it ends where InfluxQL expects {expected}") from None


class Report:
    """Queries for one range and grouping; `build()` -> the JSON-able document."""

    def __init__(self, client: InfluxQL, rng: Range, by: str = "model", where: str | None = None):
        if by not in GROUP_TAGS:
            raise AgentError(f"--by {by!r}: expected one of {', '.join(GROUP_TAGS)}")
        where = where_rule.influxql(where)  # one condition (gpuagent.compare.where)
        self.client, self.range, self.by, self.where = client, rng, by, (where or "").strip()
        self.group_tags = GROUP_TAGS[by]
        self.prices = Prices()  # [compare.prices], set by the CLI

    # -- query helpers ------------------------------------------------------------------------
    def _where(self, extra: str = "") -> str:
        parts = [self.range.clause()]
        if self.where:
            parts.append(f"({self.where})")
        if extra:
            parts.append(extra)
        return " AND ".join(parts)

    def _rows(self, select: str, measurement: str, group: tuple[str, ...], extra: str = "", tail: str = ""):
        by = ", ".join(f'"{t}"' for t in group)
        q = f'SELECT {select} FROM "{measurement}" WHERE {self._where(extra)} GROUP BY {by}{tail}'
        return self.client.rows(q)

    def _per_gpu(self, select: str, measurement: str, extra: str = "") -> dict[tuple, dict]:
        return {gpu_key(r): r for r in self._rows(select, measurement, GPU_TAGS, extra)}

    def _per_group(self, select: str, measurement: str, extra: str = "") -> dict[tuple, dict]:
        return {
            tuple(r.get(t, "") for t in self.group_tags): r
            for r in self._rows(select, measurement, self.group_tags, extra)
        }

    # -- the report -------------------------------------------------------------------------------
    def build(self) -> dict[str, Any]:
        gpus = self._inventory()
        if not gpus:
            where = f" matching {self.where}" if self.where else ""
            raise NoData(
                f"no GPU readings{where} between {rfc3339(self.range.start_ns)} and {rfc3339(self.range.end_ns)} "
                f"in {self.client.conn.label}"
            )
        groups: dict[tuple, dict[str, Any]] = {}
        for key, info in gpus.items():
            gkey = self._group_of(key)
            g = groups.setdefault(gkey, {"key": dict(zip(self.group_tags, gkey, strict=True)), "_gpus": []})
            g["_gpus"].append((key, info))
        for gkey, g in groups.items():
            members = g.pop("_gpus")
            hosts = sorted({k[0] for k, _ in members})
            models = sorted({k[2] for k, _ in members})
            g["label"] = self._label(gkey, members)
            g["models"] = models
            g["gpus"] = len(members)
            g["hosts"] = hosts
            figures.derive(figures.ENERGY, {gkey: self._energy(members)}, {gkey: g})
        # The sections are independent: each asks its own queries at once and writes its own keys
        # into a fresh dict per group, merged afterwards in this order (the document's key order).
        sections = (
            self._power,
            self._clocks,
            self._throttle,
            self._memory,
            lambda shadow: self._p2p(shadow, gpus),
            lambda shadow: self._mig(shadow, gpus),
            lambda shadow: self._vgpu(shadow, gpus),
            self._l2_probe,
            self._health,
            self._work,
        )
        shadows: list[dict[tuple, dict]] = [{gkey: {} for gkey in groups} for _ in sections]
        with ThreadPoolExecutor(WORKERS) as pool:
            done = [pool.submit(section, shadow) for section, shadow in zip(sections, shadows, strict=True)]
            series_done = pool.submit(self._series, groups)  # reads the labels only
            for future in done:
                future.result()
            series = series_done.result()
        for shadow in shadows:
            for gkey, fields in shadow.items():
                groups[gkey].update(fields)
        source = {"url": self.client.conn.url, "database": self.client.conn.database, "kind": "raw", "resolution": None}
        return report_document(
            self.range, self.by, self.where, source, {**DEFINITIONS, **figures.WORK_DEFINITIONS}, groups, series=series
        )

    def _health(self, groups) -> None:
        health_hours(self, groups)

    def _work(self, groups) -> None:
        """Per unit of work and what limits it, from gpu_work (gpuagent.compare.work)."""
        source = InfluxWork(self.client, self.range, self.where, gpu_where=True)
        work_section(source, self.range, self.by, self.prices, self.where, groups)

    def _group_of(self, gpu_key: tuple) -> tuple:
        tags = dict(zip(GPU_TAGS, gpu_key, strict=True))
        return tuple(tags[t] for t in self.group_tags)

    def _label(self, gkey: tuple, members) -> str:
        if self.by == "gpu":
            (host, _, model, index), _ = members[0]
            return f"{host}/gpu{index} {model}"
        return gkey[0]

    def _inventory(self) -> dict[tuple, dict]:
        """Every GPU (host, uuid, model, gpu) with readings in the range, with its per-GPU figures."""
        gpus: dict[tuple, dict] = defaultdict(dict)
        inner = (
            f'SELECT NON_NEGATIVE_DIFFERENCE("energy_j") AS d FROM "{GPU_POWER}" WHERE {self._where()} '
            f"GROUP BY {', '.join(GPU_TAGS)}"
        )
        with ThreadPoolExecutor(WORKERS) as pool:
            asked = [
                pool.submit(self._per_gpu, select, measurement)
                for select, measurement in (
                    ("COUNT(power_w)", GPU_POWER),
                    ('MEAN("gpu_util_pct")', GPU_MEMORY),
                    # A GPU with any reading there counts. FIRST(*) says so as COUNT(*) does, at a
                    # third of the server's work (it need not read every value of every field).
                    ("FIRST(*)", GPU_CLOCKS),
                    ("FIRST(*)", GPU_MEMORY),
                    ('FIRST("energy_j")', GPU_POWER),
                    ('LAST("energy_j")', GPU_POWER),
                )
            ]
            energy_rows = pool.submit(
                self.client.rows, f"SELECT SUM(d) FROM ({inner}) WHERE {self._where()} GROUP BY {', '.join(GPU_TAGS)}"
            )
            samples, util, clocks, memory, first, last = (a.result() for a in asked)
            energy = {gpu_key(r): r for r in energy_rows.result()}
        for key, row in samples.items():
            gpus[key]["samples"] = row["count"]
        for key, row in util.items():
            gpus[key]["util_mean_pct"] = row["mean"]
        for key in (*clocks, *memory):
            gpus.setdefault(key, {})
        for key, row in first.items():
            if key in last:
                gpus[key]["observed_s"] = (last[key]["time"] - row["time"]) / 1e9
                gpus[key]["energy_j"] = energy[key]["sum"] if key in energy else 0.0
        return dict(gpus)

    def _energy(self, members) -> dict[str, float]:
        """The group's energy sums (figures.ENERGY_SUMS) of its GPUs' figures."""
        metered = [i for _, i in members if "energy_j" in i]
        busy = [i for i in metered if i.get("util_mean_pct") is not None]
        return {
            figures.ENERGY_J: sum(i["energy_j"] for i in metered),
            figures.OBSERVED_S: sum(i["observed_s"] for i in metered),
            figures.BUSY_ENERGY_J: sum(i["energy_j"] for i in busy),
            figures.BUSY_S: sum(i["observed_s"] * i["util_mean_pct"] / 100.0 for i in busy),
        }

    # -- the registry's aggregates (gpuagent.compare.figures), one query per measurement ---------------
    _SELECT = {"mean": 'MEAN("{}")', "max": 'MAX("{}")', "count": 'COUNT("{}")', "p95": 'PERCENTILE("{}", 95)'}
    _ONLY = {figures.GPM: "\"dram_bw_source\" = 'gpm'"}

    def group_aggregates(self, wanted: tuple[figures.Aggregate, ...]) -> dict[tuple, dict[figures.Aggregate, Any]]:
        """Per group, each aggregate as InfluxDB computes it over the raw points."""
        out: dict[tuple, dict[figures.Aggregate, Any]] = defaultdict(dict)
        by_source: dict[tuple[str, str], list[figures.Aggregate]] = defaultdict(list)
        for agg in wanted:
            by_source[(agg.measurement, agg.only)].append(agg)
        for (measurement, only), aggs in by_source.items():
            select = ", ".join(f'{self._SELECT[a.op].format(a.field)} AS "a{i}"' for i, a in enumerate(aggs))
            for gkey, row in self._per_group(select, measurement, self._ONLY.get(only, "")).items():
                out[gkey].update({a: row.get(f"a{i}") for i, a in enumerate(aggs)})
        return out

    def _figures(self, section: tuple[figures.Figure, ...], groups) -> None:
        figures.derive(section, self.group_aggregates(figures.aggregates(section)), groups)

    def _power(self, groups) -> None:
        self._figures(figures.POWER, groups)

    def _clocks(self, groups) -> None:
        self._figures(figures.CLOCKS, groups)

    def _throttle(self, groups) -> None:
        totals = self._per_group(", ".join(f'COUNT("{r}") AS "{r}"' for r in REASONS), GPU_CLOCKS)

        def hits(reason: str) -> dict[tuple, Any]:
            found = self._per_group(f'COUNT("{reason}")', GPU_CLOCKS, f'"{reason}" = true')
            return {gkey: r.get("count") for gkey, r in found.items()}

        figures.throttle_shares(groups, totals, hits)

    def _memory(self, groups) -> None:
        # DRAM bandwidth only as GPM measured it (figures.GPM): older agents wrote NVML's memory busy
        # time under the same name (dram_bw_source = "utilization"); it is not bandwidth, never mixed in.
        self._figures(figures.MEMORY, groups)

    def _p2p(self, groups, gpus) -> None:
        nvlink = self._per_gpu('COUNT("nvlink_ok")', GPU_P2P, '"nvlink_ok" = true')
        pcie = self._per_gpu('COUNT("read_ok")', GPU_P2P, '"read_ok" = true')
        add_p2p(groups, gpus, nvlink, pcie, self._group_of)

    def _mig(self, groups, gpus) -> None:
        capable = self._per_gpu('MAX("max_mig_devices"), MAX("mig_devices")', GPU_MIG)
        enabled = self._per_gpu('COUNT("mig_mode_current")', GPU_MIG, '"mig_mode_current" = true')
        profiles = defaultdict(set)
        for r in self._rows('COUNT("mig_index")', GPU_MIG, (*GPU_TAGS, "mig_profile")):
            if r.get("mig_profile"):
                profiles[self._group_of(gpu_key(r))].add(r["mig_profile"])
        devices = {key: int(r.get("max_1") or 0) for key, r in capable.items()}
        figures.tally_mig(groups, gpus, self._group_of, devices, enabled, profiles)

    def _vgpu(self, groups, gpus) -> None:
        modes = self._per_gpu('LAST("virtualization_mode")', GPU_VGPU)
        instances = self._per_gpu('MAX("active_instances")', GPU_VGPU)
        types = defaultdict(set)
        for r in self._rows('COUNT("vgpu_type_id")', GPU_VGPU, (*GPU_TAGS, "vgpu_type")):
            if r.get("vgpu_type"):
                types[self._group_of(gpu_key(r))].add(r["vgpu_type"])
        last = {key: r["last"] for key, r in modes.items()}
        largest = {key: int(r["max"] or 0) for key, r in instances.items()}
        figures.tally_vgpu(groups, gpus, self._group_of, last, largest, types)

    def _l2_probe(self, groups) -> None:
        means = ", ".join(f'MEAN("{f}") AS {f}' for f in figures.L2_PROBE_MEANS)
        rows = self._per_group(f'{means}, COUNT("l2_dram_ratio") AS runs', GPU_L2_PROBE)
        for gkey, g in groups.items():
            r = rows.get(gkey) or {}
            g[figures.L2_PROBE] = figures.l2_probe_value(r.get("runs"), r)

    def _series(self, groups) -> dict[str, Any]:
        span = (self.range.end_ns - self.range.start_ns) / 1e9
        bucket = bucket_seconds(span)
        rows = self._rows('MEAN("power_w")', GPU_POWER, self.group_tags, tail=f", time({bucket}s) fill(none)")
        lines: dict[str, list] = defaultdict(list)
        for r in rows:
            gkey = tuple(r.get(t, "") for t in self.group_tags)
            if gkey in groups and r.get("mean") is not None:
                lines[groups[gkey]["label"]].append([r["time"], r["mean"]])
        return figures.power_series(bucket, lines)
