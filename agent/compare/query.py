"""InfluxQL over HTTP: connection settings from `[sinks.influxdb]`, `/query` and `/write` calls.

One client for InfluxDB 1.x (`/query?db=`, Basic auth), 2.x through its
v1-compatible API (a DBRP mapping of the bucket, `Authorization: Token …`)
and 3.x (`/query?db=` with a token), through gpuagent.pipeline.http_client (a deadline on each
request as a whole, a bounded answer).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gpuagent.config import format_validation_error, read_config, resolve_path
from gpuagent.errors import AgentError, ConfigError
from gpuagent.pipeline import http_client
from gpuagent.plugin_host import registered


@dataclass
class Connection:
    url: str = "http://127.0.0.1:8086"
    database: str = ""
    retention_policy: str = ""
    token: str | None = None
    username: str = ""
    password: str | None = None
    timeout: float = 30.0
    verify_tls: bool = True

    @property
    def label(self) -> str:
        return f"{self.url} (database {self.database!r})"


def connection_from(
    config_path: str | None,
    url: str | None = None,
    database: str | None = None,
    token: str | None = None,
    username: str | None = None,
    password: str | None = None,
) -> Connection:
    """Settings of `[sinks.influxdb]` in the config (when there is one), overridden by the flags.

    With api v2 the bucket is the database name of the v1-compatible API
    (`bucket = "db/rp"` names a retention policy too, as InfluxDB 1.8 takes it).
    """
    conn = Connection()
    # An explicit --url names another server: the implicit default config's credentials are not for it.
    table = _sink_table(config_path, bool(url and database)) if config_path or not url else None
    if table is not None:
        try:
            cfg = registered("sinks", "influxdb").Config.model_validate(table)
        except ValidationError as exc:
            path = resolve_path(config_path)
            assert path is not None  # the table was read from it
            label = path.name
            raise ConfigError(f"{label}: {format_validation_error(exc, ('sinks', 'influxdb'))}") from None
        conn.url = cfg.url
        if cfg.api == "v1":
            conn.database, conn.retention_policy = cfg.database, cfg.retention_policy
        else:
            db, _, rp = cfg.bucket.partition("/")
            conn.database, conn.retention_policy = db, rp
        token = cfg.read_token()  # the sink's own reader: an empty token_file is an error here too
        if token is not None:
            conn.token = token
        if cfg.username:
            conn.username = cfg.username
            conn.password = cfg.password.get_secret_value() if cfg.password else ""
        conn.timeout = max(cfg.timeout, 30.0)
        conn.verify_tls = cfg.verify_tls
    if url:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise AgentError(f"--url {url!r}: expected http://HOST:PORT or https://HOST:PORT")
        conn.url = url
    if database:
        conn.database = database
    if token:
        conn.token = token
    if username:
        conn.username, conn.password = username, password or ""
    conn.url = conn.url.rstrip("/")
    if not conn.database:
        raise AgentError(
            "no InfluxDB database: pass --database, or set database (api v1) or bucket (api v2) "
            "in [sinks.influxdb] of --config"
        )
    return conn


def _sink_table(config_path: str | None, flags_connect: bool = False) -> dict | None:
    """The config's [sinks.influxdb]; a --config without one is refused unless --url and --database
    name the server (the file then gives the rest: prices, the [compare] settings)."""
    if resolve_path(config_path) is None:
        return None
    config = read_config(config_path)
    table = config.raw.get("sinks", {}).get("influxdb")
    if table is None and config_path and not flags_connect:
        raise ConfigError(f"{config.label}: no [sinks.influxdb] table (or pass --url and --database)")
    return table


SLOW = "a long range or a large fleet: give it longer with --timeout"


class CannedAnswer(AgentError):
    """The server answers every InfluxQL statement with the same list of databases: VictoriaMetrics
    (it takes InfluxDB writes into any database name, a `db` label, but queries only in PromQL)."""


def _canned(q: str, series: list[dict[str, Any]]) -> bool:
    # VictoriaMetrics' /query: SHOW DATABASES' answer whatever was asked; an InfluxDB never answers
    # a SELECT, a SHOW of something else or a CREATE with a series "databases" of one column "name".
    return (
        not q.lstrip().upper().startswith("SHOW DATABASES")
        and len(series) == 1
        and series[0].get("name") == "databases"
        and series[0].get("columns") == ["name"]
    )


ANSWER_BYTES = 256 << 20  # the most of one query's answer read; a range that asks more is cut
TOO_BIG = "narrow it with --since or --where"


MESSAGE_CHARS = 300  # what an error line quotes of a server's words


def one_line(text: Any, limit: int = MESSAGE_CHARS) -> str:
    """A server's words fit for one error line: whitespace folded, at most `limit` characters."""
    text = " ".join(str(text)[: limit * 4].split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def json_doc(body: bytes) -> Any:
    """The JSON document of an answer, or None when it is not JSON: NaN and Infinity (neither
    InfluxDB nor Prometheus writes them bare) and nesting deeper than Python's stack included."""
    try:
        return json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None


class BadAnswer(AgentError):
    """The server answered, but not in the shape its API has (a proxy, a hostile server)."""


def _check_series(series: Any, server: str) -> list[dict[str, Any]]:
    """InfluxDB's series list, checked for the shape every reader here takes for granted."""
    if not isinstance(series, list):
        raise BadAnswer(f"{server} answered a 'series' that is not a list")
    for one in series:
        if not isinstance(one, dict) or not isinstance(one.get("columns", []), list):
            raise BadAnswer(f"{server} answered a series without a list of columns")
        if not isinstance(one.get("values", []), list) or not all(isinstance(v, list) for v in one.get("values", [])):
            raise BadAnswer(f"{server} answered a series whose values are not rows")
        if not isinstance(one.get("tags") or {}, dict):
            raise BadAnswer(f"{server} answered a series whose tags are not a table")
    return series


@contextlib.contextmanager
def reading(server: str):
    """What an answer of the right outline but the wrong content (a string where a number goes, a
    row shorter than its columns) makes a reader trip on, as one line naming the server."""
    try:
        yield
    except (TypeError, KeyError, IndexError, AttributeError, ValueError, ArithmeticError, RecursionError) as exc:
        raise BadAnswer(
            f"the answer of {server} is not one gpuagent can read ({type(exc).__name__}: {one_line(exc, 160)})"
        ) from None


class NoAnswer(AgentError):
    """The server was unreachable or did not answer within the deadline: asking it something
    else (a fallback) would only wait as long again."""


def send(
    method: str,
    url: str,
    timeout: float,
    verify_tls: bool,
    server: str,
    purpose: str = "",
    body: bytes | None = None,
    headers: dict | None = None,
) -> http_client.Answer:
    """One request to a query server, or one AgentError line naming `server` (and `purpose`):
    unreachable, slow (the deadline passed after it took the connection) or an answer too long."""
    why = f" ({purpose})" if purpose else ""
    try:
        answer = http_client.request(
            method, url, timeout=timeout, body=body, headers=headers, limit=ANSWER_BYTES, verify_tls=verify_tls
        )
    except http_client.RequestFailed as exc:
        if exc.timed_out and exc.connected:
            slow = f"{purpose}; {SLOW}" if purpose else SLOW
            raise NoAnswer(f"{server} did not answer within {timeout:g}s ({slow})") from None
        raise NoAnswer(f"cannot reach {server}{why}: {exc.reason}") from None
    if not answer.complete:  # NoAnswer: a fallback (raw points for rollups) would be asked as much
        raise NoAnswer(f"{server} answered more than {ANSWER_BYTES >> 20} MiB{why}: {TOO_BIG}")
    return answer


class InfluxQL:
    """A thin InfluxQL client: `query(q)` -> the result's series; `write(body)` -> posts line protocol."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self._headers: dict[str, str] = {}
        if conn.token:
            self._headers["Authorization"] = f"Token {conn.token}"
        elif conn.username:
            pair = f"{conn.username}:{conn.password or ''}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        self.requests = 0
        self._count_lock = threading.Lock()

    def _request(self, method: str, path: str, params: dict, body: bytes | None = None, headers=None):
        url = f"{self.conn.url}{path}?{urllib.parse.urlencode(params)}"
        with self._count_lock:  # a report asks several queries at once
            self.requests += 1
        return send(
            method,
            url,
            self.conn.timeout,
            self.conn.verify_tls,
            f"InfluxDB at {self.conn.url}",
            body=body,
            headers={**self._headers, **(headers or {})},
        )

    def query(self, q: str, post: bool = False) -> list[dict[str, Any]]:
        """Run one InfluxQL statement; the series of its result (`[]` when nothing matched).
        ``post``: a statement that changes the server (CREATE ...), which 1.x takes by POST only.
        An answer a server's max-row-limit cut short (its series marked partial) is asked again in
        chunks, which that limit does not cut (chunks cost the server more: not by default)."""
        resp = self._request("POST" if post else "GET", "/query", self._params(q))
        series = _check_series(self._results(resp, resp.body)[0].get("series", []), self._server)
        if _canned(q, series):
            raise CannedAnswer(
                f"{self.conn.url} answers InfluxQL with canned results (VictoriaMetrics takes InfluxDB writes, "
                f"not InfluxQL queries): query it with --promql-url {self.conn.url}"
            )
        if post or not any(one.get("partial") for one in series):
            return series
        resp = self._request("GET", "/query", {**self._params(q), "chunked": "true", "chunk_size": "10000"})
        series = []
        for line in (resp.body or b"").splitlines():
            if not line.strip():
                continue
            for one in _check_series(self._results(resp, line)[0].get("series", []), self._server):
                last = series[-1] if series else None
                if last and (last.get("name"), last.get("tags")) == (one.get("name"), one.get("tags")):
                    last.setdefault("values", []).extend(one.get("values", []))  # a series split across chunks
                else:
                    series.append(one)
        for one in series:
            one.pop("partial", None)
        return series

    def _params(self, q: str) -> dict[str, str]:
        params = {"db": self.conn.database, "q": q, "epoch": "ns"}
        if self.conn.retention_policy:
            params["rp"] = self.conn.retention_policy
        return params

    @property
    def _server(self) -> str:
        return f"InfluxDB at {self.conn.url}"

    def _results(self, resp, body: bytes) -> list[dict[str, Any]]:
        doc = json_doc(body or b"{}")
        if resp.status in (401, 403):
            raise AgentError(f"InfluxDB at {self.conn.url} refused the credentials ({resp.status})")
        if not isinstance(doc, dict):
            if resp.status >= 300:
                raise AgentError(f"InfluxDB at {self.conn.url} answered {resp.status} to /query")
            raise BadAnswer(
                f"{self._server} answered what is not InfluxDB's JSON: {one_line(body[:400].decode(errors='replace'), 120)!r}"
            )
        results = doc.get("results") or [{}]
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise BadAnswer(f"{self._server} answered 'results' that are not a list of tables")
        error = doc.get("error") or next((r["error"] for r in results if "error" in r), None)
        if error:
            if "database not found" in str(error):
                raise AgentError(f"InfluxDB at {self.conn.url}: database {self.conn.database!r} not found")
            raise AgentError(f"InfluxDB at {self.conn.url} refused a query: {one_line(error)}")
        if resp.status >= 300:
            raise AgentError(f"InfluxDB at {self.conn.url} answered {resp.status} to /query")
        return results

    def rows(self, q: str) -> list[dict[str, Any]]:
        """Every row of every series as a dict, its series' tags merged in."""
        out = []
        for series in self.query(q):
            tags = series.get("tags") or {}
            for values in series.get("values", []):
                row = dict(zip(series["columns"], values, strict=True))
                row.update(tags)
                out.append(row)
        return out

    def write(self, body: bytes) -> None:
        params = {"db": self.conn.database, "precision": "ns"}
        if self.conn.retention_policy:
            params["rp"] = self.conn.retention_policy
        data = gzip.compress(body, compresslevel=1)
        resp = self._request(
            "POST",
            "/write",
            params,
            data,
            {"Content-Type": "text/plain; charset=utf-8", "Content-Encoding": "gzip"},
        )
        if resp.status >= 300:
            text = one_line(resp.body[:2000].decode(errors="replace"))
            raise AgentError(f"InfluxDB at {self.conn.url} refused a write ({resp.status}): {text}")

    def close(self) -> None:
        pass  # a connection per request: nothing is kept open


def quote_ident(name: str) -> str:
    """An InfluxQL identifier in double quotes (CREATE DATABASE "x"), its quotes and backslashes escaped."""
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'
