"""`compare` per unit of work: units, units per GPU-hour, energy and cost per unit, what limits it.

The figures come from `gpu_work` points (schema: the `work` collector's README) and the GPUs'
own readings, over InfluxQL (`InfluxWork`) or PromQL (`PromWork`); both hand the same few
per-series rows to `build_work`, which does the arithmetic once:

- a *work series* is one piece of work (`work_id`, `workload`, `unit`) on one GPU; its units are
  the increase of `units_total` from its first to its last sample in the range (a decrease is a
  restart: the increase over that interval is the new value, as Prometheus `increase()`), divided
  by `gpus`; its GPU-hours are that span less its absences (cut_absences), shared with the other
  work on its GPU at the same time (share_gpus, gpuagent.compare.sharing); its energy is the GPU's
  `energy_j` increase over exactly that time (the non-negative steps between samples inside it),
  null where the GPU has none; work on a MIG slice (`mig_uuid`) is charged the slice's share of
  both, its `gpu_share` (3/7 for a 3g slice; absent: 1);
- cost = GPU-hours × the model's price per GPU-hour + energy × PUE × the price of a kWh
  (`[compare.prices]`, gpuagent.compare.prices), per series, so a group of several models is
  priced model by model; a model without a GPU-hour price is unpriced (null), never energy only;
- placement (gpuagent.compare.placement): from the document's own cross_model figures;
- what limits it: each GPU's range in buckets, each bucket classed by gpuagent.compare.limits
  from the means of its samples (with work allocated: its busy share in one class, the rest
  starved); a work group weights a bucket by its work's time in it (so its class shares are
  shares of the work's GPU-hours), a GPU group by the bucket's time in the range, `idle` where
  no work's time or sample touched the bucket.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gpuagent.compare import figures
from gpuagent.compare import limits as lim
from gpuagent.compare import where as where_rule
from gpuagent.compare.core import NoData, Range, bucket_seconds, report_document, rfc3339
from gpuagent.compare.placement import placement
from gpuagent.compare.prices import Prices
from gpuagent.compare.promql import PromNames
from gpuagent.compare.sharing import cut_absences, share_gpus
from gpuagent.schema.measurements import GPU_CLOCKS, GPU_MEMORY, GPU_NVLINK, GPU_PCIE, GPU_POWER, GPU_WORK

GPU = ("host", "uuid")
# The clock-event reasons the limits weigh (power: the first two; thermal: the others).
CELL_REASONS = ("sw_power_cap", "hw_power_brake_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown")
SERIES_TAGS = ("host", "uuid", "model", "gpu", "workload", "unit", "work_id", "slurm_job_id", "mig_uuid")
WORK_GROUPS = {
    "model": ("model",),
    "host": ("host",),
    "gpu": ("host", "uuid"),
    "workload": ("workload",),
    "model,workload": ("model", "workload"),
    "job": ("slurm_job_id",),
}
GPU_GROUPINGS = ("model", "host", "gpu")  # every GPU's time counts, idle included
PLAIN_UUID = re.compile(r"[A-Za-z0-9-]+")
MAX_UUID_FILTER = 2_000  # characters of uuid=~"a|b|..." in one energy query (asked 4 times in it)
CELLS_TARGET = 50_000  # GPU × bucket cells of the limits at most (each bucket at least a step)
WORKERS = 4
ABSENT_INTERVALS = 3  # a series absent this many of its mean sampling intervals (or more) was not working

WORK_DEFINITIONS = figures.WORK_DEFINITIONS


@dataclass
class WorkSeries:
    tags: dict[str, str]
    t0_ns: int
    t1_ns: int
    increase: float  # of units_total, resets counted as restarts
    gpus: float
    share: float = 1.0  # gpu_share: a MIG slice's share of its GPU's time and energy
    # Its charge (gpuagent.compare.sharing): (start, end, fraction of the GPU) segments of its span,
    # fraction < 1 where other work ran on the GPU at the same time; None: the whole span, alone.
    charge: list | None = None
    samples: int = 0  # its points in the range
    sm: float | None = None  # mean sm_util_pct of its processes on the GPU (None: NVML gave none)
    # Its span less its absences (cut_absences): [(start, end), ...]; None: the whole span.
    runs: list | None = None

    @property
    def spans(self) -> list:
        return self.runs if self.runs is not None else [(self.t0_ns, self.t1_ns)]

    @property
    def segments(self) -> list:
        return self.charge if self.charge is not None else [(a, b, 1.0) for a, b in self.spans]

    @property
    def gpu_seconds(self) -> float:
        """The GPU time charged: the span, shared with the work beside it, × the slice's share."""
        return sum((b - a) / 1e9 * f for a, b, f in self.segments) * self.share

    @property
    def units(self) -> float:
        return self.increase / self.gpus if self.gpus else 0.0

    @property
    def seconds(self) -> float:
        return (self.t1_ns - self.t0_ns) / 1e9


