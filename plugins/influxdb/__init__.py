"""influxdb sink: line protocol to InfluxDB (api v2 /api/v2/write, or v1 /write), over http.client.

Delivery is at-least-once through gpuagent.pipeline.delivery (buffer, batches, retries)
and a durable spool in <state_dir>/spool/influxdb (gpuagent.pipeline.spool).
"""

from __future__ import annotations

import base64
import gzip
import logging
import os
import stat
import threading
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BeforeValidator, Field, SecretStr, model_validator

import gpuagent
from gpuagent.errors import ConfigError
from gpuagent.pipeline import http_client
from gpuagent.pipeline.batch_sender import Outcome, Result
from gpuagent.pipeline.delivery import Delivery, classify_http
from gpuagent.pipeline.metric import Point
from gpuagent.pipeline.spool import Spool
from gpuagent.plugins.influxdb.schema import SCHEMA
from gpuagent.service.logsetup import mask_url
from gpuagent.units import ByteSize, Duration, Interval, parse_duration

if TYPE_CHECKING:
    import http.client

log = logging.getLogger("gpuagent.sink.influxdb")


def _duration_or_zero(value: object) -> float:
    if value in (0, 0.0, "0", "0s"):
        return 0.0
    return parse_duration(value)


class InfluxDBSinkConfig(gpuagent.SinkConfig):
    url: str = "http://127.0.0.1:8086"
    api: Literal["v1", "v2"] = "v2"
    # v2
    org: str = ""
    bucket: str = ""
    # v1
    database: str = ""
    retention_policy: str = ""
    # credentials (never logged; `config show` prints them masked)
    token: SecretStr | None = None
    token_file: str = ""
    username: str = ""
    password: SecretStr | None = None
    # delivery
    batch_size: int = Field(5000, ge=1, le=1_000_000)
    flush_interval: Interval = 10.0
    flush_jitter: Annotated[float, BeforeValidator(_duration_or_zero)] = 1.0
    timeout: Duration = 10.0
    verify_tls: bool = True
    gzip: bool = True
    max_buffer_points: int = Field(100_000, ge=1)
    max_spool_bytes: ByteSize = 512 * 2**20
    retry_initial_backoff: Interval = 1.0
    retry_max_backoff: Duration = 60.0
    # Write-ahead: every collected batch is committed to the spool before it counts as
    # collected, so a kill -9 loses at most the collection in flight (README: the cost).
    write_ahead: bool = True
    spool_sync: Literal["normal", "full"] = "normal"  # "full": fsync per commit, survives power loss

    @model_validator(mode="after")
    def _check(self):
        # Messages name keys, never values (a value here may be a secret); the url alone is
        # echoed, its credentials masked, since which part of it is wrong is the whole message.
        try:
            parts = urllib.parse.urlsplit(self.url)
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            raise ValueError(
                f'url: expected http://HOST:PORT or https://HOST:PORT, got "{shown_url(self.url)}"'
            ) from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f'url: expected http://HOST:PORT or https://HOST:PORT, got "{shown_url(self.url)}"')
        if self.api == "v2" and not self.bucket:
            raise ValueError('bucket: required with api = "v2" (or set api = "v1" and database)')
        if self.api == "v1" and not self.database:
            raise ValueError('database: required with api = "v1"')
        if self.api == "v1" and (self.bucket or self.org):
            raise ValueError('bucket / org: for api = "v2"; api "v1" uses database and retention_policy')
        if self.api == "v2" and (self.database or self.retention_policy):
            raise ValueError('database / retention_policy: for api = "v1"; api "v2" uses org and bucket')
        if self.token is not None and self.token_file:
            raise ValueError("token, token_file: set one of them, not both")
        if (self.token is not None or self.token_file) and (self.username or self.password is not None):
            raise ValueError("token, username/password: set a token or a username and password, not both")
        if bool(self.username) != (self.password is not None):
            raise ValueError("username, password: set both or neither")
        return self

    def read_token(self) -> str | None:
        """The token: `token`, or what token_file holds (stripped); None when neither is set. An
        unreadable or empty token_file is a one-line ConfigError, for the sink and `compare` alike:
        read as no token, it would only come back as 401s."""
        if self.token is not None:
            return self.token.get_secret_value()
        if not self.token_file:
            return None
        path = Path(os.path.expanduser(self.token_file))
        try:
            token = path.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"sinks.influxdb.token_file: cannot read {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"sinks.influxdb.token_file: {path} is not text") from None
        if not token:
            raise ConfigError(f"sinks.influxdb.token_file: {path} is empty")
        return token


