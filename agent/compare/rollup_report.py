"""The compare report (`--by model|host|gpu`) from rollups (gpuagent.compare.rollups) where they cover it.

The range is cut into pieces: the whole buckets of the coarsest level that fit in it (and in that
level's coverage), the edges from the next finer level, and what is left from raw points. Every
figure is asked piece by piece with the aggregate that fits the piece (SUM("power_w") of raw points,
SUM("power_sum") of rollup points) and the pieces merged (sums add, max/min select), so means,
counts and sums equal those of raw points. The energy counter: per piece its first and last value
and its increase inside; across pieces the non-negative steps between them. A GPU's first and last
sample times, where they fall in a rollup bucket, are looked for in the finer levels down to raw
(one bucket's worth). The 95th percentile comes from the power histograms (approximate, within half
a bin: source.approximate) past p95_raw_max_samples, else from raw points; the L2 probe and the work
figures are computed from raw points, as the raw report does (source.from_raw lists them; health too
where a verdict the rollups do not count was written).
"""

from __future__ import annotations

import math
import re
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpuagent.compare import figures
from gpuagent.compare.core import (
    GPU_TAGS,
    WORKERS,
    Range,
    add_p2p,
    bucket_seconds,
    gpu_key,
    rfc3339,
)
from gpuagent.compare.health import VERDICTS, add_hours, bucket_for, health_hours
from gpuagent.compare.query import NoAnswer, quote_ident
from gpuagent.compare.report import Report
from gpuagent.compare.rollups import (
    BY_HOST,
    BY_NAME,
    EVERY,
    HIST_MEASUREMENT,
    HIST_TOP_W,
    HIST_W,
    HISTOGRAM,
    LEVELS,
    POWER_BY_HOST,
    REASONS,
    ROLLUPS,
    Level,
    coverage,
    hist_field,
)
from gpuagent.compare.work import work_section
from gpuagent.errors import AgentError
from gpuagent.schema.measurements import GPU_CLOCKS, GPU_HEALTH, GPU_MEMORY, GPU_MIG, GPU_POWER, GPU_VGPU

FROM_RAW = (figures.POWER_P95, figures.L2_PROBE, figures.WORK)

# Pieces with few points per series are read as points (no GROUP BY) and aggregated here: InfluxDB
# 1.6 pays about 45 us per group and aggregate (8,000 GPUs x 20 fields: 5.7 s) but about 10 us per
# point it returns (8,000 GPUs x one 1h bucket, every field: 0.3 s; bench/RESULTS.md). So raw pieces
# up to EDGE_NS (the edges inside a minute) and rollup pieces of up to points_max_buckets buckets.
EDGE_NS = 120 * 10**9
_TAIL = re.compile(r"time\((\d+)s\)")
_NAMES = re.compile(r'"?([A-Za-z_]\w*)"?\s*(?:=~|!~|!=|<>|=|<|>)')  # the keys a --where compares
_AGG = re.compile(r'^(SUM|COUNT|MAX|MIN|FIRST|LAST)\("(\w+)"\)$')
_ONE = re.compile(r'^COUNT\("(\w+)"\) / COUNT\("\1"\)$')  # 1 where the bucket has a value
_TERM = re.compile(r"""^"(\w+)" (=|>=|<) (true|false|'[^']*'|-?\d+(?:\.\d+)?)$""")


def raw_aggregate(field) -> tuple[str, str] | None:
    """(operation, raw field) of a rollup field's aggregate of raw points, as computed here; None if
    it is not one this module evaluates."""
    if m := _AGG.match(field.raw):
        return m[1], m[2]
    if m := _ONE.match(field.raw):
        return "ONE", m[1]
    return None


def raw_condition(where: str):
    """A rollup's condition on raw points ('"f" = true AND ...') as a predicate over a point's row;
    None if it is not one this module evaluates."""
    terms = []
    for part in where.split(" AND ") if where else ():
        m = _TERM.match(part.strip())
        if not m:
            return None
        text = m[3]
        value = text == "true" if text in ("true", "false") else text[1:-1] if text[0] == "'" else float(text)
        terms.append((m[1], m[2], value))

    def keep(row: dict) -> bool:
        for name, op, value in terms:
            v = row.get(name)
            if v is None or isinstance(v, str) != isinstance(value, str):
                return False
            if not (v == value if op == "=" else v >= value if op == ">=" else v < value):
                return False
        return True

    return keep


# Tags some measurements' rollups are grouped by besides the GPU's (_mig, _vgpu).
POINT_TAGS = {GPU_MIG: ("mig_profile",), GPU_VGPU: ("vgpu_type",)}


def _reads(rollup, raw: bool) -> set[str]:
    """The names a rollup reads from a point: of raw points, its aggregates' fields and its condition's;
    of rollup points, its own fields."""
    if not raw:
        return {f.name for f in rollup.fields}
    names = {agg[1] for f in rollup.fields if (agg := raw_aggregate(f))}
    return names | {m[1] for part in rollup.where.split(" AND ") if (m := _TERM.match(part.strip()))}


