"""influxdb sink: line protocol to InfluxDB (api v2 /api/v2/write, or v1 /write), over http.client.

This plugin is the options and their wiring: the requests and what their answers mean are
gpuagent.pipeline.http_write's; delivery, at-least-once, gpuagent.pipeline.delivery's (buffer,
batches, retries) with a durable spool in <state_dir>/spool/influxdb (gpuagent.pipeline.spool).
"""

from __future__ import annotations

import logging
import os
import stat
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, SecretStr, model_validator

import gpuagent
from gpuagent.errors import ConfigError
from gpuagent.pipeline.delivery import Delivery
from gpuagent.pipeline.http_write import HTTPWrite, authorization
from gpuagent.pipeline.metric import Point
from gpuagent.plugins.influxdb.schema import SCHEMA
from gpuagent.service.logsetup import mask_url
from gpuagent.units import ByteSize, Duration, Interval, parse_duration

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


class InfluxDBSink(gpuagent.Sink):
    name = "influxdb"
    schema = SCHEMA
    nonblocking = True  # write() commits to the spool (write-ahead) or buffers; its own thread sends
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
        # A username comes with its password (the config's validator).
        password = c.password.get_secret_value() if c.password is not None else ""
        transport = HTTPWrite(
            c.url,
            api=c.api,
            org=c.org,
            bucket=c.bucket,
            database=c.database,
            retention_policy=c.retention_policy,
            auth=authorization(c.url, c.api, token, c.username, password),
            timeout=c.timeout,
            verify_tls=c.verify_tls,
            gzip=c.gzip,
        )
        self.delivery = Delivery.open(
            self.name,
            transport,
            Path(self.context.state_dir) / "spool" / self.name,
            max_spool_bytes=c.max_spool_bytes,
            spool_sync=c.spool_sync,
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