def shown_url(url: str) -> str:
    """``url`` fit for an error line: credentials masked, even where it is too broken for
    mask_url to find them (no scheme: everything before the last @ goes)."""
    shown = mask_url(url)
    if "@" in shown and shown == url:
        shown = "***@" + url.rsplit("@", 1)[1]
    return shown[:200]


def check_secret_file_permissions(path: Path | str | None, secrets: Sequence[str], logger=log) -> bool:
    """Warn when `path` is readable by group or others and holds one of `secrets` verbatim.

    The config loader may call this for any file; the sink calls it at start
    for its config file and its token_file. Returns True when it warned.
    """
    if not path:
        return False
    path = Path(path)
    try:
        mode = path.stat().st_mode
        if not mode & (stat.S_IRGRP | stat.S_IROTH):
            return False
        text = path.read_text(errors="replace")
    except OSError:
        return False
    if not any(s and s in text for s in secrets):
        return False
    who = "other users" if mode & stat.S_IROTH else "its group"
    logger.warning(
        "%s is readable by %s and holds an InfluxDB secret: chmod 600 %s (or 640 with a dedicated group)",
        path,
        who,
        path,
    )
    return True


ANSWER_BYTES = 4096  # the most read of an answer's body; more is never needed to tell what happened
REFUSAL_BYTES_PER_LINE = 256  # a 400/422 may quote every refused line: "unable to parse '<line>': <why>"


def answer_limit(status: int, sent: int, lines: int) -> int:
    """How much of an answer's body to read. A refusal of lines may list each of them (the count
    of a partial write comes from that list), so it may be as long as what was sent; any other
    body is read up to ANSWER_BYTES (a 500 with a 1 GiB body must not cost 1 GiB)."""
    if status in (400, 422):
        return ANSWER_BYTES + sent + REFUSAL_BYTES_PER_LINE * lines
    return ANSWER_BYTES


class _HTTPTransport:
    """POST line protocol through gpuagent.pipeline.http_client: a whole-request deadline, a bounded answer.

    v1: /write?db=&rp=&precision=ns (InfluxDB 1.x); v2: /api/v2/write?org=&bucket=&precision=ns
    (InfluxDB 2.x, 3.x, Cloud, 1.8+, VictoriaMetrics). A send that takes `timeout` in all
    fails (and is retried) by then, in the calling thread. Up to two keep-alive connections (a
    replay keeps two requests in flight).
    """

    def __init__(self, cfg: InfluxDBSinkConfig, token: str | None):
        import http.client  # noqa: F401  here, not at import: it loads ssl (4 MB) on agents that never send

        self._v2 = cfg.api == "v2"
        parts = urllib.parse.urlsplit(cfg.url)
        base = parts.path.rstrip("/") or ""
        if self._v2:
            params = {"org": cfg.org or "-", "bucket": cfg.bucket, "precision": "ns"}
            self._path = base + "/api/v2/write?" + urllib.parse.urlencode(params)
        else:
            params = {"db": cfg.database, "precision": "ns"}
            if cfg.retention_policy:
                params["rp"] = cfg.retention_policy
            self._path = base + "/write?" + urllib.parse.urlencode(params)
        self._url = cfg.url
        self._verify_tls = cfg.verify_tls
        self._headers = {
            "Content-Type": "text/plain; charset=utf-8",
            "Accept": "application/json",
            "User-Agent": f"gpuagent/{gpuagent.__version__}",
        }
        if cfg.gzip:
            self._headers["Content-Encoding"] = "gzip"
        # A username comes with its password (the config's validator).
        password = cfg.password.get_secret_value() if cfg.password is not None else ""
        if self._v2 and not token and cfg.username:  # InfluxDB 1.8's v2 compatibility takes "user:password"
            token = f"{cfg.username}:{password}"
        if token:
            self._headers["Authorization"] = f"Token {token}"
        elif cfg.username:
            pair = f"{cfg.username}:{password}"
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        elif parts.username:  # http://user:password@host: http.client ignores credentials in a URL
            pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        self._gzip = cfg.gzip
        self._timeout = cfg.timeout
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
            result.hint = 'the server has no v2 write API (/api/v2/write); InfluxDB 1.x before 1.8: set api = "v1"'
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