def _reduce(op: str, values: list):
    if op == "COUNT":
        return len(values)
    if not values:
        return None
    if op == "SUM":
        return math.fsum(values) if isinstance(values[0], float) else sum(values)
    if op == "MAX":
        return max(values)
    if op == "MIN":
        return min(values)
    if op == "FIRST":
        return values[0]
    if op == "LAST":
        return values[-1]
    return 1  # ONE


def _rollup_fields(agg: figures.Aggregate) -> tuple[str, tuple[str, ...]]:
    """The rollup that records an aggregate of raw points, and its fields: (sum, count) for a mean,
    the one field for a count or max."""
    where = "\"dram_bw_source\" = 'gpm'" if agg.only == figures.GPM else ""
    ops = {"mean": ("SUM", "COUNT"), "count": ("COUNT",), "max": ("MAX",)}[agg.op]
    for rollup in ROLLUPS:
        if rollup.source == agg.measurement and rollup.where == where:
            found = {f.raw: f.name for f in rollup.fields}
            if all(f'{op}("{agg.field}")' in found for op in ops):
                return rollup.name, tuple(found[f'{op}("{agg.field}")'] for op in ops)
    raise LookupError(f"no rollup records {agg}")


Piece = tuple  # (Level | None, start_ns, end_ns): None is raw points


