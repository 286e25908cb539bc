"""The compare report over PromQL from the recording rules of deploy/rollups/ where they cover the range.

The rules (gpuagent.compare.rollup_rules) record, per series and bucket, what each figure needs:
sums and counts, max/min, the energy counter's first (its min) and last value, the counts of the
samples where a boolean is set. A bucket is the point stamped T on the level's grid (1m, 1h) and
holds the raw samples of [T - level, T). The range [start, end) is cut as the InfluxDB rollup report
cuts it (gpuagent.compare.rollup_report.plan): the coarsest level's whole buckets inside its
coverage, the edges from the finer level, what is left from raw samples. Each figure is still one
query: its `<fn>_over_time` is the union of one term per piece (each at its own time with `@`,
labelled with its piece by label_replace), merged per series (`sum without (gpuagent_piece)`, max,
min), so sums, counts, means, max and min equal those of raw samples. Energy per GPU is the
counter's max - min over the pieces (exact while it does not reset); a GPU's first and last sample
times, where they fall in a rollup bucket, are looked for in the finer levels down to raw samples
(one bucket's worth). The 95th percentile, the L2 probe, health (verdicts are strings), the vGPU
modes and the work figures are read from raw samples (source.from_raw lists them).

VictoriaMetrics only (MetricsQL's tfirst/tlast_over_time give the sample times; Prometheus has no
such function): on Prometheus compare reads raw samples.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any

from gpuagent.compare import figures
from gpuagent.compare.core import GPU_TAGS, GROUP_TAGS, Range, bucket_seconds, rfc3339
from gpuagent.compare.promql import PromNames
from gpuagent.compare.promql_report import GPU, MERGE, PromReport
from gpuagent.compare.query import NoAnswer
from gpuagent.compare.rollup_report import pieces_source, plan, usable
from gpuagent.compare.rollup_rules import record, rules_yaml
from gpuagent.compare.rollups import LEVELS, ROLLUPS, Level
from gpuagent.errors import AgentError
from gpuagent.schema.measurements import GPU_HEALTH, GPU_MEMORY, GPU_POWER

PIECE = "gpuagent_piece"
_TRUE = re.compile(r'^"(\w+)" = true$')
_FN = {"SUM": "sum", "COUNT": "count", "MAX": "max", "MIN": "min", "FIRST": "min", "LAST": "max"}


def _records() -> dict[tuple[str, str, str], tuple[str, str]]:
    """(measurement, field, fn) -> (rollup, rollup field) of the rule that records it per bucket."""
    out: dict[tuple[str, str, str], tuple[str, str]] = {}
    for r in ROLLUPS:
        if r.source == GPU_HEALTH:
            continue  # strings: raw samples
        true = _TRUE.match(r.where)
        for f in r.fields:
            fn, _, arg = f.raw.partition("(")
            if true:  # the samples where the boolean is set: the sum of its 0/1 series
                out.setdefault((r.source, true[1], "sum"), (r.name, f.name))
            elif (not r.where or r.name == "gpu_memory_gpm") and f.name != "mode_last":
                # LAST, the energy counter's: its max while it does not reset.
                out.setdefault((r.source, arg.strip('")'), _FN[fn]), (r.name, f.name))
    return out


RECORDS = _records()


def _at(t_ns: int) -> str:
    return f"{t_ns / 1e9:.3f}"


def _ms(ns: int) -> str:
    return f"{max(1, ns // 1_000_000)}ms"


def _gpu(metric: dict) -> tuple:
    return tuple(metric.get(t, "") for t in GPU_TAGS)


def coverage(client, where: str, rng: Range) -> dict[str, tuple[int, int] | None]:
    """Per level, the raw time [first bucket's start, last bucket's end) its power counts cover near
    the range (a level and a power-series bucket beyond each end: the series' buckets overhang the
    range); None where nothing is recorded."""
    out: dict[str, tuple[int, int] | None] = {}
    sel = f"{{{where}}}" if where else ""
    overhang = bucket_seconds((rng.end_ns - rng.start_ns) / 1e9) * 10**9
    for level in LEVELS:
        name = record(_rollup(GPU_POWER), _field(GPU_POWER, "power_count"), level.name)
        at = rng.end_ns + level.ns + overhang
        window = _ms(at - rng.start_ns + level.ns + overhang)
        lo = client.query(
            f"min(tfirst_over_time({name}{sel}[{window}]))", at / 1e9, f"the {level.every} rollups' reach"
        )
        hi = client.query(f"max(tlast_over_time({name}{sel}[{window}]))", at / 1e9, f"the {level.every} rollups' reach")
        if lo and hi:
            first = round(float(lo[0]["value"][1]) * 1000) * 10**6
            last = round(float(hi[0]["value"][1]) * 1000) * 10**6
            out[level.name] = (first - level.ns, last)
        else:
            out[level.name] = None
    return out


def _rollup(name: str):
    return next(r for r in ROLLUPS if r.name == name)


def _field(rollup: str, name: str):
    return next(f for f in _rollup(rollup).fields if f.name == name)


class PromRollupReport(PromReport):
    """PromReport's figures from the recording rules' series (see the module's docstring)."""

    def __init__(self, client, rng: Range, by: str = "model", where: str | None = None, reach=None):
        super().__init__(client, rng, by, where)
        self.reach = reach if reach is not None else coverage(client, self.where, rng)
        self.series_level: Level | None = None  # the level the power series was read from (build)
        self.pieces = plan(rng.start_ns, rng.end_ns, self.reach)
        self.from_raw = [figures.POWER_P95, figures.L2_PROBE, figures.WORK]

    # -- the union of the pieces -------------------------------------------------------------------
    def recorded(self, level: Level, measurement: str, field: str, fn: str) -> str:
        """The recording rule's series holding `fn` of the field per bucket of the level, with --where's matchers."""
        rollup, name = RECORDS[(measurement, field, fn)]
        series = record(_rollup(rollup), _field(rollup, name), level.name)
        return f"{series}{{{self.where}}}" if self.where else series

    def piece_term(self, fn: str, measurement: str, field: str, piece) -> str:
        """`fn_over_time` of one piece: raw samples of [a, b) at b - 1 ms, or the buckets stamped in (a, b]."""
        level, a, b = piece
        if level is None:
            return f"{fn}_over_time({self.selector(measurement, field)}[{_ms(b - a)}] @ {_at(b - 1_000_000)})"
        return f"{MERGE[fn]}_over_time({self.recorded(level, measurement, field, fn)}[{_ms(b - a)}] @ {_at(b)})"

    def over_range(self, fn: str, measurement: str, field: str, by: str) -> str:
        if (measurement, field, fn) not in RECORDS:
            return super().over_range(fn, measurement, field, by)  # nothing recorded (the L2 probe): raw samples
        # Each piece merged `by` before the union: the union (label_replace, or) costs per series.
        merge = MERGE[fn]
        terms = [
            f'label_replace({merge} by ({by}) ({self.piece_term(fn, measurement, field, p)}), "{PIECE}", "{i}", "", "")'
            for i, p in enumerate(self.pieces)
        ]
        return f"{merge} without ({PIECE}) ({' or '.join(terms)})"

    # -- energy and observed time ------------------------------------------------------------------
    def _energy_queries(self) -> dict[str, tuple[str, str]]:
        return {}  # per GPU below (_energy): the sample times come from the pieces

    def _energy(self, groups, a) -> None:
        escale = self.name(GPU_POWER, "energy_j")[1]
        top, low = (
            self.over_range("max", GPU_POWER, "energy_j", GPU),
            self.over_range("min", GPU_POWER, "energy_j", GPU),
        )
        found = self.client.many(
            [
                (f"{top} - {low}", self.at, "energy per GPU"),
                (self.mean(GPU_MEMORY, "gpu_util_pct", by=GPU), self.at, "utilisation per GPU"),
            ]
        )
        energy = {_gpu(r["metric"]): float(r["value"][1]) / escale for r in found[0]}
        util = {_gpu(r["metric"]): float(r["value"][1]) for r in found[1]}
        util = {k: v for k, v in util.items() if math.isfinite(v)}
        first, last = self._sample_times("first", set(energy)), self._sample_times("last", set(energy))
        tags = GROUP_TAGS[self.by]
        sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
        for key, joules in energy.items():
            if not math.isfinite(joules):
                continue
            metric = dict(zip(GPU_TAGS, key, strict=True))
            seconds = (last[key] - first[key]) / 1e9 if key in first and key in last else 0.0
            s = sums[tuple(metric.get(t, "") for t in tags)]
            s[0] += joules
            s[1] += seconds
            if key in util:
                s[2] += joules
                s[3] += seconds * util[key] / 100
        figures.derive(
            figures.ENERGY, {gkey: dict(zip(figures.ENERGY_SUMS, s, strict=True)) for gkey, s in sums.items()}, groups
        )

    def _sample_times(self, which: str, gpus: set[tuple]) -> dict[tuple, int]:
        """Per GPU the time (ns) of its first or last energy_j sample in the range: the first (last)
        piece that holds one, and inside a rollup bucket the finer levels down to raw samples."""
        fn, agg = ("tfirst_over_time", "min") if which == "first" else ("tlast_over_time", "max")
        order = self.pieces if which == "first" else list(reversed(self.pieces))
        out: dict[tuple, int] = {}
        left = set(gpus)
        for level, a, b in order:
            if not left:
                break
            if level is None:
                term = f"{self.selector(GPU_POWER, 'energy_j')}[{_ms(b - a)}] @ {_at(b - 1_000_000)}"
            else:
                term = f"{self.recorded(level, GPU_POWER, 'energy_j', 'count')}[{_ms(b - a)}] @ {_at(b)}"
            rows = self.client.query(f"{agg} by ({GPU}) ({fn}({term}))", self.at, f"{which} sample times")
            stamps = {}
            for r in rows:
                key = _gpu(r["metric"])
                if key in left:
                    stamps[key] = round(float(r["value"][1]) * 1000) * 10**6
            left -= set(stamps)
            out.update(self._drill(which, level, stamps) if level is not None else stamps)
        return out

    def _drill(self, which: str, level: Level, stamps: dict[tuple, int]) -> dict[tuple, int]:
        """Bucket stamps at `level` -> the sample times inside those buckets, level by level down to raw."""
        fn, agg = ("tfirst_over_time", "min") if which == "first" else ("tlast_over_time", "max")
        finer = next((lv for lv in reversed(LEVELS) if lv.seconds < level.seconds), None)
        by_stamp: dict[int, list[tuple]] = defaultdict(list)
        for key, t in stamps.items():
            by_stamp[t].append(key)
        out: dict[tuple, int] = {}
        for t, keys in sorted(by_stamp.items()):  # one query per bucket, shared by its GPUs
            if finer is None:
                term = f"{self.selector(GPU_POWER, 'energy_j')}[{_ms(level.ns)}] @ {_at(t - 1_000_000)}"
            else:
                term = f"{self.recorded(finer, GPU_POWER, 'energy_j', 'count')}[{_ms(level.ns)}] @ {_at(t)}"
            rows = self.client.query(f"{agg} by ({GPU}) ({fn}({term}))", self.at, f"{which} sample times")
            inner = {_gpu(r["metric"]): round(float(r["value"][1]) * 1000) * 10**6 for r in rows}
            found = {k: inner[k] for k in keys if k in inner}
            # A bucket whose finer points are gone (retention): its start or end stands for the sample.
            for k in keys:
                if k not in found:
                    out[k] = t - level.ns if which == "first" else t
            out.update(self._drill(which, finer, found) if finer is not None else found)
        return out

    # -- the series --------------------------------------------------------------------------------
    def _series(self, groups) -> dict[str, Any]:
        span = (self.range.end_ns - self.range.start_ns) / 1e9
        bucket = bucket_seconds(span)
        first = int(self.range.start_ns / 1e9 // bucket * bucket)
        last = int((self.range.end_ns / 1e9 - 0.001) // bucket * bucket)
        level = next(
            (
                lv
                for lv in reversed(LEVELS)
                if bucket % lv.seconds == 0
                and (covered := self.reach.get(lv.name))
                and covered[0] <= first * 10**9
                and covered[1] >= (last + bucket) * 10**9
            ),
            None,
        )
        if level is None:
            return super()._series(groups)  # buckets the rollups do not tile: raw samples
        self.series_level = level
        s, c = (f"{self.recorded(level, GPU_POWER, 'power_w', fn)}[{bucket}s]" for fn in ("sum", "count"))
        expr = f"sum by ({self.group}) (sum_over_time({s})) / sum by ({self.group}) (sum_over_time({c}))"
        scale = self.name(GPU_POWER, "power_w")[1]
        if scale != 1.0:
            expr = f"({expr}) / {scale!r}"
        # The point at t + bucket sums the buckets stamped in (t, t + bucket]: the raw samples of [t, t + bucket).
        result = self.client.query_range(expr, first + bucket, last + bucket, bucket, "power over time")
        return self._series_doc(result, groups, bucket, bucket)

    def build(self) -> dict[str, Any]:
        self.series_level = None
        doc = super().build()
        if self.scheme == "prometheus":
            self.from_raw += [figures.HEALTH, f"{figures.VGPU}.modes"]
        doc["source"].update(
            pieces_source(self.pieces),
            series_level=self.series_level.name if self.series_level else "raw",
            from_raw=self.from_raw,
        )
        return doc


def prom_rollup_report_or_none(client, rng: Range, by: str, where: str | None) -> PromRollupReport | None:
    """The report from the recording rules when some level's whole buckets fall in the range and the
    engine is VictoriaMetrics; None otherwise (raw samples)."""
    probe = PromReport(client, rng, by, where)  # checks --by and --where as the raw report does
    if not client.engine:
        client.detect_engine(probe.at)
    if client.engine != "victoriametrics":
        return None
    try:
        reach = coverage(client, probe.where, rng)
    except NoAnswer:
        raise  # the raw report would wait as long again
    except AgentError:
        return None
    return PromRollupReport(client, rng, by, where, reach) if usable(rng, reach) else None


# -- backfill and status ---------------------------------------------------------------------------
def _stamps(client, level: Level, where: str, a_ns: int, b_ns: int) -> tuple[int, int] | None:
    """The first and last stamps (ns) of a level's power counts in [a, b]; None where there are none."""
    name = record(_rollup(GPU_POWER), _field(GPU_POWER, "power_count"), level.name)
    sel = f"{name}{{{where}}}" if where else name
    window = _ms(b_ns - a_ns + 1_000_000)
    lo = client.query(f"min(tfirst_over_time({sel}[{window}]))", b_ns / 1e9, f"the {level.every} rollups' reach")
    hi = client.query(f"max(tlast_over_time({sel}[{window}]))", b_ns / 1e9, f"the {level.every} rollups' reach")
    if not lo or not hi:
        return None
    return round(float(lo[0]["value"][1]) * 1000) * 10**6, round(float(hi[0]["value"][1]) * 1000) * 10**6


def missing_spans(client, level: Level, start_ns: int, end_ns: int) -> list[tuple[int, int]]:
    """The stamps [first, last] of a level's buckets in [start of start's hour, end) not recorded yet:
    before and after what the level holds (VictoriaMetrics keeps a sample written twice twice, so a
    second backfill must not write what is there)."""
    hour = LEVELS[-1].ns
    first = start_ns // hour * hour + level.ns
    last = end_ns // level.ns * level.ns
    if first > last:
        return []
    held = _stamps(client, level, "", first, last)
    if held is None:
        return [(first, last)]
    spans = [(first, held[0] - level.ns), (held[1] + level.ns, last)]
    return [(a, b) for a, b in spans if a <= b]


def vmalert_argv(
    vmalert: str, rules: str, url: str, write_url: str, a_ns: int, b_ns: int, token: str | None = None
) -> list[str]:
    argv = [
        vmalert,
        f"-rule={rules}",
        f"-datasource.url={url}",
        f"-remoteWrite.url={write_url}",
        # Stamps from timeFrom on, one a step: timeFrom on the level's grid. vmalert wants timeTo
        # after timeFrom, one stamp or not.
        f"-replay.timeFrom={rfc3339(a_ns)}",
        f"-replay.timeTo={rfc3339(max(b_ns, a_ns + 10**9))}",
        # step = the group's interval (the default, 5m, would skip buckets); the levels do not
        # read each other, so no wait between rules.
        "-datasource.queryStep=0s",
        "-replay.rulesDelay=0s",
        "-replay.disableProgressBar",
        "-loggerLevel=ERROR",
    ]
    if token:
        argv += [f"-datasource.bearerToken={token}", f"-remoteWrite.bearerToken={token}"]
    return argv


def backfill(
    client,
    start_ns: int,
    end_ns: int,
    write_url: str | None = None,
    vmalert: str = "vmalert",
    scheme: str = "auto",
    echo=None,
) -> int:
    """The recording rules over history, with vmalert's replay mode, for the buckets each level does
    not hold yet; the number of bucket stamps replayed (per level and series they are one sample each)."""
    import shutil
    import subprocess
    import tempfile

    binary = shutil.which(vmalert)
    if binary is None:
        raise AgentError(
            f"--vmalert {vmalert!r}: not found (Debian package victoria-metrics, or the "
            "release binary from VictoriaMetrics)"
        )
    if not client.engine:
        client.detect_engine(end_ns / 1e9)
    if client.engine != "victoriametrics":
        raise AgentError(
            f"{client.conn.url} is not VictoriaMetrics: for Prometheus, backfill the rules "
            "with promtool tsdb create-blocks-from rules (docs/compare.md)"
        )
    if scheme == "auto":
        probe = PromNames(client, Range(start_ns, end_ns))
        probe.detect_scheme()
        scheme = probe.scheme
    stamps = 0
    with tempfile.TemporaryDirectory(prefix="gpuagent-rollups-") as tmp:
        for level in LEVELS:
            spans = missing_spans(client, level, start_ns, end_ns)
            if not spans:
                if echo:
                    echo(f"{level.every}: already recorded, nothing to replay")
                continue
            rules = f"{tmp}/{level.every}.rules.yml"
            with open(rules, "w") as out:
                out.write(rules_yaml(scheme, (level,)))
            for a, b in spans:
                argv = vmalert_argv(
                    binary, rules, client.conn.url, write_url or client.conn.url, a, b, client.conn.token
                )
                done = subprocess.run(argv, capture_output=True, text=True)
                if done.returncode != 0:
                    tail = " ".join((done.stderr or done.stdout).split())[-300:]
                    raise AgentError(f"vmalert replay of the {level.every} rules failed ({done.returncode}): {tail}")
                stamps += (b - a) // level.ns + 1
                if echo:
                    echo(f"{level.every}: replayed {rfc3339(a)} to {rfc3339(b)} ({scheme} names)")
    return stamps


def status(client, since_ns: int, end_ns: int, where: str = "") -> dict:
    """Per level, how far its recorded power counts reach in [end - since, end], and how many series."""
    if not client.engine:
        client.detect_engine(end_ns / 1e9)
    if client.engine != "victoriametrics":
        raise AgentError(
            f"rollups status over PromQL reads sample times with MetricsQL: {client.conn.url} is "
            "not VictoriaMetrics (query gpuagent:gpu_power_power_count:1m there instead)"
        )
    levels = []
    for level in LEVELS:
        name = record(_rollup(GPU_POWER), _field(GPU_POWER, "power_count"), level.name)
        held = _stamps(client, level, where, end_ns - since_ns, end_ns)
        sel = f"{name}{{{where}}}" if where else name
        series = client.query(f"count(last_over_time({sel}[{_ms(since_ns)}]))", end_ns / 1e9, "rollup series")
        levels.append(
            {
                "level": level.name,
                "resolution_s": level.seconds,
                "record": name,
                "series": int(float(series[0]["value"][1])) if series else 0,
                "from": rfc3339(held[0] - level.ns) if held else None,
                "to": rfc3339(held[1]) if held else None,
            }
        )
    return {"url": client.conn.url, "engine": client.engine, "levels": levels}
