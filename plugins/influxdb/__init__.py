"""influxdb sink: line protocol to InfluxDB (api v2 through influxdb-client, or v1 /write).

Delivery is at-least-once through gpuagent.delivery (buffer, batches, retries)
and a durable spool in <state_dir>/spool/influxdb (gpuagent.spool).
"""

from __future__ import annotations

import base64
import gzip
import logging
import os
import sqlite3
import stat
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, SecretStr, model_validator

import gpuagent
from gpuagent.delivery import Delivery, Outcome, Result, classify_http
from gpuagent.durations import Duration, parse_duration
from gpuagent.errors import AgentError, ConfigError
from gpuagent.metric import Point
from gpuagent.spool import ByteSize, Spool

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
    flush_interval: Duration = 10.0
    flush_jitter: Annotated[float, BeforeValidator(_duration_or_zero)] = 1.0
    timeout: Duration = 10.0
    verify_tls: bool = True
    gzip: bool = True
    max_buffer_points: int = Field(100_000, ge=1)
    max_spool_bytes: ByteSize = 512 * 2**20
    retry_initial_backoff: Duration = 1.0
    retry_max_backoff: Duration = 60.0

    @model_validator(mode="after")
    def _check(self):
        # Messages name keys, never values: a value here may be a secret.
        scheme = urllib.parse.urlsplit(self.url).scheme
        if scheme not in ("http", "https") or not urllib.parse.urlsplit(self.url).netloc:
            raise ValueError('url: expected http://HOST:PORT or https://HOST:PORT')
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
        path, who, path,
    )
    return True


class _V1Transport:
    """POST /write?db=&rp=&precision=ns (InfluxDB 1.x), with urllib3 and no automatic retries."""

    def __init__(self, cfg: InfluxDBSinkConfig, token: str | None):
        import urllib3

        self._urllib3 = urllib3
        params = {"db": cfg.database, "precision": "ns"}
        if cfg.retention_policy:
            params["rp"] = cfg.retention_policy
        self._url = cfg.url.rstrip("/") + "/write?" + urllib.parse.urlencode(params)
        self._headers = {"Content-Type": "text/plain; charset=utf-8"}
        if cfg.gzip:
            self._headers["Content-Encoding"] = "gzip"
        if token:
            self._headers["Authorization"] = f"Token {token}"
        elif cfg.username:
            pair = f"{cfg.username}:{cfg.password.get_secret_value()}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        self._gzip = cfg.gzip
        self._pool = urllib3.PoolManager(
            num_pools=1,
            maxsize=2,  # a replay keeps two requests in flight
            retries=False,
            timeout=urllib3.Timeout(total=cfg.timeout),
            cert_reqs="CERT_REQUIRED" if cfg.verify_tls else "CERT_NONE",
        )

    def send(self, body: bytes, lines: int) -> Result:
        data = gzip.compress(body, compresslevel=1) if self._gzip else body
        try:
            resp = self._pool.request("POST", self._url, body=data, headers=self._headers, retries=False)
        except self._urllib3.exceptions.HTTPError as exc:
            return Result(Outcome.RETRY, None, _describe(exc))
        return classify_http(resp.status, resp.data, resp.headers)

    def close(self) -> None:
        self._pool.clear()


class _V2Transport:
    """influxdb-client's synchronous write API: /api/v2/write, gzip, no automatic retries."""

    def __init__(self, cfg: InfluxDBSinkConfig, token: str | None):
        from influxdb_client import InfluxDBClient, WritePrecision
        from influxdb_client.client.write_api import SYNCHRONOUS
        from influxdb_client.rest import ApiException

        if not token and cfg.username:  # InfluxDB 1.8's v2 compatibility takes "user:password"
            token = f"{cfg.username}:{cfg.password.get_secret_value()}"
        self._ApiException = ApiException
        self._precision = WritePrecision.NS
        self._bucket, self._org = cfg.bucket, cfg.org or "-"
        self._client = InfluxDBClient(
            url=cfg.url,
            token=token or "",
            org=self._org,
            timeout=int(cfg.timeout * 1000),
            verify_ssl=cfg.verify_tls,
            enable_gzip=cfg.gzip,
            retries=False,
        )
        self._write = self._client.write_api(write_options=SYNCHRONOUS)

    def send(self, body: bytes, lines: int) -> Result:
        try:
            self._write.write(self._bucket, self._org, record=body, write_precision=self._precision)
        except self._ApiException as exc:
            return classify_http(exc.status or 0, exc.body, exc.headers)
        except Exception as exc:  # urllib3 connection / timeout errors
            return Result(Outcome.RETRY, None, _describe(exc))
        return Result(Outcome.ACCEPTED, 204)

    def close(self) -> None:
        try:
            self._write.close()
        finally:
            self._client.close()


def _describe(exc: BaseException) -> str:
    # urllib3 wraps the cause; the innermost reason reads best ("Connection refused").
    reason = getattr(exc, "reason", None) or exc
    text = str(reason)
    if "Connection refused" in text:
        return "connection refused"
    if "timed out" in text.lower():
        return "timed out"
    return f"{type(reason).__name__}: {text}"[:300]


class InfluxDBSink(gpuagent.Sink):
    name = "influxdb"
    Config = InfluxDBSinkConfig

    def __init__(self, config: InfluxDBSinkConfig, context):
        super().__init__(config, context)
        self.delivery: Delivery | None = None

    def __repr__(self) -> str:
        c = self.config
        target = f"bucket={c.bucket!r}" if c.api == "v2" else f"database={c.database!r}"
        return f"<InfluxDBSink {c.api} {c.url} {target}>"

    def _token(self) -> str | None:
        c = self.config
        if c.token is not None:
            return c.token.get_secret_value()
        if c.token_file:
            path = Path(os.path.expanduser(c.token_file))
            try:
                token = path.read_text().strip()
            except OSError as exc:
                raise ConfigError(f"sinks.influxdb.token_file: cannot read {path}: {exc.strerror or exc}") from None
            if not token:
                raise ConfigError(f"sinks.influxdb.token_file: {path} is empty")
            check_secret_file_permissions(path, [token], self.log)
            return token
        return None

    def start(self) -> None:
        c = self.config
        token = self._token()
        secrets = [s for s in (token, c.password.get_secret_value() if c.password else None) if s]
        if c.token is not None or c.password is not None:
            check_secret_file_permissions(self.context.config_path, secrets, self.log)
        transport = _V1Transport(c, token) if c.api == "v1" else _V2Transport(c, token)
        spool_dir = Path(self.context.state_dir) / "spool" / self.name
        try:
            spool = Spool(spool_dir, c.max_spool_bytes)
        except (OSError, sqlite3.Error) as exc:
            transport.close()
            raise AgentError(
                f"sinks.influxdb: cannot open the spool in {spool_dir}: {exc} "
                "(set [agent] state_dir to a writable directory)"
            ) from None
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
            log=self.log,
        )
        if spool.points:
            self.log.info("%s: %d points in the spool from an earlier run; replaying", self.name, spool.points)
        self.delivery.start()

    def write(self, points: Sequence[Point]) -> None:
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
