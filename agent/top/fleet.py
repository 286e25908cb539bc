"""The fleet's frame from the server the agents write to: InfluxQL (`/query`) or the Prometheus
query API, through gpuagent compare's clients and connection options.

Each refresh asks for every GPU's newest sample within the window (`LAST()` per series in
InfluxQL, `last_over_time` in PromQL): a handful of queries whatever the fleet's size, one
number per GPU back. Rows are hosts (or models), the GPUs' figures aggregated: utilisation and
clocks averaged, memory and power summed, the hottest temperature, the commonest throttle
reason, the worst verdict. The refresh follows the server's pace: the gap between a GPU's two
newest power samples.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

from gpuagent.errors import AgentError
from gpuagent.schema.measurements import GPU_HEALTH, GPU_POWER
from gpuagent.top.model import ROW_READS, Frame, Row, gpu_row, severity, worst

# measurement -> fields a row needs of it, but health's (asked per engine: PromQL has no strings)
FIELDS = {m: fields for m, fields in ROW_READS.items() if m != GPU_HEALTH}
PACE_MIN_S, PACE_MAX_S, PACE_DEFAULT_S = 1.0, 60.0, 10.0


class FleetSource:
    """read(host=None) -> a Frame of hosts (or models), or of one host's GPUs."""

    promql = False  # which language --where is in

    def __init__(self, client, by: str = "host", window_s: float = 300.0, where: str | None = None):
        from gpuagent.compare import where as where_rule

        where = where_rule.promql(where) if self.promql else where_rule.influxql(where)  # one condition
        self.client, self.by, self.window_s, self.where = client, by, window_s, where
        self.label = getattr(client.conn, "label", client.conn.url)
        self.interval = PACE_DEFAULT_S

    def gpus(self, host: str | None) -> list[dict]:
        raise NotImplementedError  # per engine: InfluxFleet, PromFleet

    def read(self, host: str | None = None) -> Frame:
        from gpuagent.compare.query import reading

        with reading(self.client.conn.url):  # a hostile server's answer: one line, no traceback
            return self._read(host)

    def _read(self, host: str | None) -> Frame:
        gpus = self.gpus(host)
        if host is not None:
            rows = [gpu_row(g, f"{g['host']}/{g['gpu']}", g["gpu"]) for g in sorted(gpus, key=lambda g: int(g["gpu"]))]
            frame = Frame(title=f"fleet  {self.label}", rows=rows, by="gpu")
        else:
            groups: dict[str, list[dict]] = defaultdict(list)
            for g in gpus:
                groups[g[self.by]].append(g)
            rows = [aggregate(name, members, self.by) for name, members in groups.items()]
            rows.sort(key=lambda r: (-severity(r.verdict), r.label))  # worst health first
            hosts = len({g["host"] for g in gpus})
            frame = Frame(title=f"fleet  {self.label}  {hosts} hosts, {len(gpus)} GPUs", rows=rows, by=self.by)
        if not gpus:
            frame.note = f"no GPU sample in the last {self.window_s:g}s" + (f" for host {host}" if host else "")
        frame.time_s = time.time()
        return frame

    def close(self) -> None:
        self.client.close()


def _mean(values):
    seen = [v for v in values if v is not None]
    return sum(seen) / len(seen) if seen else None


def _sum(values):
    seen = [v for v in values if v is not None]
    return sum(seen) if seen else None


def aggregate(name: str, members: list[dict], by: str) -> Row:
    """One host's (or model's) GPUs as one row."""
    rows = [gpu_row(g, "", "") for g in members]
    throttles = Counter(r.throttle for r in rows if r.throttle and r.throttle != "none")
    verdict = worst(r.verdict for r in rows)
    reasons = [r.reason for r in rows if r.verdict == verdict and r.reason and verdict != "ok"]
    return Row(
        key=f"{by}:{name}",
        label=name,
        kind=by,
        gpus=len(rows),
        model=", ".join(sorted({r.model for r in rows})),
        util_pct=_mean(r.util_pct for r in rows),
        mem_used=_sum(r.mem_used for r in rows),
        mem_total=_sum(r.mem_total for r in rows),
        power_w=_sum(r.power_w for r in rows),
        power_limit_w=_sum(r.power_limit_w for r in rows),
        sm_mhz=_mean(r.sm_mhz for r in rows),
        sm_max_mhz=_mean(r.sm_max_mhz for r in rows),
        temp_c=max((r.temp_c for r in rows if r.temp_c is not None), default=None),
        throttle=throttles.most_common(1)[0][0] if throttles else ("none" if any(r.throttle for r in rows) else None),
        verdict=verdict,
        reason=reasons[0] if reasons else "",
    )


