"""Line protocol over HTTP to an InfluxDB-compatible write API, and what each answer means.

v1: POST /write?db=&rp=&precision=ns (InfluxDB 1.x); v2: POST /api/v2/write?org=&bucket=&precision=ns
(InfluxDB 2.x, 3.x, Cloud, 1.8+, VictoriaMetrics). Requests go through gpuagent.pipeline.http_client
(a whole-request deadline, a bounded answer); ``classify_http`` turns the answer into the Result
that gpuagent.pipeline.batch_sender settles. The influxdb sink gives its options; the rest is here.
"""

from __future__ import annotations

import base64
import gzip
import re
import threading
import urllib.parse
from typing import TYPE_CHECKING, Literal

import gpuagent
from gpuagent.pipeline import http_client
from gpuagent.pipeline.backoff import parse_retry_after
from gpuagent.pipeline.batch_sender import BAD_REQUEST_HINT, Outcome, Result

if TYPE_CHECKING:
    import http.client

ANSWER_BYTES = 4096  # the most read of an answer's body; more is never needed to tell what happened
REFUSAL_BYTES_PER_LINE = 256  # a 400/422 may quote every refused line: "unable to parse '<line>': <why>"
MESSAGE_CHARS = 2000  # what a Result keeps of the server's words (logs quote less)
NO_V2_HINT = 'the server has no v2 write API (/api/v2/write); InfluxDB 1.x before 1.8: set api = "v1"'

_UNABLE_TO_PARSE = re.compile(r"unable to parse")
_DROPPED = re.compile(r"dropped=(\d+)")
# The words of InfluxDB's own refusals of lines (1.x models/points.go and tsdb, 2.x's "invalid"):
# only a 400 that says one of these may cost lines.
_LINE_ERROR = re.compile(
    r"unable to parse|partial write|field type conflict|failed to parse|invalid field|bad timestamp"
    r"|line protocol|missing (?:fields|tag value|measurement)|invalid (?:number|boolean|tag)",
    re.IGNORECASE,
)


def answer_limit(status: int, sent: int, lines: int) -> int:
    """How much of an answer's body to read. A refusal of lines may list each of them (the count
    of a partial write comes from that list), so it may be as long as what was sent; any other
    body is read up to ANSWER_BYTES (a 500 with a 1 GiB body must not cost 1 GiB)."""
    if status in (400, 422):
        return ANSWER_BYTES + sent + REFUSAL_BYTES_PER_LINE * lines
    return ANSWER_BYTES


def classify_http(status: int, body: bytes | str | None, headers=None) -> Result:
    """Turn an HTTP answer from an InfluxDB-compatible /write into a Result."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    text = text.strip()
    message = " ".join(text[: MESSAGE_CHARS * 2].split())[:MESSAGE_CHARS]  # one log line, even from an HTML page
    if 200 <= status < 300:
        return Result(Outcome.ACCEPTED, status)
    if status in (400, 422):
        if "partial write" in text:
            # Counted from the whole message: each refused line has its "unable to parse".
            rejected = len(_UNABLE_TO_PARSE.findall(text)) + sum(int(n) for n in _DROPPED.findall(text))
            return Result(Outcome.PARTIAL, status, message, rejected=max(rejected, 1))
        if status == 422 or _LINE_ERROR.search(text):
            return Result(Outcome.REJECTED, status, message)
        return Result(Outcome.FATAL, status, message, hint=BAD_REQUEST_HINT)
    if status == 413:
        return Result(Outcome.TOO_LARGE, status, message)
    if status in (401, 403, 404):
        return Result(Outcome.FATAL, status, message)
    if 300 <= status < 400:
        where = headers.get("Location") if headers is not None and hasattr(headers, "get") else None
        message = f"redirected to {where or '(no Location)'}, not followed: set url to where it points"
    return Result(Outcome.RETRY, status, message, retry_after=parse_retry_after(headers))


def write_path(url: str, api: Literal["v1", "v2"], org: str, bucket: str, database: str, retention_policy: str) -> str:
    """The request target of a write: the url's path (a proxy's prefix) and the API's own."""
    base = urllib.parse.urlsplit(url).path.rstrip("/") or ""
    if api == "v2":
        return (
            base + "/api/v2/write?" + urllib.parse.urlencode({"org": org or "-", "bucket": bucket, "precision": "ns"})
        )
    params = {"db": database, "precision": "ns"}
    if retention_policy:
        params["rp"] = retention_policy
    return base + "/write?" + urllib.parse.urlencode(params)


