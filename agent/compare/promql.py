"""The Prometheus HTTP query API (`/api/v1/query`, `/api/v1/query_range`) for `gpuagent compare`.

Works with Prometheus, VictoriaMetrics (single node, or a cluster's vmselect
with its `/select/0/prometheus` prefix in the URL), Mimir and Thanos: only
the standard API is used; `engine` says whether MetricsQL's
`tfirst_over_time` / `tlast_over_time` exist (VictoriaMetrics), which spares
a subquery. Every failure is one line naming the URL and what the query was
for. Requests go through gpuagent.pipeline.http_client (a deadline on each as a whole).
"""

from __future__ import annotations

import re
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gpuagent.compare import where as where_rule
from gpuagent.compare.core import Range
from gpuagent.compare.query import BadAnswer, json_doc, one_line, send
from gpuagent.config import CompareSection, read_config, resolve_path
from gpuagent.errors import AgentError
from gpuagent.plugin_host import registered
from gpuagent.schema.measurements import GPU_POWER


@dataclass
class PromConnection:
    url: str
    timeout: float = 60.0
    verify_tls: bool = True
    scheme: str = "auto"  # auto, influx (line protocol in VictoriaMetrics), prometheus (/metrics scraped)
    namespace: str = "gpuagent"
    token: str | None = None  # sent as Authorization: Bearer

    @property
    def label(self) -> str:
        return self.url

    database = ""  # the InfluxQL report's `source` has a database; PromQL has none


def promql_url_from(config_path: str | None, url: str | None, influx_url: str | None) -> str | None:
    """The PromQL URL to use, or None for the InfluxQL path: --promql-url, else `[compare] promql_url`
    of the config unless an InfluxDB --url was given."""
    if url and influx_url:
        raise AgentError("give --url (InfluxQL) or --promql-url (PromQL), not both")
    if url or influx_url:
        return url
    if resolve_path(config_path) is None:
        return None
    return read_config(config_path).compare.promql_url or None


def prom_connection_from(config_path: str | None, url: str | None) -> PromConnection:
    """`--promql-url` over `[compare] promql_url` of the config (with scheme, namespace, timeout):
    the table as gpuagent.config.CompareSection typed it (a wrong key or type is one line there)."""
    cfg = CompareSection()
    if (config_path or not url) and resolve_path(config_path) is not None:
        cfg = read_config(config_path).compare
    url = url or cfg.promql_url
    parts = urllib.parse.urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise AgentError(f"--promql-url {url!r}: expected http://HOST:PORT[/prefix] or https://…")
    return PromConnection(url.rstrip("/"), cfg.timeout, cfg.verify_tls, cfg.scheme, cfg.namespace, cfg.token)