class InfluxDBSink(gpuagent.Sink):
    name = "influxdb"
    schema = SCHEMA
    nonblocking = True  # write() only buffers; its own thread sends
    Config = InfluxDBSinkConfig

    def __init__(self, config: InfluxDBSinkConfig, context):
        super().__init__(config, context)
        self.delivery: Delivery | None = None

    def __repr__(self) -> str:
        c = self.config
        target = f"bucket={c.bucket!r}" if c.api == "v2" else f"database={c.database!r}"
        return f"<InfluxDBSink {c.api} {mask_url(c.url)} {target}>"

    def _token(self) -> str | None:
        c = self.config
        token = c.read_token()
        if token is not None and c.token is None:
            check_secret_file_permissions(Path(os.path.expanduser(c.token_file)), [token], self.log)
        return token

    def _checked_token(self) -> str | None:
        """The token, after the warnings `run` and `config check` alike give: a token_file or a
        config file holding a secret that group or others may read."""
        c = self.config
        if getattr(self, "_secrets_checked", False):  # run calls check, then start: warned once
            return c.read_token()
        token = self._token()
        secrets = [s for s in (token, c.password.get_secret_value() if c.password else None) if s]
        if c.token is not None or c.password is not None:
            check_secret_file_permissions(self.context.config_path, secrets, self.log)
        self._secrets_checked = True
        return token

    def check(self) -> None:
        self._checked_token()  # a token_file run cannot read or that is empty; readable secrets

    def start(self) -> None:
        c = self.config
        token = self._checked_token()
        transport = _HTTPTransport(c, token)
        spool_dir = Path(self.context.state_dir) / "spool" / self.name
        # Never refuses to start: a damaged file heals itself, and a spool that cannot be
        # opened at all leaves delivery in memory (said once here, retried now and then).
        spool = Spool(spool_dir, c.max_spool_bytes, sync=c.spool_sync, log=self.log)
        if spool.available and not spool.writable:
            self.log.error(
                "%s: the spool in %s cannot be written (%s): its %d points are replayed, new points wait in "
                "memory (at most %d; a restart loses them) until it can",
                self.name,
                spool_dir,
                spool.problem,
                spool.points,
                c.max_buffer_points,
            )
        elif not spool.available:
            self.log.error(
                "%s: no spool (%s): delivering from memory only (at most %d points wait for the server; "
                "a restart loses them) until %s can be written",
                self.name,
                spool.problem,
                c.max_buffer_points,
                spool_dir,
            )
        self.delivery = Delivery(
            self.name,
            transport,
            spool,
            batch_size=c.batch_size,
            flush_interval=c.flush_interval,
            flush_jitter=c.flush_jitter,
            max_buffer_points=c.max_buffer_points,
            initial_backoff=c.retry_initial_backoff,
            max_backoff=c.retry_max_backoff,
            write_ahead=c.write_ahead,
            log=self.log,
            target=mask_url(c.url),
        )
        if spool.points:
            self.log.info("%s: %d points in the spool from an earlier run; replaying", self.name, spool.points)
        self.delivery.start()

    def write(self, points: Sequence[Point]) -> None:
        assert self.delivery is not None, "write() before start()"
        self.delivery.put([p.to_line() for p in points])

    def flush(self, timeout: float) -> None:
        if self.delivery is not None:
            self.delivery.flush(timeout)

    def close(self) -> None:
        if self.delivery is not None:
            self.delivery.close()

    def stats(self) -> dict[str, int | float]:
        return self.delivery.stats() if self.delivery is not None else {}

    def describe(self) -> str:
        return self.delivery.describe() if self.delivery is not None else "not started"


@gpuagent.hookimpl
def gpuagent_register_sinks(register):
    register(InfluxDBSink)