def choose_bucket(rng: Range, n_gpus: int) -> int:
    span = (rng.end_ns - rng.start_ns) / 1e9
    target = max(6, min(60, CELLS_TARGET // max(1, n_gpus)))
    return bucket_seconds(span, target)


def overlap_hours(rng: Range, t_ns: int, bucket_s: int) -> float:
    lo, hi = max(rng.start_ns, t_ns), min(rng.end_ns, t_ns + bucket_s * 1_000_000_000)
    return max(0, hi - lo) / 3.6e12


def span_buckets(t0_ns: int, t1_ns: int, bucket_s: int):
    """(bucket start, GPU-hours of [t0, t1] inside it) for each bucket the span covers."""
    b = bucket_s * 1_000_000_000
    for t in range(t0_ns // b * b, t1_ns, b):
        hours = (min(t1_ns, t + b) - max(t0_ns, t)) / 3.6e12
        if hours > 0:
            yield t, hours


def work_buckets(t0_ns: int, t1_ns: int, bucket_s: int) -> range:
    """The buckets where work was allocated: those its span crosses and those holding one of its samples
    (the last sample on a bucket's start too: without it a range ending a few seconds later read idle)."""
    b = bucket_s * 1_000_000_000
    return range(t0_ns // b * b, t1_ns // b * b + 1, b)


def edge_windows(rng: Range, bucket_s: int) -> list[tuple[int, int, int]]:
    """(bucket start, from, to) of the parts of the range's first and last buckets outside the range: the
    cells read whole buckets, so a work sample there says the bucket held work (a range starting or
    ending between two samples would else read its edge bucket idle)."""
    b = bucket_s * 1_000_000_000
    first, last = rng.start_ns // b * b, (rng.end_ns - 1) // b * b
    out = [(first, first, rng.start_ns)] if first < rng.start_ns else []
    return out + ([(last, rng.end_ns, last + b)] if rng.end_ns < last + b else [])


def build_work(source, rng: Range, by: str, prices: Prices, where: str | None) -> dict[str, Any]:
    """The work document (groups keyed by `by`, each with work, limits, limits_proxy; cross_model)."""
    series = source.series()
    gtags = WORK_GROUPS[by]
    if not series and by not in GPU_GROUPINGS:
        raise NoData(
            f"no gpu_work points between {rfc3339(rng.start_ns)} and {rfc3339(rng.end_ns)} in {source.label} "
            "(the work collector writes them; `sim fleet --scenario inference` simulates some)"
        )
    gpus_seen = {tuple(s.tags[t] for t in GPU) for s in series if by != "job" or s.tags.get("slurm_job_id")}
    bucket = choose_bucket(rng, max(len(gpus_seen), source.gpu_count_hint()))
    cut_absences(series, source.absence(bucket, series), bucket, SERIES_TAGS, ABSENT_INTERVALS)
    share_gpus(series, GPU)  # before --by job keeps the jobs' work: the GPU is shared with all of it
    if by == "job":
        series = [s for s in series if s.tags.get("slurm_job_id")]
    metered = source.metered()  # the GPUs with an energy counter: the others' energy is null, not 0
    gpus_of: dict[tuple, set] = defaultdict(set)  # a window of the work's charge -> the GPUs over it
    for s in series:
        for a, b, _f in s.segments:
            gpus_of[(a, b)].add(tuple(s.tags[t] for t in GPU))
    windows = sorted(gpus_of)
    with ThreadPoolExecutor(WORKERS) as pool:  # the energy of each span and the limits' cells at once
        cells_done = pool.submit(source.cells, bucket)
        energies = dict(zip(windows, pool.map(lambda w: source.energy(*w, gpus_of[w]), windows), strict=True))
        cells, model_of = cells_done.result()

    groups: dict[tuple, dict[str, Any]] = {}
    per_unit: dict[tuple, dict[str, dict]] = defaultdict(dict)

    def group(key: tuple) -> dict[str, Any]:
        if key not in groups:
            groups[key] = {
                "key": dict(zip(gtags, key, strict=True)),
                "label": " / ".join(k or "-" for k in key),
                "_models": set(),
                "_hosts": set(),
                "_gpus": set(),
                "_cells": {},
                "_slices": {},
            }
        return groups[key]

    for s in series:
        key = tuple(s.tags.get(t, "") for t in gtags)
        g = group(key)
        gpu = tuple(s.tags[t] for t in GPU)
        g["_models"].add(s.tags["model"])
        g["_hosts"].add(s.tags["host"])
        g["_gpus"].add(gpu)
        joules = series_joules(s, energies, metered)
        u = per_unit[key].setdefault(s.tags["unit"], _acc())
        _add(u, s, joules, prices)
        u["per_gpu"][gpu][0] += s.units
        u["per_gpu"][gpu][1] += s.gpu_seconds
        if by not in GPU_GROUPINGS:  # the buckets the work ran in, weighted by its time in each
            here: dict[int, float] = defaultdict(float)  # (a MIG slice by its share, shared work by its part)
            for a, b, f in s.segments:
                for t, hours in span_buckets(a, b, bucket):
                    here[t] += hours * f * s.share
            for t, hours in here.items():  # a piece's units (its several series) count its time once
                k = (gpu, t, s.tags.get("mig_uuid", ""), s.tags.get("work_id", ""), s.tags.get("workload", ""))
                g["_slices"][k] = max(hours, g["_slices"].get(k, 0.0))
    if by in GPU_GROUPINGS:  # every GPU with readings, its idle time included
        for gpu, _t in cells:
            tags = {"host": gpu[0], "uuid": gpu[1], "model": model_of.get(gpu, "")}
            if by == "model" and not tags["model"]:
                continue
            key = tuple(tags[t] for t in gtags)
            g = group(key)
            g["_models"].add(tags["model"])
            g["_hosts"].add(gpu[0])
            g["_gpus"].add(gpu)
        allocated = {
            (tuple(s.tags[t] for t in GPU), t)
            for s in series
            for a, b, _ in s.segments
            for t, _ in span_buckets(a, b, bucket)
        }
        b_ns = bucket * 1_000_000_000  # a bucket holding a work sample is allocated (its last one included)
        allocated |= {(tuple(s.tags[t] for t in GPU), x // b_ns * b_ns) for s in series for x in (s.t0_ns, s.t1_ns)}
        allocated |= source.edge_work(bucket)  # the range's edge buckets: their samples outside the range too
        for gpu, t in cells:
            key = tuple({"host": gpu[0], "uuid": gpu[1], "model": model_of.get(gpu, "")}[x] for x in gtags)
            if key in groups:  # every bucket counts its time in the range; allocated: some work ran in it
                groups[key]["_cells"][(gpu, t)] = ((gpu, t) in allocated, overlap_hours(rng, t, bucket))
    for key, g in groups.items():
        for (gpu, t, *_), hours in g.pop("_slices").items():  # the slices and the pieces sharing a GPU add up
            g["_cells"][(gpu, t)] = g["_cells"].get((gpu, t), 0.0) + hours
        weighted = []
        for (gpu, t), mark in g.pop("_cells").items():
            cell = cells.get((gpu, t))
            if cell is None:
                continue
            allocated, hours = mark if isinstance(mark, tuple) else (True, mark)
            cell = lim.Cell(**{**cell.__dict__, "allocated": allocated})
            weighted.append((cell, hours))
        g[figures.LIMITS], g[figures.LIMITS_PROXY] = lim.shares(weighted)
        g[figures.LIMITS_GPU_HOURS] = sum(w for _, w in weighted)
        g["models"] = sorted(g.pop("_models"))
        g["hosts"] = sorted(g.pop("_hosts"))
        g["gpus"] = len(g.pop("_gpus"))
        g[figures.WORK] = {unit: _unit_figures(u, prices) for unit, u in sorted(per_unit.get(key, {}).items())}
        if by == "gpu":
            g["label"] = f"{key[0]}/{key[1]}"
    source_doc = {**source.describe(), "limits_bucket_s": bucket}
    doc = report_document(rng, by, where, source_doc, WORK_DEFINITIONS, groups)
    doc["prices"] = prices.as_dict() if prices.any else None
    doc[figures.UNPRICED] = unpriced_models(series, prices) if prices.any else None
    doc[figures.CROSS_MODEL] = cross_model(series, energies, prices, metered)
    if by in ("workload", "model,workload"):
        doc[figures.PLACEMENT] = placement(doc)
    return doc


def series_joules(s: WorkSeries, energies: dict, metered: set) -> float | None:
    """The GPU's energy over the series' charge, × its fraction and MIG share; None: no energy counter."""
    gpu = tuple(s.tags[t] for t in GPU)
    if gpu not in metered:
        return None
    return sum(energies[(a, b)].get(gpu, 0.0) * f for a, b, f in s.segments) * s.share


def series_cost(prices: Prices, model: str, gpu_hours: float, joules: float | None) -> float | None:
    """$ of a series; None where its model has no GPU-hour price (never priced at energy only), or
    where the kWh is priced and its GPU has no energy counter."""
    if prices.gpu_hour_price(model) is None or (joules is None and prices.kwh is not None):
        return None
    return prices.cost(model, gpu_hours, (joules or 0.0) / 3.6e6)


def _acc() -> dict:
    return {"units": 0.0, "seconds": 0.0, "joules": 0.0, "metered": True, "cost": 0.0, "priced": True,
            "per_gpu": defaultdict(lambda: [0.0, 0.0])}  # fmt: skip


def _add(u: dict, s: WorkSeries, joules: float | None, prices: Prices) -> None:
    u["units"] += s.units
    u["seconds"] += s.gpu_seconds
    if joules is None:
        u["metered"] = False
    else:
        u["joules"] += joules
    cost = series_cost(prices, s.tags["model"], s.gpu_seconds / 3600, joules)
    if cost is None:
        u["priced"] = False
    else:
        u["cost"] += cost


def unpriced_models(series: list[WorkSeries], prices: Prices) -> list[str]:
    """The work's models without a GPU-hour price: their costs are null (and units per dollar)."""
    return sorted({s.tags["model"] for s in series if prices.gpu_hour_price(s.tags["model"]) is None})


def _unit_figures(u: dict, prices: Prices) -> dict[str, Any]:
    rates = [a / (b / 3600) for a, b in u["per_gpu"].values() if b > 0]
    priced = u["priced"] and prices.any
    joules = u["joules"] if u["metered"] else None
    return figures.unit_figures(u["units"], u["seconds"], joules, u["cost"] if priced else None, rates)


def cross_model(series: list[WorkSeries], energies: dict, prices: Prices, metered: set) -> list[dict[str, Any]]:
    """Per (workload, unit) on two or more models: each model's throughput per GPU, per kW and per $."""
    acc: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for s in series:
        gpu = tuple(s.tags[t] for t in GPU)
        m = acc[(s.tags["workload"], s.tags["unit"])].setdefault(s.tags["model"], _acc())
        _add(m, s, series_joules(s, energies, metered), prices)
        m["per_gpu"][gpu][0] += s.units
        m["per_gpu"][gpu][1] += s.gpu_seconds
    out = []
    for (workload, unit), models in sorted(acc.items()):
        if len(models) < 2:
            continue
        rows = []
        for model, m in sorted(models.items()):
            rates = [a / b for a, b in m["per_gpu"].values() if b > 0]
            rows.append(
                {
                    "model": model,
                    "gpus": len(m["per_gpu"]),
                    figures.WORK_GPU_HOURS: m["seconds"] / 3600,
                    figures.UNITS: m["units"],
                    "units_per_s_per_gpu": m["units"] / m["seconds"] if m["seconds"] > 0 else None,
                    # units/s per kW of draw = units / kJ: the same figure, per joule scaled
                    "units_per_s_per_kw": 1000 * m["units"] / m["joules"] if m["metered"] and m["joules"] > 0 else None,
                    "units_per_dollar": m["units"] / m["cost"]
                    if m["priced"] and prices.any and m["cost"] > 0
                    else None,
                    "spread_units_per_s_per_gpu": {"min": min(rates), "max": max(rates)} if rates else None,
                }
            )
        for figure in ("units_per_s_per_gpu", "units_per_s_per_kw", "units_per_dollar"):
            best = max((r[figure] for r in rows if r[figure] is not None), default=None)
            for r in rows:
                r[f"{figure}_best_pct"] = 100 * r[figure] / best if best and r[figure] is not None else None
        out.append({"workload": workload, "unit": unit, "models": rows})
    return out


def _share(v) -> float:
    """gpu_share as read: a fraction in (0, 1]; absent (a whole GPU) or out of range counts 1."""
    f = _finite(v)
    return f if f is not None and 0 < f <= 1 else 1.0


def _finite(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


# -- InfluxQL ------------------------------------------------------------------------------------
class InfluxWork:
    def __init__(self, client, rng: Range, where: str | None, gpu_where: bool):
        where = where_rule.influxql(where)  # one condition (gpuagent.compare.where)
        self.client, self.range, self.where = client, rng, (where or "").strip()
        self.gpu_where = gpu_where  # --where applies to the GPU readings too (a GPU grouping)
        self.label = client.conn.label
        self._gpu_count = 0
        self._metered: set[tuple] = set()

    def describe(self) -> dict:
        return {"url": self.client.conn.url, "database": self.client.conn.database}

    def gpu_count_hint(self) -> int:
        return self._gpu_count

    def metered(self) -> set[tuple]:
        """The GPUs (host, uuid) with an energy_j sample in the range (known once series() ran)."""
        return self._metered

    def series_exist(self) -> bool:
        return bool(self.client.rows(f'SELECT FIRST("units_total") FROM "{GPU_WORK}" WHERE {self._where_clause()}'))

    def _where_clause(self, work: bool = True) -> str:
        parts = [self.range.clause()]
        if self.where and (work or self.gpu_where):
            parts.append(f"({self.where})")
        return " AND ".join(parts)

    def series(self) -> list[WorkSeries]:
        by = ", ".join(f'"{t}"' for t in SERIES_TAGS)
        base = f'FROM "{GPU_WORK}" WHERE {self._where_clause()} GROUP BY {by}'
        diffs = f'SELECT NON_NEGATIVE_DIFFERENCE("units_total") AS d {base}'
        steps = f'SELECT DIFFERENCE("units_total") AS d {base}'
        queries = (
            f'SELECT FIRST("units_total") {base}',
            f'SELECT LAST("units_total") {base}',
            f'SELECT LAST("gpus") {base}',
            f'SELECT LAST("gpu_share") {base}',
            f"SELECT SUM(d) FROM ({diffs}) WHERE {self.range.clause()} GROUP BY {by}",
            f"SELECT d FROM ({steps}) WHERE {self.range.clause()} AND d < 0 GROUP BY {by}",
            # The GPUs, and which have an energy counter (two selectors: one scan, the time unused).
            f'SELECT LAST("power_w") AS p, LAST("energy_j") AS e FROM "{GPU_POWER}" WHERE {self._where_clause(work=False)} '
            'GROUP BY "host", "uuid"',
            f'SELECT COUNT("units_total") AS n, MEAN("sm_util_pct") AS sm {base}',
        )
        with ThreadPoolExecutor(WORKERS) as pool:
            first, last, gpus, shares, sums, drops, count, samples = pool.map(self.client.rows, queries)
        self._gpu_count = len(count)
        self._metered = {(r.get("host") or "", r.get("uuid") or "") for r in count if r.get("e") is not None}
        key = lambda r: tuple(r.get(t) or "" for t in SERIES_TAGS)  # noqa: E731
        last_t = {key(r): r["time"] for r in last}
        n_gpus = {key(r): r["last"] for r in gpus}
        share = {key(r): r["last"] for r in shares}
        total = {key(r): r["sum"] or 0.0 for r in sums}
        restarts = self._restart_values(drops)
        n = {key(r): r.get("n") or 0 for r in samples}
        sm_mean = {key(r): _finite(r.get("sm")) for r in samples}
        out = []
        for r in first:
            k = key(r)
            out.append(
                WorkSeries(
                    dict(zip(SERIES_TAGS, k, strict=True)),
                    r["time"],
                    last_t.get(k, r["time"]),
                    total.get(k, 0.0) + restarts.get(k, 0.0),
                    float(n_gpus.get(k) or 1),
                    _share(share.get(k)),
                    samples=int(n.get(k, 0)),
                    sm=sm_mean.get(k),
                )
            )
        return out

    def absence(self, bucket: int, series: list[WorkSeries]) -> dict[tuple, set]:
        """Per work series (SERIES_TAGS), the starts of the buckets (epoch-aligned) in the range holding no
        sample of it: only those cross the wire (a series sampled all along answers nothing)."""
        if not series:
            return {}
        by = ", ".join(f'"{t}"' for t in SERIES_TAGS)
        inner = f'SELECT COUNT("units_total") AS c FROM "{GPU_WORK}" WHERE {self._where_clause()} GROUP BY {by}, time({bucket}s) fill(0)'
        out: dict[tuple, set] = defaultdict(set)
        for r in self.client.rows(f"SELECT c FROM ({inner}) WHERE {self.range.clause()} AND c = 0 GROUP BY {by}"):
            out[tuple(r.get(t) or "" for t in SERIES_TAGS)].add(r["time"])
        return out

    def _restart_values(self, drops: list[dict]) -> dict[tuple, float]:
        """Per series, the sum of the counter's values just after each restart (few: read one by one)."""
        if not drops:
            return {}
        out: dict[tuple, float] = defaultdict(float)
        times = sorted({r["time"] for r in drops})
        wanted = {(tuple(r.get(t) or "" for t in SERIES_TAGS), r["time"]) for r in drops}
        by = ", ".join(f'"{t}"' for t in SERIES_TAGS)
        for i in range(0, len(times), 50):
            at = " OR ".join(f"time = {t}" for t in times[i : i + 50])
            q = f'SELECT "units_total" FROM "{GPU_WORK}" WHERE {self._where_clause()} AND ({at}) GROUP BY {by}'
            for r in self.client.rows(q):
                k = tuple(r.get(t) or "" for t in SERIES_TAGS)
                if (k, r["time"]) in wanted:
                    out[k] += r["units_total"]
        return out

    def energy(self, t0_ns: int, t1_ns: int, gpus=None) -> dict[tuple, float]:
        window = f"time >= {t0_ns} AND time <= {t1_ns}"
        if gpus and len(gpus) <= 48 and all(PLAIN_UUID.fullmatch(u) for _, u in gpus):
            # A span few GPUs worked over (a host's work started on its own): read only theirs.
            window += " AND (" + " OR ".join(f"\"uuid\" = '{u}'" for u in sorted({u for _, u in gpus})) + ")"
        inner = (
            f'SELECT NON_NEGATIVE_DIFFERENCE("energy_j") AS d FROM "{GPU_POWER}" WHERE {window} GROUP BY "host", "uuid"'
        )
        rows = self.client.rows(f'SELECT SUM(d) FROM ({inner}) WHERE {window} GROUP BY "host", "uuid"')
        return {(r["host"], r["uuid"]): r["sum"] or 0.0 for r in rows}

    def _whole_buckets(self, bucket: int, work: bool) -> str:
        # Whole buckets, the edge ones too (as a PromQL range query sees them): a bucket's class
        # is read from all its samples, and weighted by its GPU-hours inside the range.
        b = bucket * 1_000_000_000
        lo, hi = self.range.start_ns // b * b, -(-self.range.end_ns // b) * b
        parts = [f"time >= {lo} AND time < {hi}"]
        if self.where and (work or self.gpu_where):
            parts.append(f"({self.where})")
        return " AND ".join(parts)

    def edge_work(self, bucket: int) -> set[tuple]:
        """(GPU, bucket start) of the range's edge buckets with a gpu_work sample outside the range."""
        out = set()
        for at, lo, hi in edge_windows(self.range, bucket):
            w = f"time >= {lo} AND time < {hi}" + (f" AND ({self.where})" if self.where else "")
            for r in self.client.rows(
                f'SELECT COUNT("units_total") FROM "{GPU_WORK}" WHERE {w} GROUP BY "host", "uuid"'
            ):
                out.add(((r.get("host") or "", r.get("uuid") or ""), at))
        return out

    def cells(self, bucket: int) -> tuple[dict, dict]:
        return self._cells_from(self._cell_rows(bucket))

    def _cell_rows(self, bucket: int) -> dict[str, list[dict]]:
        """Per part of the cells (mem, power, clocks, pcie, nvlink, model, each CELL_REASONS), its rows per GPU
        and bucket."""
        w = self._whole_buckets(bucket, work=False)
        tail = f'GROUP BY "host", "uuid", time({bucket}s) fill(none)'
        q = {
            "mem": f'SELECT MEAN("gpu_util_pct") AS util, MEAN("memory_util_pct") AS mem_busy, '
            f'MEAN("dram_bw_util_pct") AS dram_bw, MEAN("sm_active_pct") AS sm_active, '
            f'MEAN("tensor_active_pct") AS tensor_active, MEAN("sm_occupancy_pct") AS occupancy '
            f'FROM "{GPU_MEMORY}" WHERE {w} {tail}',
            "power": f'SELECT MEAN("power_w") AS power_w, MAX("enforced_power_limit_w") AS power_limit_w '
            f'FROM "{GPU_POWER}" WHERE {w} {tail}',
            "clocks": f'SELECT MEAN("sm_clock_mhz") AS sm_clock, MAX("max_sm_clock_mhz") AS max_sm_clock, '
            f'COUNT("sm_clock_mhz") AS n FROM "{GPU_CLOCKS}" WHERE {w} {tail}',
            "pcie": f'SELECT MEAN("tx_bytes_per_s") AS tx, MEAN("rx_bytes_per_s") AS rx, MAX("link_gen") AS link_gen, '
            f'MAX("link_width") AS link_width FROM "{GPU_PCIE}" WHERE {w} {tail}',
            "nvlink": f'SELECT MEAN("total_tx_bytes_per_sec") AS tx, MEAN("total_rx_bytes_per_sec") AS rx, '
            f'MAX("links_active") AS links, MAX("version") AS version FROM "{GPU_NVLINK}" WHERE {w} {tail}',
            "model": f'SELECT LAST("power_w") FROM "{GPU_POWER}" WHERE {w} GROUP BY "host", "uuid", "model"',
        }
        for reason in CELL_REASONS:
            q[reason] = f'SELECT COUNT("sm_clock_mhz") AS n FROM "{GPU_CLOCKS}" WHERE {w} AND "{reason}" = true {tail}'
        names = list(q)
        with ThreadPoolExecutor(WORKERS) as pool:
            return dict(zip(names, pool.map(self.client.rows, (q[n] for n in names)), strict=True))

    @staticmethod
    def _cells_from(answers: dict[str, list[dict]]) -> tuple[dict, dict]:
        model_of = {(r["host"], r["uuid"]): r.get("model", "") for r in answers["model"]}
        cells: dict[tuple, lim.Cell] = {}

        def cell(r) -> lim.Cell:
            return cells.setdefault(((r["host"], r["uuid"]), r["time"]), lim.Cell())

        for r in answers["mem"]:
            c = cell(r)
            for name in ("util", "mem_busy", "dram_bw", "sm_active", "tensor_active", "occupancy"):
                setattr(c, name, _finite(r.get(name)))
        for r in answers["power"]:
            power, limit = _finite(r.get("power_w")), _finite(r.get("power_limit_w"))
            cell(r).power_ratio = power / limit if power is not None and limit else None
        samples = {}
        for r in answers["clocks"]:
            sm, top = _finite(r.get("sm_clock")), _finite(r.get("max_sm_clock"))
            cell(r).clock_ratio = sm / top if sm is not None and top else None
            samples[((r["host"], r["uuid"]), r["time"])] = r.get("n") or 0
        for r in answers["pcie"]:
            tx, rx = _finite(r.get("tx")), _finite(r.get("rx"))
            gen, width = _finite(r.get("link_gen")), _finite(r.get("link_width"))
            if tx is not None and rx is not None and gen and width:
                cell(r).pcie_ratio = (tx + rx) / (2 * lim.pcie_lane_gbps(gen) * 1e9 * width)
        for r in answers.get("nvlink", ()):  # the per-GPU summary's totals, the per-link points' version
            tx, rx = _finite(r.get("tx")), _finite(r.get("rx"))
            links, version = _finite(r.get("links")), _finite(r.get("version"))
            per_link = lim.nvlink_link_gbps(version) if version else None
            if tx is not None and rx is not None and links and per_link:
                cell(r).nvlink_ratio = (tx + rx) / (2 * per_link * 1e9 * links)
        reason_pct = {}
        for reason in CELL_REASONS:
            for r in answers[reason]:
                k = ((r["host"], r["uuid"]), r["time"])
                if samples.get(k):
                    reason_pct[(k, reason)] = 100.0 * (r.get("n") or 0) / samples[k]
        for k, c in cells.items():
            if k in samples:
                c.power_reason_pct = max(
                    reason_pct.get((k, "sw_power_cap"), 0.0), reason_pct.get((k, "hw_power_brake_slowdown"), 0.0)
                )
                c.thermal_reason_pct = max(
                    reason_pct.get((k, "sw_thermal_slowdown"), 0.0), reason_pct.get((k, "hw_thermal_slowdown"), 0.0)
                )
        return cells, model_of


# -- PromQL --------------------------------------------------------------------------------------
class PromWork:
    """The same rows over the Prometheus API; names and --where as gpuagent.compare.promql_report."""

    def __init__(self, client, rng: Range, where: str | None, gpu_where: bool):
        self.names = PromNames(client, rng, where)  # the report's names, matchers and window
        self.client, self.range = client, rng
        self.gpu_where = gpu_where
        self.label = client.conn.label
        self._gpu_count = 0
        self._model_of: dict[tuple, str] = {}
        self._metered: set[tuple] = set()

    def describe(self) -> dict:
        return {"url": self.client.conn.url, "database": f"PromQL ({self.client.engine}, {self.names.scheme} names)"}

    def gpu_count_hint(self) -> int:
        return self._gpu_count

    def metered(self) -> set[tuple]:
        """The GPUs (host, uuid) with an energy_j sample in the range (known once series() ran)."""
        return self._metered

    def _sel(self, measurement: str, field: str, work: bool = True) -> str:
        n = self.names
        name, _ = n.name(measurement, field)
        return f"{name}{{{n.where}}}" if n.where and (work or self.gpu_where) else name

    def _scaled(self, measurement: str, field: str, expr: str) -> str:
        scale = self.names.name(measurement, field)[1]
        return expr if scale == 1.0 else f"({expr}) / {scale!r}"

    def _ready(self) -> None:
        if not self.client.engine:
            self.client.detect_engine(self.names.at)
        self.names.detect_scheme()

    def series_exist(self) -> bool:
        self._ready()
        n = self.names
        found = self.client.query(
            f"count(count_over_time({self._sel(GPU_WORK, 'units_total')}[{n.window}]))",
            n.at,
            "work: any gpu_work series",
        )
        return bool(found)

    def _increase(self, r: str) -> str:
        """A counter's growth over a range selector `r`, a restart counted as the new value."""
        if self.client.engine == "victoriametrics":  # the steps inside the window only, no extrapolation
            return f"increase_prometheus({r})"
        # Prometheus: last - first where the counter did not restart; increase() (extrapolated) where it did
        return f"(max_over_time({r}) - min_over_time({r})) and (resets({r}) == 0) or increase({r})"

    def _sample_time(self, fn: str, sel: str, window: str) -> str:
        """The time of each series' first or last (`fn`) sample in the window."""
        if self.client.engine == "victoriametrics":
            return f"t{fn}_over_time({sel}[{window}])"
        span_ms = (self.range.end_ns - self.range.start_ns) // 1_000_000
        agg = "max" if fn == "last" else "min"
        return f"{agg}_over_time(timestamp({sel})[{window}:{max(1, span_ms // 1000)}ms])"

    def series(self) -> list[WorkSeries]:
        self._ready()
        n = self.names
        u, g = self._sel(GPU_WORK, "units_total"), self._sel(GPU_WORK, "gpus")
        sh = self._sel(GPU_WORK, "gpu_share")
        r = f"{u}[{n.window}]"
        by = ", ".join(SERIES_TAGS)
        # A counter that restarted: MetricsQL's increase_prometheus() adds up the steps inside the window
        # only (its increase() starts from the sample before it); Prometheus' increase() extrapolates.
        inc = f"sum by ({by}) ({self._increase(r)})"
        calls = [
            (inc, n.at, "work: the increase of each work counter"),
            (f"min by ({by}) ({self._sample_time('first', u, n.window)})", n.at, "work: first samples"),
            (f"max by ({by}) ({self._sample_time('last', u, n.window)})", n.at, "work: last samples"),
            (f"max by ({by}) (last_over_time({g}[{n.window}]))", n.at, "work: GPUs per piece of work"),
            (f"max by ({by}) (last_over_time({sh}[{n.window}]))", n.at, "work: MIG slices' shares of their GPU"),
            (
                f"group by (host, uuid, model) (count_over_time({self._sel(GPU_POWER, 'power_w', False)}[{n.window}]))",
                n.at,
                "work: the GPUs and their models",
            ),
            (
                f"group by (host, uuid) (count_over_time({self._sel(GPU_POWER, 'energy_j', False)}[{n.window}]))",
                n.at,
                "work: the GPUs with an energy counter",
            ),
            (f"max by ({by}) (count_over_time({r}))", n.at, "work: the samples of each work series"),
            (
                self._scaled(
                    GPU_WORK,
                    "sm_util_pct",
                    f"max by ({by}) (avg_over_time({self._sel(GPU_WORK, 'sm_util_pct')}[{n.window}]))",
                ),
                n.at,
                "work: the SM share of each work series",
            ),
        ]
        inc_rows, first, last, gpus, shares, models, metered, samples, sm = self.client.many(calls)
        self._metered = {(r["metric"].get("host", ""), r["metric"].get("uuid", "")) for r in metered}
        self._model_of = {
            (r["metric"].get("host", ""), r["metric"].get("uuid", "")): r["metric"].get("model", "") for r in models
        }
        self._gpu_count = len(self._model_of)
        key = lambda row: tuple(row["metric"].get(t, "") for t in SERIES_TAGS)  # noqa: E731
        val = lambda row: _finite(row["value"][1])  # noqa: E731
        incs, lasts, ngpus, share, count, sm_mean = (
            {key(x): val(x) for x in rows} for rows in (inc_rows, last, gpus, shares, samples, sm)
        )
        out = []
        for x in first:
            k = key(x)
            t0 = val(x)
            if t0 is None:
                continue
            t1 = lasts.get(k)
            if t1 is None:
                t1 = t0
            out.append(
                WorkSeries(
                    dict(zip(SERIES_TAGS, k, strict=True)),
                    int(round(t0 * 1000)) * 1_000_000,
                    int(round(t1 * 1000)) * 1_000_000,
                    incs.get(k) or 0.0,
                    ngpus.get(k) or 1.0,
                    _share(share.get(k)),
                    samples=int(count.get(k) or 0),
                    sm=sm_mean.get(k),
                )
            )
        return out

    def absence(self, bucket: int, series: list[WorkSeries]) -> dict[tuple, set]:
        """As InfluxWork's: each bucket [t, t + bucket) read at its end - 1 ms (see _range); a bucket with no
        sample after the series' first counts 0 (the `or`), and only the zeros cross the wire."""
        if not series:
            return {}
        by = ", ".join(SERIES_TAGS)
        u = self._sel(GPU_WORK, "units_total")
        span = f"{(self.range.end_ns - self.range.start_ns) // 1_000_000 + bucket * 1000}ms"
        expr = f"max by ({by}) ((count_over_time({u}[{bucket}s]) or on ({by}) (0 * last_over_time({u}[{span}]))) == 0)"
        first = self.range.start_ns / 1e9 // bucket * bucket
        last = (self.range.end_ns / 1e9 - 0.001) // bucket * bucket
        rows = self.client.query_range(expr, first + bucket - 0.001, last + bucket - 0.001, bucket, "work: absences")
        out: dict[tuple, set] = defaultdict(set)
        for row in rows:
            k = tuple(row["metric"].get(t, "") for t in SERIES_TAGS)
            for t, _v in row["values"]:
                out[k].add(int(round((float(t) + 0.001 - bucket) * 1e9)))
        return out

    def energy(self, t0_ns: int, t1_ns: int, gpus=None) -> dict[tuple, float]:
        # [w] at t1 covers (t1 - w, t1]: 1 ms more than the span takes in the sample at t0.
        w = f"{(t1_ns - t0_ns) // 1_000_000 + 1}ms"
        sel = self._sel(GPU_POWER, "energy_j", False)
        plain = gpus and all(PLAIN_UUID.fullmatch(u) for _, u in gpus)  # no regex or string escape needed
        uuids = "|".join(sorted({u for _, u in gpus})) if plain and len(gpus) < self._gpu_count else ""
        # Only the GPUs that worked over this span, while the list keeps the query short (VictoriaMetrics
        # refuses queries over 16 KiB by default); else every GPU's, and the others are not read.
        if uuids and len(uuids) <= MAX_UUID_FILTER:
            sel = sel[:-1] + f',uuid=~"{uuids}"}}' if sel.endswith("}") else f'{sel}{{uuid=~"{uuids}"}}'
        e = f"{sel}[{w}]"
        expr = self._scaled(GPU_POWER, "energy_j", f"sum by (host, uuid) ({self._increase(e)})")
        rows = self.client.query(expr, t1_ns / 1e9, "work: energy of the GPUs over the work's time")
        return {(r["metric"].get("host", ""), r["metric"].get("uuid", "")): _finite(r["value"][1]) or 0.0 for r in rows}

    def _range(self, expr: str, bucket: int, purpose: str) -> dict[tuple, float]:
        first = self.range.start_ns / 1e9 // bucket * bucket
        last = (self.range.end_ns / 1e9 - 0.001) // bucket * bucket
        rows = self.client.query_range(expr, first + bucket - 0.001, last + bucket - 0.001, bucket, purpose)
        out = {}
        for s in rows:
            m = s["metric"]
            for t, v in s["values"]:
                value = _finite(v)
                if value is not None:
                    t_ns = int(round((float(t) + 0.001 - bucket) * 1e9))
                    out[(m.get("gpuagent_field", ""), (m.get("host", ""), m.get("uuid", "")), t_ns)] = value
        return out

    def edge_work(self, bucket: int) -> set[tuple]:
        """As InfluxWork's: [w] at `hi` - 1 ms covers [lo, hi) at the millisecond resolution of both engines."""
        out = set()
        sel = self._sel(GPU_WORK, "units_total")
        for at, lo, hi in edge_windows(self.range, bucket):
            if hi - lo < 1_000_000:
                continue  # under a millisecond: no sample of either engine's resolution
            expr = f"group by (host, uuid) (count_over_time({sel}[{(hi - lo) // 1_000_000}ms]))"
            for r in self.client.query(expr, (hi - 1_000_000) / 1e9, "work: samples in the range's edge buckets"):
                out.add(((r["metric"].get("host", ""), r["metric"].get("uuid", "")), at))
        return out

    def cells(self, bucket: int) -> tuple[dict, dict]:
        """The rules' figures per GPU and bucket, ratios computed by the server: twelve numbers per
        GPU and bucket cross the wire, in four range queries asked at once."""
        r = f"[{bucket}s]"

        def avg(measurement: str, field: str, fn: str = "avg_over_time") -> str:
            return self._scaled(
                measurement, field, f"max by (host, uuid) ({fn}({self._sel(measurement, field, False)}{r}))"
            )

        def either(measurement: str, a: str, b: str) -> str:  # the larger share (a label keeps both in the union)
            return (
                f'max by (host, uuid) (label_replace({avg(measurement, a)}, "r", "a", "", "") or '
                f'label_replace({avg(measurement, b)}, "r", "b", "", ""))'
            )

        def tag(name: str, expr: str) -> str:
            return f'label_replace({expr}, "gpuagent_field", "{name}", "", "")'

        gen = avg(GPU_PCIE, "link_gen", "max_over_time")
        # 0.25 × 2^(gen-1) GB/s per lane and direction for Gen 1-2, 0.985 × 2^(gen-3) from Gen 3 (limits.py)
        lane = (
            f"(0.25 * 2 ^ ({gen} - 1) * ({gen} < bool 3) + {8 * 128 / 130 / 8!r} * 2 ^ ({gen} - 3) * ({gen} >= bool 3))"
        )
        pcie = (
            f"({avg(GPU_PCIE, 'tx_bytes_per_s')} + {avg(GPU_PCIE, 'rx_bytes_per_s')}) / "
            f"(2 * 1e9 * {lane} * {avg(GPU_PCIE, 'link_width', 'max_over_time')})"
        )
        version = avg(GPU_NVLINK, "version", "max_over_time")
        # GB/s per link and direction by NVML's version enum (limits.NVLINK_GBPS; none known: 0, an infinite ratio, dropped)
        per_link = " + ".join(f"{gbps!r} * ({version} == bool {v})" for v, gbps in sorted(lim.NVLINK_GBPS.items()))
        nvlink = (
            f"({avg(GPU_NVLINK, 'total_tx_bytes_per_sec')} + {avg(GPU_NVLINK, 'total_rx_bytes_per_sec')}) / "
            f"(2 * 1e9 * ({per_link}) * {avg(GPU_NVLINK, 'links_active', 'max_over_time')})"
        )
        parts = [
            [
                tag("util", avg(GPU_MEMORY, "gpu_util_pct")),
                tag("mem_busy", avg(GPU_MEMORY, "memory_util_pct")),
                tag("dram_bw", avg(GPU_MEMORY, "dram_bw_util_pct")),
                tag("sm_active", avg(GPU_MEMORY, "sm_active_pct")),
                tag("tensor_active", avg(GPU_MEMORY, "tensor_active_pct")),
                tag("occupancy", avg(GPU_MEMORY, "sm_occupancy_pct")),
            ],
            [
                tag(
                    "power_ratio",
                    f"{avg(GPU_POWER, 'power_w')} / {avg(GPU_POWER, 'enforced_power_limit_w', 'max_over_time')}",
                ),
                tag(
                    "clock_ratio",
                    f"{avg(GPU_CLOCKS, 'sm_clock_mhz')} / {avg(GPU_CLOCKS, 'max_sm_clock_mhz', 'max_over_time')}",
                ),
            ],
            [
                tag("power_reason", either(GPU_CLOCKS, "sw_power_cap", "hw_power_brake_slowdown")),
                tag("thermal_reason", either(GPU_CLOCKS, "sw_thermal_slowdown", "hw_thermal_slowdown")),
            ],
            [tag("pcie_ratio", pcie), tag("nvlink_ratio", nvlink)],
        ]
        with ThreadPoolExecutor(WORKERS) as pool:
            answers = list(pool.map(lambda p: self._range(" or ".join(p), bucket, "work: what limits it"), parts))
        model_of = self._model_of
        values: dict[tuple, dict[str, float]] = defaultdict(dict)
        for a in answers:
            for (name, gpu, t), v in a.items():
                values[(gpu, t)][name] = v
        cells = {}
        for k, fields in values.items():
            reasons = "clock_ratio" in fields  # the booleans come with the clocks
            cells[k] = lim.Cell(
                util=fields.get("util"),
                mem_busy=fields.get("mem_busy"),
                dram_bw=fields.get("dram_bw"),
                sm_active=fields.get("sm_active"),
                tensor_active=fields.get("tensor_active"),
                occupancy=fields.get("occupancy"),
                power_ratio=fields.get("power_ratio"),
                clock_ratio=fields.get("clock_ratio"),
                power_reason_pct=100 * fields.get("power_reason", 0.0) if reasons else None,
                thermal_reason_pct=100 * fields.get("thermal_reason", 0.0) if reasons else None,
                pcie_ratio=fields.get("pcie_ratio"),
                nvlink_ratio=fields.get("nvlink_ratio"),
            )
        return cells, model_of


def work_section(source, rng: Range, by: str, prices: Prices, where: str | None, shadow: dict) -> None:
    """`work`, `limits` and `limits_proxy` for the groups of the GPU report (`--by model|host|gpu`), in
    `shadow` (group key -> fields); none of them when the range holds no gpu_work point (without a
    work source, idle cannot be told from unknown)."""
    if not source.series_exist():
        for fields in shadow.values():
            fields.update({figures.WORK: {}, figures.LIMITS: None, figures.LIMITS_PROXY: None})
        return
    doc = build_work(source, rng, by, prices, where)
    found = {tuple(g["key"][t] for t in WORK_GROUPS[by]): g for g in doc["groups"]}
    for gkey, fields in shadow.items():
        g = found.get(gkey)
        fields.update(
            {
                figures.WORK: g[figures.WORK] if g else {},
                figures.LIMITS: g[figures.LIMITS] if g else None,
                figures.LIMITS_PROXY: g[figures.LIMITS_PROXY] if g else None,
            }
        )