class PromQL:
    """`query(q, at, purpose)` -> the result list; `many([...])` runs several at once."""

    def __init__(self, conn: PromConnection, workers: int = 4):
        self.conn = conn
        self._headers = {"Content-Type": "application/x-www-form-urlencoded"}
        if conn.token:
            self._headers["Authorization"] = f"Bearer {conn.token}"
        self.workers = workers
        self.requests = 0
        self.engine = ""  # "victoriametrics" or "prometheus", from `detect_engine()`

    def _post(self, path: str, params: dict, purpose: str) -> Any:
        url = f"{self.conn.url}{path}"
        self.requests += 1
        resp = send(
            "POST",
            url,
            self.conn.timeout,
            self.conn.verify_tls,
            f"the PromQL server at {self.conn.url}",
            purpose,
            urllib.parse.urlencode(params).encode(),
            self._headers,
        )
        doc = json_doc(resp.body or b"{}")
        if not isinstance(doc, dict):
            doc = {}
        if resp.status in (401, 403):
            raise AgentError(f"the PromQL server at {self.conn.url} refused the credentials ({resp.status}, {purpose})")
        if resp.status >= 300 or doc.get("status") != "success":
            error = doc.get("error") or resp.body[:2000].decode(errors="replace").strip() or f"HTTP {resp.status}"
            raise AgentError(f"the PromQL server at {self.conn.url} answered an error ({purpose}): {one_line(error)}")
        data = doc.get("data", {})
        if not isinstance(data, dict):
            raise BadAnswer(f"the PromQL server at {self.conn.url} answered 'data' that is not a table ({purpose})")
        return data

    def query(self, q: str, at_s: float, purpose: str) -> list[dict]:
        return self._result(self._post("/api/v1/query", {"query": q, "time": f"{at_s:.3f}"}, purpose), purpose)

    def _result(self, data: dict, purpose: str) -> list[dict]:
        result = data.get("result", [])
        if not isinstance(result, list) or not all(isinstance(r, dict) for r in result):
            raise BadAnswer(f"the PromQL server at {self.conn.url} answered a 'result' that is not a list ({purpose})")
        return result

    def query_range(self, q: str, start_s: float, end_s: float, step_s: float, purpose: str) -> list[dict]:
        # nocache=1: VictoriaMetrics otherwise moves start (of a range of 50 steps or more) onto a
        # multiple of step, and each point's window with it; Prometheus ignores the parameter.
        params = {"query": q, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:g}", "nocache": "1"}
        return self._result(self._post("/api/v1/query_range", params, purpose), purpose)

    def many(self, calls: list[tuple]) -> list[list[dict]]:
        """[(q, at_s, purpose), ...] -> their results, asked `workers` at a time."""
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(lambda c: self.query(*c), calls))

    def detect_engine(self, at_s: float) -> str:
        """VictoriaMetrics knows MetricsQL's tlast_over_time; Prometheus refuses it as an unknown function."""
        try:
            self.query("tlast_over_time(gpuagent_engine_probe[1m])", at_s, "detecting the engine")
            self.engine = "victoriametrics"
        except AgentError as exc:
            if any(word in str(exc) for word in ("cannot reach", "credentials", "did not answer")):
                raise  # not a refusal of the function: no engine can be told from it
            self.engine = "prometheus"
        return self.engine

    def close(self) -> None:
        pass  # a connection per request: nothing is kept open


_MATCHERS = re.compile(
    r'\s*[a-zA-Z_]\w*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*(,\s*[a-zA-Z_]\w*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*)*,?\s*'
)


class PromNames:
    """What every PromQL query over one range shares: the series names of the scheme (`influx`:
    `<measurement>_<field>` of line protocol; `prometheus`: the agent's /metrics, base units undone with
    the sink's own mapping), the --where label matchers, the instant the range ends at and its window.
    The PromQL report and the work figures both ask through it."""

    def __init__(self, client: PromQL, rng: Range, where: str | None = None):
        where = where_rule.promql(where)
        if where and not _MATCHERS.fullmatch(where):
            raise AgentError(
                f'--where with --promql-url: PromQL label matchers such as host=~"rack-3-.*", got {where!r}'
            )
        self.client, self.range, self.where = client, rng, where
        self.at = (rng.end_ns - 1_000_000) / 1e9  # [start, end): the window ends 1 ms before end
        self.window = f"{max(1, (rng.end_ns - rng.start_ns) // 1_000_000)}ms"
        self.scheme = client.conn.scheme
        self.namespace = client.conn.namespace

    def name(self, measurement: str, field: str, is_string: bool = False) -> tuple[str, float]:
        """The series' name and the scale of its values (a /metrics series in base units: 1e-3 for mW)."""
        if self.scheme == "influx":
            return f"{measurement}_{field}", 1.0
        spec = registered("sinks", "prometheus").metric_for(self.namespace, measurement, field, is_string)
        return spec.name, spec.scale

    def selector(self, measurement: str, field: str, is_string: bool = False) -> str:
        """The field's series, with the --where matchers."""
        name, _ = self.name(measurement, field, is_string)
        return f"{name}{{{self.where}}}" if self.where else name

    def range_selector(self, measurement: str, field: str) -> str:
        """The field's samples over the whole range."""
        return f"{self.selector(measurement, field)}[{self.window}]"

    def detect_scheme(self) -> None:
        """`auto`: the scheme whose power series exist in the range."""
        if self.scheme != "auto":
            return
        # One engine may hold both (a VictoriaMetrics fed by /write and by a scrape): line protocol wins.
        for scheme in ("influx", "prometheus"):
            self.scheme = scheme
            found = self.client.query(
                f"count(count_over_time({self.range_selector(GPU_POWER, 'power_w')}))",
                self.at,
                f"looking for {scheme}-named power series",
            )
            if found:
                return
        self.scheme = "influx"