def authorization(url: str, api: Literal["v1", "v2"], token: str | None, username: str, password: str) -> str | None:
    """The Authorization header, or None: a token; else a username and password (Basic, or for v2 the
    "user:password" token of InfluxDB 1.8's v2 compatibility); else the credentials in the url."""
    if api == "v2" and not token and username:
        token = f"{username}:{password}"
    if token:
        return f"Token {token}"
    if username:
        return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
    parts = urllib.parse.urlsplit(url)
    if parts.username:  # http://user:password@host: http.client ignores credentials in a URL
        pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        return "Basic " + base64.b64encode(pair.encode()).decode()
    return None


class HTTPWrite:
    """The Transport of an InfluxDB-compatible server: POSTs line protocol to `url`'s write API (`api`,
    into `bucket` of `org`, or `database` and `retention_policy`), with `auth` as its Authorization.
    A send that takes `timeout` in all fails (and is retried) by then, in the calling thread. Up to
    two keep-alive connections (a replay keeps two requests in flight)."""

    def __init__(
        self,
        url: str,
        *,
        api: Literal["v1", "v2"] = "v2",
        org: str = "",
        bucket: str = "",
        database: str = "",
        retention_policy: str = "",
        auth: str | None = None,
        timeout: float = 10.0,
        verify_tls: bool = True,
        gzip: bool = True,
    ):
        import http.client  # noqa: F401  here, not at import: it loads ssl (4 MB) on agents that never send

        self._url = url
        self._path = write_path(url, api, org, bucket, database, retention_policy)
        self._v2 = api == "v2"
        self._verify_tls = verify_tls
        self._headers = {
            "Content-Type": "text/plain; charset=utf-8",
            "Accept": "application/json",
            "User-Agent": f"gpuagent/{gpuagent.__version__}",
        }
        if gzip:
            self._headers["Content-Encoding"] = "gzip"
        if auth:
            self._headers["Authorization"] = auth
        self._gzip = gzip
        self._timeout = timeout
        self._lock = threading.Lock()
        self._idle: list[http.client.HTTPConnection] = []
        self._active: set[http.client.HTTPConnection] = set()
        self._closed = False

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return http_client.connection(self._url, self._timeout, self._verify_tls), False

    def send(self, body: bytes, lines: int) -> Result:
        data = gzip.compress(body, compresslevel=1) if self._gzip else body
        for _attempt in (1, 2):
            conn, reused = self._connection()
            result, retry = self._request(conn, data, len(body), lines, reused)
            if not retry:
                return result
        return result

    def _request(
        self, conn: http.client.HTTPConnection, data: bytes, sent: int, lines: int, reused: bool
    ) -> tuple[Result, bool]:
        """One request on conn: (result, whether to try once more on a fresh connection)."""
        with self._lock:
            self._active.add(conn)
        try:
            answer = http_client.exchange(
                conn,
                "POST",
                self._path,
                timeout=self._timeout,
                body=data,
                headers=self._headers,
                limit=lambda status: answer_limit(status, sent, lines),
            )
        except http_client.RequestFailed as exc:
            if exc.timed_out and exc.connected:
                return Result(Outcome.RETRY, None, exc.reason), False
            if self._closed:
                return Result(Outcome.RETRY, None, "cut short: the agent is stopping"), False
            # A kept-alive connection the server closed meanwhile: one more try on a new one.
            return Result(Outcome.RETRY, None, exc.reason), reused and not exc.answered
        finally:
            with self._lock:
                self._active.discard(conn)
        if not answer.reusable:
            # The deadline passed as the answer completed (the socket is gone), or the rest
            # of a long body is not worth reading: this connection cannot be used again.
            conn.close()
        else:
            with self._lock:
                if self._closed or len(self._idle) >= 2:
                    conn.close()
                else:
                    self._idle.append(conn)
        result = classify_http(answer.status, answer.body, answer.headers)
        if self._v2 and answer.status == 404 and answer.body.strip() == b"404 page not found":
            # Go's default answer for a path the server does not route, as influxd before 1.8
            # gives for /api/v2/write: no database is missing, the API is.
            result.hint = NO_V2_HINT
        return result, False

    def abort(self) -> None:
        """Cut requests in flight short (stop must not wait on a slow server)."""
        with self._lock:
            self._closed = True
            active = list(self._active)
        for conn in active:
            http_client.shutdown(conn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