class InfluxFleet(FleetSource):
    """InfluxQL: one LAST() query per measurement, grouped by GPU."""

    def _cond(self, host: str | None) -> str:
        from gpuagent.compare.query import quote_ident

        cond = f"time > now() - {int(self.window_s * 1000)}ms"
        if self.where:
            cond += f" AND ({self.where})"
        if host is not None:
            cond += f" AND {quote_ident('host')} = '" + host.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return cond

    def gpus(self, host: str | None) -> list[dict]:
        from gpuagent.compare.query import quote_ident

        cond = self._cond(host)
        by_gpu: dict[tuple, dict] = {}
        queries = {**FIELDS, GPU_HEALTH: ROW_READS[GPU_HEALTH]}
        for measurement, fields in queries.items():
            select = ", ".join(f"LAST({quote_ident(f)}) AS {quote_ident(f)}" for f in fields)
            q = f'SELECT {select} FROM {quote_ident(measurement)} WHERE {cond} GROUP BY "host", "gpu", "model"'
            for row in self.client.rows(q):
                key = (row.get("host", ""), row.get("gpu", ""))
                if not key[1].isdigit():
                    continue
                entry = by_gpu.setdefault(key, {"host": key[0], "gpu": key[1], "model": row.get("model", "")})
                entry.update({f: row[f] for f in fields if row.get(f) is not None})
        self._pace(cond)
        return list(by_gpu.values())

    def _pace(self, cond: str) -> None:
        series = self.client.query(
            f'SELECT "power_w" FROM "{GPU_POWER}" WHERE {cond} GROUP BY "host", "gpu" ORDER BY time DESC LIMIT 2'
        )
        for s in series[:1]:
            times = [v[0] for v in s.get("values", [])]
            if len(times) == 2 and times[0] != times[1]:
                self.interval = min(PACE_MAX_S, max(PACE_MIN_S, abs(times[0] - times[1]) / 1e9))


class PromFleet(FleetSource):
    """The Prometheus query API: last_over_time per series, under either name scheme (see compare)."""

    promql = True

    def __init__(self, client, by: str = "host", window_s: float = 300.0, where: str | None = None):
        from gpuagent.compare.core import Range
        from gpuagent.compare.promql import PromNames

        super().__init__(client, by, window_s, where)
        now = time.time_ns()
        # compare's naming: the two name schemes and the --where matchers.
        self.names = PromNames(client, Range(now - int(window_s * 1e9), now), where)
        self.window = f"{int(window_s * 1000)}ms"

    def _sel(self, name: str, host: str | None) -> str:
        matchers = [m for m in (self.where, _host_matcher(host)) if m]
        return f"{name}{{{', '.join(matchers)}}}" if matchers else name

    def gpus(self, host: str | None) -> list[dict]:
        at = time.time()
        if not self.client.engine:
            self.client.detect_engine(at)
            self.names.at = at
            self.names.detect_scheme()
        calls: list[tuple[str, float, str]] = []
        keys: list[tuple[str, float | None]] = []  # (field, scale); the verdict has none
        for measurement, fields in FIELDS.items():
            for f in fields:
                name, scale = self.names.name(measurement, f)
                calls.append((f"last_over_time({self._sel(name, host)}[{self.window}])", at, f"newest {name}"))
                keys.append((f, scale))
        verdict_spec = None
        if self.names.scheme == "prometheus":
            from gpuagent.plugin_host import registered

            verdict_spec = registered("sinks", "prometheus").metric_for(
                self.names.namespace, GPU_HEALTH, "verdict", True
            )
            # A GPU has a series per verdict it ever had: the one sampled last is its verdict now.
            calls.append((f"timestamp({self._sel(verdict_spec.name, host)})", at, "newest verdict"))
        else:  # line protocol in VictoriaMetrics keeps no strings: only `lost` says anything of health
            name, _ = self.names.name(GPU_HEALTH, "lost")
            calls.append((f"last_over_time({self._sel(name, host)}[{self.window}])", at, "newest lost flag"))
        keys.append(("verdict", None))
        by_gpu: dict[tuple, dict] = {}
        for (f, divisor), result in zip(keys, self.client.many(calls), strict=True):
            for r in result:
                m = r["metric"]
                key = (m.get("host", ""), m.get("gpu", ""))
                if not key[1].isdigit():
                    continue
                entry = by_gpu.setdefault(key, {"host": key[0], "gpu": key[1], "model": m.get("model", "")})
                value = float(r["value"][1])
                if f == "verdict":
                    if verdict_spec is not None:
                        if value >= entry.get("_verdict_at", float("-inf")):
                            entry["verdict"], entry["_verdict_at"] = m.get(verdict_spec.label), value
                    elif value:
                        entry["verdict"] = "lost"
                else:
                    entry[f] = value / divisor if divisor else value
        self._pace(by_gpu, at)
        return list(by_gpu.values())

    def _pace(self, gpus: dict, at: float) -> None:
        """Seconds between one GPU's two newest power samples (a range vector of that one series)."""
        if not gpus:
            return
        host, gpu = next(iter(gpus))
        name, _ = self.names.name(GPU_POWER, "power_w")
        gpu_matcher = 'gpu="' + gpu + '"'
        matchers = ", ".join(m for m in (self.where, _host_matcher(host), gpu_matcher) if m)
        one = f"{name}{{{matchers}}}"
        try:
            result = self.client.query(f"{one}[{self.window}]", at, "the sample pace")
        except AgentError:
            return
        for r in result[:1]:
            times = [float(t) for t, _ in r.get("values", [])[-2:]]
            if len(times) == 2 and times[1] > times[0]:
                self.interval = min(PACE_MAX_S, max(PACE_MIN_S, times[1] - times[0]))


def _host_matcher(host: str | None) -> str:
    if host is None:
        return ""
    return 'host="' + host.replace("\\", "\\\\").replace('"', '\\"') + '"'