def plan(
    start_ns: int,
    end_ns: int,
    reach: dict[str, tuple[int, int] | None],
    levels: tuple[Level, ...] = LEVELS,
    max_s: int | None = None,
) -> list[Piece]:
    """[start, end) as pieces, in time order: the coarsest usable level's whole buckets in the middle."""
    usable = [lv for lv in levels if reach.get(lv.name) and (max_s is None or max_s % lv.seconds == 0)]
    if not usable or start_ns >= end_ns:
        return [(None, start_ns, end_ns)] if start_ns < end_ns else []
    level, finer = usable[-1], tuple(usable[:-1])
    covered = reach[level.name]
    assert covered is not None  # usable: reached
    lo, hi = covered
    a = max(-(-start_ns // level.ns) * level.ns, lo)
    b = min(end_ns // level.ns * level.ns, hi)
    if a >= b:
        return plan(start_ns, end_ns, reach, finer, max_s)
    return [*plan(start_ns, a, reach, finer, max_s), (level, a, b), *plan(b, end_ns, reach, finer, max_s)]


def usable(rng: Range, reach: dict) -> bool:
    return any(level is not None for level, _, _ in plan(rng.start_ns, rng.end_ns, reach))


def _merge(op: str, old, new, later: bool):
    if old is None:
        return new
    if new is None:
        return old
    if op == "SUM":
        return old + new
    if op == "MAX":
        return max(old, new)
    if op == "MIN":
        return min(old, new)
    if op == "LAST":
        return new if later else old
    return old if later else new  # FIRST


class RollupReport(Report):
    """The raw report's figures, the heavy measurements (gpu_power, gpu_clocks, gpu_memory) from rollups."""

    # Up to this many power samples in the range, the 95th percentile is exact, from raw points
    # (InfluxDB 1.6 sorts about 100,000 a second here); above, from the histograms (bench/RESULTS.md).
    p95_raw_max_samples = 200_000
    # Rollup pieces of up to this many buckets per series (or per group and bucket) are read as points.
    points_max_buckets = 3

    def __init__(self, client, rng: Range, by: str = "model", where: str | None = None, reach=None):
        super().__init__(client, rng, by, where)
        self.reach = reach if reach is not None else coverage(client)
        self.pieces = plan(rng.start_ns, rng.end_ns, self.reach)
        self.from_raw = list(FROM_RAW)
        self.approximate: dict[str, dict] = {}
        self._memo: dict[tuple, list[dict]] = {}
        self._memo_locks: dict[tuple, threading.Lock] = {}
        self._memo_lock = threading.Lock()

    # -- piece-wise queries -----------------------------------------------------------------------
    def _piece_where(self, start_ns: int, end_ns: int, extra: str = "") -> str:
        parts = [f"time >= '{rfc3339(start_ns)}' AND time < '{rfc3339(end_ns)}'"]
        if self.where:
            parts.append(f"({self.where})")
        if extra:
            parts.append(extra)
        return " AND ".join(parts)

    def _from(self, level: Level | None, rollup_name: str) -> tuple[str, str]:
        """(FROM, extra condition) of one rollup's points at a level (None: its raw source)."""
        rollup = BY_NAME[rollup_name]
        if level is None:
            return f'"{rollup.source}"', rollup.where
        return f'{quote_ident(self.client.conn.database)}."{level.name}"."{rollup.measurement}"', ""

    def _agg(
        self,
        rollup_name: str,
        names: tuple[str, ...],
        group: tuple[str, ...],
        pieces: list[Piece] | None = None,
        tail: str = "",
    ) -> dict[tuple, dict[str, Any]]:
        """Per group key (and bucket time, with a GROUP BY time tail), each named field merged over the pieces.

        A piece of few points per series is read as points once, shared by every rollup of its
        measurement and every section, and aggregated here; a longer one is asked per group, only
        the fields named (InfluxDB 1.x pays per group and aggregate)."""
        rollup = BY_NAME[rollup_name]
        fields = [f for f in rollup.fields if f.name in names]
        out: dict[tuple, dict[str, Any]] = {}
        for piece in pieces if pieces is not None else self.pieces:
            if self._as_points(piece, rollup, tail):
                rows = self._rows_from_points(rollup_name, piece, group, tail)
            else:
                rows = self._piece_rows(rollup_name, tuple(f.name for f in fields), piece, group, tail)
            for row in rows:
                key = tuple(row.get(t, "") for t in group) + ((row["time"],) if tail else ())
                got = out.setdefault(key, {})
                for f in fields:
                    got[f.name] = _merge(f.combine, got.get(f.name), row.get(f.name), later=True)
        return out

    def _as_points(self, piece: Piece, rollup=None, tail: str = "") -> bool:
        """Whether a piece is read as points: few per series, or per group and bucket (a tail)."""
        level, a, b = piece
        if level is None:
            evaluable = rollup is None or (
                raw_condition(rollup.where) is not None and all(raw_aggregate(f) for f in rollup.fields)
            )
            return b - a <= EDGE_NS and evaluable
        if tail:
            found = _TAIL.search(tail)
            assert found is not None, tail  # a tail groups by time(Ns)
            span_ns = int(found[1]) * 10**9
        else:
            span_ns = b - a
        return span_ns // level.ns <= self.points_max_buckets

    def _once(self, key: tuple, ask):
        """ask() the first time `key` is wanted, its answer after (the sections run in threads)."""
        with self._memo_lock:
            lock = self._memo_locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._memo:
                self._memo[key] = ask()
            return self._memo[key]

    def _piece_rows(
        self, rollup_name: str, names: tuple[str, ...], piece: Piece, tags: tuple[str, ...], tail: str
    ) -> list[dict]:
        """The named fields of one rollup over one piece, per `tags` (and bucket), as InfluxDB aggregates them."""

        def ask():
            level, a, b = piece
            source, extra = self._from(level, rollup_name)
            select = ", ".join(
                f'{f.raw if level is None else f.over_rollup()} AS "{f.name}"'
                for f in BY_NAME[rollup_name].fields
                if f.name in names
            )
            by = ", ".join(f'"{t}"' for t in tags)
            return self.client.rows(
                f"SELECT {select} FROM {source} WHERE {self._piece_where(a, b, extra)} GROUP BY {by}{tail}"
            )

        return self._once((rollup_name, names, piece, tags, tail), ask)

    def _source_points(self, level: Level | None, rollup_name: str, piece: Piece) -> list[dict]:
        """Every point (fields and tags) of a rollup's measurement at a level (None: its raw source)
        over a piece, in time order; asked once per measurement and piece."""
        source, _ = self._from(level, rollup_name)
        _, a, b = piece
        # Only what a rollup of the measurement reads, and the tags the report groups by: a point's
        # other tags and fields cost as much to send and parse as these.
        measurement = BY_NAME[rollup_name].source if level is None else BY_NAME[rollup_name].measurement
        names = sorted(
            {*GPU_TAGS, *POINT_TAGS.get(measurement, ())}
            | {
                n
                for r in EVERY
                for n in _reads(r, level is None)
                if (r.source if level is None else r.measurement) == measurement
            }
        )

        def ask():
            select = ", ".join(f'"{n}"' for n in names)
            rows = self.client.rows(f"SELECT {select} FROM {source} WHERE {self._piece_where(a, b)}")
            rows.sort(key=lambda r: r["time"])
            return rows

        return self._once(("points", source, a, b), ask)

    def _rows_from_points(self, rollup_name: str, piece: Piece, tags: tuple[str, ...], tail: str) -> list[dict]:
        """What _piece_rows would answer for every field of the rollup, computed from the piece's points:
        raw points by the rollup's condition and aggregates, rollup points by each field's combine."""

        def compute():
            rollup = BY_NAME[rollup_name]
            level, a, _ = piece
            if level is None:
                keep = raw_condition(rollup.where)
                ops = [(f.name, *raw_aggregate(f)) for f in rollup.fields]
            else:
                keep, ops = None, [(f.name, f.combine, f.name) for f in rollup.fields]
            bucket_ns = int(_TAIL.search(tail)[1]) * 10**9 if tail else None
            groups: dict[tuple, list[dict]] = {}
            for row in self._source_points(level, rollup_name, piece):
                if keep is None or keep(row):
                    t = row["time"] // bucket_ns * bucket_ns if bucket_ns else a
                    groups.setdefault((*(row.get(tag) or "" for tag in tags), t), []).append(row)
            out = []
            for key, rows in groups.items():
                got = {**dict(zip(tags, key[:-1], strict=True)), "time": key[-1]}
                seen = False
                for name, op, field in ops:
                    values = [r[field] for r in rows if r.get(field) is not None]
                    got[name] = _reduce(op, values)
                    seen = seen or bool(values)
                if seen:  # as InfluxDB: no row where none of the fields has a value
                    out.append(got)
            return out

        return self._once(("grouped", rollup_name, piece, tags, tail), compute)

    def _group_agg(self, rollup_name: str, names: tuple[str, ...]) -> dict[tuple, dict[str, Any]]:
        """A group figure, from the rollup per host and model where the groups and --where allow it."""
        by_host = f"{rollup_name}_by_host"
        if by_host in BY_NAME and self._by_host_usable():
            return self._agg(by_host, names, self.group_tags)
        return self._agg(rollup_name, names, self.group_tags)

    def _by_host_usable(self) -> bool:
        """Whether the groups and --where need only host and model, and the per-host rollups reach as
        far as gpu_power's (rollups backfilled before they existed do not)."""
        if not set(self.group_tags) <= set(BY_HOST) or not self._where_within(BY_HOST):
            return False
        return self._once(("by_host",), lambda: coverage(self.client, "gpu_power_by_host") == self.reach)

    # -- the figures from rollups -----------------------------------------------------------------
    def _inventory(self) -> dict[tuple, dict]:
        gpus: dict[tuple, dict] = defaultdict(dict)
        # Asked at once (the sections after reuse these rows): on InfluxDB 1.x at 8,000 GPUs each takes
        # seconds, and one after another they were most of the report's time (bench/RESULTS.md).
        with ThreadPoolExecutor(WORKERS) as pool:
            asked = [
                pool.submit(self._agg, name, fields, GPU_TAGS)
                for name, fields in (
                    (GPU_CLOCKS, ("sm_clock_count", "max_sm_clock_count")),
                    (GPU_MEMORY, ("util_sum", "util_count", "fb_used_count")),
                    (GPU_POWER, ("power_count",)),
                )
            ]
            energy_asked = pool.submit(self._energy_per_gpu)
            # Meanwhile the raw minutes most GPUs' first and last sample times come from (_edge_time):
            # the first bucket's first minute, the last bucket's last.
            (first, start_ns, _), (last, _, end_ns) = self.pieces[0], self.pieces[-1]
            if first is not None and first.seconds > 60:
                pool.submit(self._raw_edge_time, "first", first, start_ns, ())
            if last is not None and last.seconds > 60:
                pool.submit(self._raw_edge_time, "last", last, end_ns - last.ns, ())
            clocks, memory, power = (a.result() for a in asked)
            energy = energy_asked.result()
        util = memory
        for key, row in power.items():
            if row.get("power_count"):
                gpus[key]["samples"] = row["power_count"]
        for key, row in util.items():
            if row.get("util_count"):
                gpus[key]["util_mean_pct"] = row["util_sum"] / row["util_count"]
        for key in (*clocks, *memory):
            gpus.setdefault(key, {})
        for key, (joules, first_t, last_t) in energy.items():
            gpus[key]["observed_s"] = (last_t - first_t) / 1e9
            gpus[key]["energy_j"] = joules
        return dict(gpus)

    def _energy_per_gpu(self, times: bool = True) -> dict[tuple, tuple[float, int, int]]:
        """Per GPU: (energy_j increase, first sample time, last sample time) over the pieces; without
        `times`, the times are the pieces' (not looked for in the finer levels)."""
        per_gpu: dict[tuple, list] = defaultdict(list)
        for index, piece in enumerate(self.pieces):
            for key, part in self._energy_piece(piece).items():
                per_gpu[key].append((index, *part))
        out = {}
        for key, parts in per_gpu.items():
            parts.sort()
            energy = sum(p[3] for p in parts)
            energy += sum(max(0.0, b[1] - a[2]) for a, b in zip(parts, parts[1:], strict=False))
            first_t, last_t = parts[0][4], parts[-1][5]
            if times:
                first_t = self._edge_time("first", parts[0][0], first_t, key)
                last_t = self._edge_time("last", parts[-1][0], last_t, key)
            out[key] = (float(energy), first_t, last_t)
        return out

    def _energy_piece(self, piece: Piece) -> dict[tuple, tuple]:
        """Per GPU in the piece: (first value, last value, increase inside, first time, last time)."""
        level, a, b = piece
        if self._as_points(piece, BY_NAME[GPU_POWER]):
            return self._energy_from_points(piece)
        tags = ", ".join(GPU_TAGS)
        where = self._piece_where(a, b)
        source, _ = self._from(level, GPU_POWER)
        first_field, last_field = ("energy_j", "energy_j") if level is None else ("energy_first", "energy_last")
        first = {
            gpu_key(r): r
            for r in self.client.rows(f'SELECT FIRST("{first_field}") FROM {source} WHERE {where} GROUP BY {tags}')
        }
        last = {
            gpu_key(r): r
            for r in self.client.rows(f'SELECT LAST("{last_field}") FROM {source} WHERE {where} GROUP BY {tags}')
        }
        inner = f'SELECT NON_NEGATIVE_DIFFERENCE("{last_field}") AS d FROM {source} WHERE {where} GROUP BY {tags}'
        steps = {
            gpu_key(r): r["sum"] or 0.0
            for r in self.client.rows(f"SELECT SUM(d) FROM ({inner}) WHERE {where} GROUP BY {tags}")
        }
        inside = {}
        if level is not None:  # the first bucket's own increase (its first to its last value)
            inside = {
                gpu_key(r): r
                for r in self.client.rows(f'SELECT FIRST("energy_last") FROM {source} WHERE {where} GROUP BY {tags}')
            }
        out = {}
        for key, f in first.items():
            if key not in last:
                continue
            increase = steps.get(key, 0.0)
            if key in inside:
                increase += max(0.0, inside[key]["first"] - f["first"])
            out[key] = (f["first"], last[key]["last"], increase, f["time"], last[key]["time"])
        return out

    def _energy_from_points(self, piece: Piece) -> dict[tuple, tuple]:
        """_energy_piece's answer from the piece's points: FIRST, LAST and the non-negative steps of the counter."""
        level = piece[0]
        first_field, last_field = ("energy_j", "energy_j") if level is None else ("energy_first", "energy_last")
        per_gpu: dict[tuple, list[dict]] = defaultdict(list)
        for row in self._source_points(level, GPU_POWER, piece):
            per_gpu[tuple(row.get(t) or "" for t in GPU_TAGS)].append(row)
        out = {}
        for key, rows in per_gpu.items():
            firsts = [r for r in rows if r.get(first_field) is not None]
            lasts = [r[last_field] for r in rows if r.get(last_field) is not None]
            if not firsts or not lasts:
                continue
            last_t = next(r["time"] for r in reversed(rows) if r.get(last_field) is not None)
            increase = math.fsum(max(0.0, b - a) for a, b in zip(lasts, lasts[1:], strict=False))
            if level is not None:  # the first bucket's own increase (its first to its last value)
                increase += max(0.0, lasts[0] - firsts[0][first_field])
            out[key] = (firsts[0][first_field], lasts[-1], increase, firsts[0]["time"], last_t)
        return out

    def _edge_time(self, which: str, index: int, t: int, key: tuple) -> int:
        """The time of a GPU's first or last energy_j sample, looked for within the bucket at `t` in
        the finer levels down to raw points (one query per bucket, shared by the GPUs in it)."""
        level = self.pieces[index][0]
        if level is not None and level.seconds > 60:
            # Nearly every GPU samples in a bucket's first (last) minute: raw points there first, which
            # answer at once what the finer level and then its minute's raw points would.
            found = self._raw_edge_time(which, level, t, key)
            if found is not None:
                return found
        while level is not None:
            finer = next((lv for lv in reversed(LEVELS) if lv.seconds < level.seconds), None)
            found = self._edge_times(which, level, finer, t, key)
            if found is None:
                return t  # the finer level or raw points are gone: the bucket's start
            t, level = found, finer
        return t

    def _raw_edge_time(self, which: str, level: Level, t: int, key: tuple) -> int | None:
        """A GPU's first (last) energy_j sample in the first (last) minute of the bucket at `t`, if any."""
        minute = 60 * 10**9
        a, b = (t, t + minute) if which == "first" else (t + level.ns - minute, t + level.ns)
        return self._sample_times(which, None, a, b).get(key)

    def _edge_times(self, which: str, level: Level, finer: Level | None, t: int, key: tuple) -> int | None:
        """Where in the bucket at `t` a GPU's first (last) sample lies, one level finer: asked first in
        the bucket's first (last) finer bucket, where nearly every GPU has one, then in all of it."""
        step = finer.ns if finer else 60 * 10**9
        near = (t, t + step) if which == "first" else (t + level.ns - step, t + level.ns)
        for a, b in (near, (t, t + level.ns)):
            found = self._sample_times(which, finer, a, b).get(key)
            if found is not None:
                return found
        return None

    def _sample_times(self, which: str, level: Level | None, a: int, b: int) -> dict[tuple, int]:
        """Per GPU, the time of its first (last) energy sample in [a, b) at a level (None: raw points);
        asked once per window, shared by the GPUs in it. One field per GPU: FIRST/LAST costs less than
        the window's points (every field, 6 a minute per GPU)."""
        field = "energy_j" if level is None else "energy_count"
        fn = "FIRST" if which == "first" else "LAST"

        def ask():
            source, _ = self._from(level, GPU_POWER)
            rows = self.client.rows(
                f'SELECT {fn}("{field}") FROM {source} WHERE {self._piece_where(a, b)} GROUP BY {", ".join(GPU_TAGS)}'
            )
            return {gpu_key(r): r["time"] for r in rows}

        return self._once(("sample times", which, level, a, b), ask)

    def group_aggregates(self, wanted: tuple[figures.Aggregate, ...]) -> dict[tuple, dict[figures.Aggregate, Any]]:
        """Per group, each aggregate merged over the rollups' pieces: a mean of the sums and counts, a
        count or max of its field; the 95th percentile from the power histograms where they serve it
        (source.approximate), else from raw points."""
        fields = {a: _rollup_fields(a) for a in wanted if a.op != "p95"}
        percentile = [a for a in wanted if a.op == "p95"]
        if percentile:  # the histogram's rank needs the samples and their range
            fields[percentile[0]] = (GPU_POWER, ("power_count", "power_max", "power_min"))
        names: dict[str, set[str]] = defaultdict(set)
        for rollup, needed in fields.values():
            names[rollup].update(needed)
        rows = {
            rollup: self._group_agg(rollup, tuple(f.name for f in BY_NAME[rollup].fields if f.name in needed))
            for rollup, needed in names.items()
        }
        out: dict[tuple, dict[figures.Aggregate, Any]] = defaultdict(dict)
        for agg, (rollup, needed) in fields.items():
            if agg.op == "p95":
                continue
            for gkey, r in rows[rollup].items():
                if agg.op == "mean":
                    total, n = needed
                    out[gkey][agg] = r[total] / r[n] if r.get(n) else None
                else:
                    out[gkey][agg] = r.get(needed[0])
        for agg in percentile:
            p95 = self._p95_from_histogram(rows[GPU_POWER])
            if p95 is None:  # exact, from raw points: percentiles do not roll up
                p95 = {gkey: got[agg] for gkey, got in Report.group_aggregates(self, (agg,)).items()}
            else:
                self.from_raw.remove(figures.POWER_P95)
                self.approximate[figures.POWER_P95] = {"method": "histogram", "bin_w": HIST_W, "bound_w": HIST_W / 2}
            for gkey, value in p95.items():
                out[gkey][agg] = value
        return out

    def _p95_from_histogram(self, rows: dict[tuple, dict]) -> dict[tuple, float | None] | None:
        """Per group, the 95th percentile (nearest rank, as InfluxQL's PERCENTILE) from the power
        histograms of the rollup pieces and the raw edges' own points, within HIST_W / 2: the midpoint
        of the bin that holds the ranked sample, cut to the group's min and max. None (ask raw
        points) where few samples make raw cheap, a raw piece is long, or a bin count is missing
        (rollups backfilled before the histogram) or the ranked sample lies above the top bin; and
        where the histogram, kept per host and model, does not hold the groups or --where's tags."""
        total = sum(r.get("power_count") or 0 for r in rows.values())
        raw_ns = sum(b - a for lv, a, b in self.pieces if lv is None)
        if total <= self.p95_raw_max_samples or raw_ns > 2 * EDGE_NS:
            return None
        tags = HISTOGRAM[0].tags  # per host and model: --by gpu, or a --where on other tags, reads raw
        if not set(self.group_tags) <= set(tags) or not self._where_within(tags):
            return None
        counts: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        names = [f.name for r in HISTOGRAM for f in r.fields]
        by = ", ".join(f'"{t}"' for t in self.group_tags)
        for level, a, b in self.pieces:
            if level is None:
                for row in self._source_points(None, GPU_POWER, (None, a, b)):
                    v = row.get("power_w")
                    if v is not None:
                        key = tuple(row.get(t) or "" for t in self.group_tags)
                        counts[key][hist_field(int(v // HIST_W * HIST_W) if v < HIST_TOP_W else None)] += 1
                continue
            select = ", ".join(f'SUM("{n}") AS "{n}"' for n in names)
            source = f'{quote_ident(self.client.conn.database)}."{level.name}"."{HIST_MEASUREMENT}"'
            for row in self.client.rows(f"SELECT {select} FROM {source} WHERE {self._piece_where(a, b)} GROUP BY {by}"):
                key = tuple(row.get(t, "") for t in self.group_tags)
                for n in names:
                    if row.get(n):
                        counts[key][n] += row[n]
        out = {}
        for gkey, r in rows.items():
            samples = r.get("power_count") or 0
            if not samples:
                continue
            bins = counts.get(gkey, {})
            if sum(bins.values()) != samples:
                return None
            rank, seen = math.floor(samples * 0.95 + 0.5), 0.0
            for name in names:
                seen += bins.get(name, 0)
                if seen >= rank:
                    break
            if name == hist_field(None):
                return None
            lo = int(name[1:])
            lo, hi = max(lo, r.get("power_min", lo)), min(lo + HIST_W, r.get("power_max", lo + HIST_W))
            out[gkey] = (lo + hi) / 2
        return out

    def _throttle(self, groups) -> None:
        counts = self._group_agg(GPU_CLOCKS, tuple(f"{r}_n" for r in REASONS))
        totals = {gkey: {r: row.get(f"{r}_n") for r in REASONS} for gkey, row in counts.items()}

        def hits(reason: str) -> dict[tuple, Any]:
            return {gkey: r.get("hits") for gkey, r in self._group_agg(f"gpu_clocks_{reason}", ("hits",)).items()}

        figures.throttle_shares(groups, totals, hits)

    def _health(self, groups) -> None:
        """health_gpu_hours from the per-verdict sample counts of the rollups, in the raw report's buckets
        (gpuagent.compare.health); from raw points where a verdict the rollups do not count was written.
        Levels coarser than the bucket (1h, where the bucket divides an hour) count a GPU's piece whole
        when it held one verdict in every minute with samples (bucket 1 min) or in every minute at all;
        its other GPUs' minutes are read from the 1m level."""
        span = (self.range.end_ns - self.range.start_ns) / 1e9
        bucket = bucket_for(span)
        levels = tuple(lv for lv in LEVELS if bucket % lv.seconds == 0 or lv.seconds % bucket == 0)
        pieces = plan(self.range.start_ns, self.range.end_ns, self.reach, levels)
        step = bucket * 10**9
        # Rollup pieces of more than one whole bucket are counted per GPU over the piece (_whole_hours),
        # not per GPU and bucket: one row per GPU instead of one per GPU and minute.
        fine = [p for p in pieces if p[0] is None or p[1] % step or p[2] % step or p[2] - p[1] <= step]
        for g in groups.values():
            g[figures.HEALTH] = dict.fromkeys(VERDICTS, 0.0)
        whole: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        detail: list[tuple[Piece, list[tuple]]] = []
        for piece in pieces:
            if piece in fine:
                continue
            gpus = self._whole_hours(piece, bucket, whole)
            if gpus is None:
                return self._health_raw(groups)
            if gpus:
                detail.append((piece, gpus))
        total, per_word = self._health_counts(fine, bucket, "")
        for piece, gpus in detail:
            minute = next(lv for lv in LEVELS if lv.seconds == 60)
            sub = [(minute, piece[1], piece[2])]
            for i in range(0, len(gpus), 100):  # tags asked by name: InfluxDB finds them in its index
                cond = " OR ".join(f"\"uuid\" = '{k[1]}'" for k in gpus[i : i + 100])
                t, w = self._health_counts(sub, bucket, f"({cond})")
                total.update(t)
                for word, found in w.items():
                    per_word.setdefault(word, {}).update(found)
        counted: dict[tuple, float] = defaultdict(float)
        for found in per_word.values():
            for k, n in found.items():
                counted[k] += n
        if any(counted.get(k, 0) != n for k, n in total.items()):
            return self._health_raw(groups)
        add_hours(self, groups, total, {w: f for w, f in per_word.items() if f}, bucket)
        for gkey, hours in whole.items():
            if gkey in groups:
                for word, h in hours.items():
                    groups[gkey][figures.HEALTH][word] += h

    def _work(self, groups) -> None:
        """The work figures: limits and the energy of each span from rollups where they cover them
        (gpuagent.compare.rollup_work), the work counters from raw points."""
        from gpuagent.compare.rollup_work import RollupWork  # the one edge back up: RollupWork reads a RollupReport

        source = RollupWork(self, self.range, self.where, gpu_where=True)
        work_section(source, self.range, self.by, self.prices, self.where, groups)
        if source.from_rollups:  # what is still raw: the counters behind units
            self.from_raw[self.from_raw.index(figures.WORK)] = f"{figures.WORK}_units"

    def _health_raw(self, groups) -> None:
        health_hours(self, groups)  # another word among the verdicts: counted from raw points
        self.from_raw.append(figures.HEALTH)

    def _health_counts(self, pieces: list[Piece], bucket: int, extra: str) -> tuple[dict, dict[str, dict]]:
        """Sample counts per (gpu key, bucket time): all verdicts, and per verdict word."""
        if not pieces:
            return {}, {}
        tail = f", time({bucket}s) fill(none)"

        def counts(name: str, field: str) -> dict:
            if extra:
                rows = []
                for level, a, b in pieces:
                    source, cond = self._from(level, name)
                    where = self._piece_where(a, b, " AND ".join(c for c in (cond, extra) if c))
                    rows += self.client.rows(
                        f'SELECT SUM("{field}") AS "{field}" FROM {source} WHERE {where} '
                        f"GROUP BY {', '.join(GPU_TAGS)}{tail}"
                    )
                return {(gpu_key(r), r["time"]): r[field] for r in rows if r.get(field)}
            return {
                (k[:-1], k[-1]): r[field]
                for k, r in self._agg(name, (field,), GPU_TAGS, pieces, tail).items()
                if r.get(field)
            }

        return counts(GPU_HEALTH, "verdict_count"), {w: counts(f"gpu_health_{w}", "n") for w in VERDICTS}

    def _whole_hours(self, piece: Piece, bucket: int, whole: dict) -> list[tuple] | None:
        """Add to `whole` (per group and verdict) the GPU-hours of the GPUs that held one verdict over a
        coarse piece in every minute with samples (bucket 1 min) or in all of its minutes; the other GPUs
        with verdicts there (to read from the 1m level), or None where an unknown verdict was written."""
        total = self._agg(GPU_HEALTH, ("verdict_count",), GPU_TAGS, [piece])
        minutes = self._agg("gpu_health_minutes", ("minutes",), GPU_TAGS, [piece])
        words = {w: self._agg(f"gpu_health_{w}", ("n",), GPU_TAGS, [piece]) for w in VERDICTS}
        all_minutes = (piece[2] - piece[1]) // (60 * 10**9)
        rest = []
        for key, r in total.items():
            n = r.get("verdict_count") or 0
            if not n:
                continue
            found = {w: got[key]["n"] for w, got in words.items() if (got.get(key) or {}).get("n")}
            if sum(found.values()) != n:
                return None
            m = (minutes.get(key) or {}).get("minutes")
            if len(found) == 1 and m and (bucket == 60 or m == all_minutes):
                whole[self._group_of(key)][next(iter(found))] += m * 60 / 3600
            else:
                rest.append(key)
        return rest

    def _where_within(self, tags) -> bool:
        """Whether --where names only these tags (a rollup that keeps only them then serves it)."""
        return not set(_NAMES.findall(self.where or "")) - set(tags)

    def _p2p(self, groups, gpus) -> None:
        # The per-GPU rollups rather than per pair, where --where allows and they were written (rollups
        # backfilled before they existed hold only the per-pair ones).
        names = {r.get("name") for r in self.client.rows("SHOW MEASUREMENTS WITH MEASUREMENT =~ /^gpu_p2p_/")}
        by_gpu = "_gpu" if self._where_within(GPU_TAGS) and {"gpu_p2p_nvlink_gpu", "gpu_p2p_pcie_gpu"} <= names else ""
        nvlink = {k for k, r in self._agg(f"gpu_p2p_nvlink{by_gpu}", ("n",), GPU_TAGS).items() if r.get("n")}
        pcie = {k for k, r in self._agg(f"gpu_p2p_pcie{by_gpu}", ("n",), GPU_TAGS).items() if r.get("n")}
        add_p2p(groups, gpus, nvlink, pcie, self._group_of)

    def _mig(self, groups, gpus) -> None:
        rows = self._agg(
            GPU_MIG, ("max_mig_devices_max", "mig_devices_max", "mig_index_count"), (*GPU_TAGS, "mig_profile")
        )
        capable: dict[tuple, int] = {}
        profiles = defaultdict(set)
        for k, r in rows.items():
            gpu, profile = k[:-1], k[-1]
            if r.get("max_mig_devices_max") is not None or r.get("mig_devices_max") is not None:
                capable[gpu] = max(capable.get(gpu, 0), int(r.get("mig_devices_max") or 0))
            if profile and r.get("mig_index_count"):
                profiles[self._group_of(gpu)].add(profile)
        enabled = {k for k, r in self._agg("gpu_mig_enabled", ("n",), GPU_TAGS).items() if r.get("n")}
        figures.tally_mig(groups, gpus, self._group_of, capable, enabled, profiles)

    def _vgpu(self, groups, gpus) -> None:
        rows = self._agg(
            GPU_VGPU, ("mode_last", "active_instances_max", "vgpu_type_id_count"), (*GPU_TAGS, "vgpu_type")
        )
        modes: dict[tuple, str] = {}
        instances: dict[tuple, int] = {}
        types = defaultdict(set)
        for k, r in rows.items():
            gpu, vgpu_type = k[:-1], k[-1]
            if r.get("mode_last") is not None and not vgpu_type:  # the GPU's own points, not an instance's
                modes[gpu] = r["mode_last"]
            if r.get("active_instances_max") is not None:
                instances[gpu] = max(instances.get(gpu, 0), int(r["active_instances_max"]))
            if vgpu_type and r.get("vgpu_type_id_count"):
                types[self._group_of(gpu)].add(vgpu_type)
        figures.tally_vgpu(groups, gpus, self._group_of, modes, instances, types)

    def _series(self, groups) -> dict[str, Any]:
        span = (self.range.end_ns - self.range.start_ns) / 1e9
        bucket = bucket_seconds(span)
        # Only levels whose buckets fit whole in the series' buckets.
        pieces = plan(self.range.start_ns, self.range.end_ns, self.reach, max_s=bucket)
        rows = self._agg(
            self._series_rollup(),
            ("power_sum", "power_count"),
            self.group_tags,
            pieces,
            tail=f", time({bucket}s) fill(none)",
        )
        lines: dict[str, list] = defaultdict(list)
        for key, r in rows.items():
            gkey, t = key[:-1], key[-1]
            if gkey in groups and r.get("power_count"):
                lines[groups[gkey]["label"]].append([t, r["power_sum"] / r["power_count"]])
        return figures.power_series(bucket, lines)

    def _series_rollup(self) -> str:
        """gpu_power_host (a series per host, not per GPU) where the groups and --where need only its
        tags and it reaches as far as gpu_power; else gpu_power."""
        tags = set(POWER_BY_HOST.tags)
        if not set(self.group_tags) <= tags or not self._where_within(tags):
            return GPU_POWER
        return POWER_BY_HOST.name if coverage(self.client, POWER_BY_HOST.name) == self.reach else GPU_POWER

    def build(self) -> dict[str, Any]:
        doc = super().build()
        doc["source"].update(pieces_source(self.pieces), from_raw=self.from_raw, approximate=self.approximate)
        return doc


def pieces_source(pieces: list[Piece]) -> dict[str, Any]:
    """What `source` says of a range read in pieces (InfluxQL and PromQL alike): kind, resolution, pieces."""
    used = [lv for lv, _, _ in pieces if lv is not None]
    coarsest = max(used, key=lambda lv: lv.seconds) if used else None
    return {
        "kind": "rollup" if coarsest else "raw",
        "resolution": f"{coarsest.seconds}s" if coarsest else None,
        "pieces": [{"from": rfc3339(a), "to": rfc3339(b), "level": lv.name if lv else "raw"} for lv, a, b in pieces],
    }


def rollup_report_or_none(client, rng: Range, by: str, where: str | None) -> RollupReport | None:
    """The report from rollups when some level's whole buckets fall in the range; None otherwise."""
    try:
        reach = coverage(client)
    except NoAnswer:
        raise  # the raw report would wait as long again
    except AgentError:
        return None  # no rollups to read (or not allowed to list them): raw points
    return RollupReport(client, rng, by, where, reach) if usable(rng, reach) else None
