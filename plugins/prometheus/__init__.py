"""prometheus sink: the latest value of every series on an HTTP /metrics endpoint.

Names, types, units and HELP come from one rule (naming.py) fed by the fields
the plugins declare (gpuagent.schema); the store and its once-per-change rendering are in
exposition.py, the bounded HTTP server in server.py. README.md documents the
mapping as a table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

from pydantic import BeforeValidator, Field, field_validator

import gpuagent
from gpuagent.errors import AgentError
from gpuagent.pipeline.metric import Point
from gpuagent.plugins.prometheus.exposition import CONTENT_TYPE, LatestValues, label_name
from gpuagent.plugins.prometheus.naming import metric_for, sanitize
from gpuagent.plugins.prometheus.schema import SCHEMA
from gpuagent.plugins.prometheus.web import BasicAuth, CertReloader, TlsServerConfig, validate_users
from gpuagent.units import parse_duration

if TYPE_CHECKING:  # imported by start(): a config check needs no server
    from gpuagent.plugins.prometheus.server import MetricsServer

__all__ = ["DEFAULT_PORT", "PrometheusSink", "PrometheusSinkConfig", "label_name", "metric_for", "metric_name"]

# 9400 is dcgm-exporter's, 9835 nvidia_gpu_exporter's and 9100 node_exporter's:
# all three are common on GPU machines, so the agent can run beside any of them.
DEFAULT_PORT = 9847


def metric_name(*parts: str) -> str:
    return sanitize("_".join(p for p in parts if p))


def _duration_or_zero(value: object) -> float:
    if value in (0, 0.0, "0", "0s"):
        return 0.0
    return parse_duration(value)


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:  # 0: any free port
        raise ValueError(f'expected HOST:PORT such as "127.0.0.1:{DEFAULT_PORT}", got "{value}"')
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class PrometheusSinkConfig(gpuagent.SinkConfig):
    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    namespace: str = "gpuagent"
    expire_after: Annotated[float, BeforeValidator(_duration_or_zero)] = 300.0
    string_fields: bool = True  # False: skip string fields instead of the _info series
    max_connections: Annotated[int, Field(ge=1, le=256)] = 8
    queue: Annotated[int, Field(ge=1, le=10_000)] = 64
    request_timeout: Annotated[float, BeforeValidator(parse_duration), Field(gt=0)] = 10.0
    max_series_per_metric: Annotated[int, Field(ge=1)] = 10_000  # new series past it are not exported
    max_series: Annotated[int, Field(ge=1)] = 100_000  # nor past this many in all
    # exporter-toolkit's web config keys (web.py); /healthz and /readyz answer without auth.
    tls_server_config: TlsServerConfig | None = None
    basic_auth_users: dict[str, str] = {}

    @field_validator("basic_auth_users")
    @classmethod
    def _users(cls, value: dict[str, str]) -> dict[str, str]:
        return validate_users(value)

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, value: str) -> str:
        if value and not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", value):
            raise ValueError(f'expected letters, digits and "_", got "{value}"')
        return value


class PrometheusSink(gpuagent.Sink):
    name = "prometheus"
    schema = SCHEMA
    # The names this sink serves a field under: compare and top query by them.
    metric_for = staticmethod(metric_for)
    nonblocking = True  # write() only updates the series; scrapes are served by its own threads
    Config = PrometheusSinkConfig

    def __init__(self, config: PrometheusSinkConfig, context):
        super().__init__(config, context)
        self.values = LatestValues(
            config.namespace, config.expire_after, config.string_fields, config.max_series_per_metric, config.max_series
        )
        self._server: MetricsServer | None = None
        self.address: tuple[str, int] | None = None

    def start(self) -> None:
        from gpuagent.plugins.prometheus.server import MetricsServer

        host, port = parse_listen(self.config.listen)
        tls = CertReloader(self.config.tls_server_config) if self.config.tls_server_config else None
        auth = BasicAuth(self.config.basic_auth_users) if self.config.basic_auth_users else None
        try:
            self._server = MetricsServer(
                host,
                port,
                self.values.render,
                self.values.render_gzip,
                CONTENT_TYPE,
                max_connections=self.config.max_connections,
                queue_size=self.config.queue,
                request_timeout=self.config.request_timeout,
                tls=tls.context if tls else None,
                auth=auth.allows if auth else None,
                probes={
                    "/healthz": lambda: self.context.liveness.alive(),
                    "/readyz": lambda: self.context.liveness.readiness(),
                },
            )
        except OSError as exc:
            raise AgentError(
                f"sinks.prometheus: cannot listen on {self.config.listen}: {exc.strerror or exc}"
            ) from None
        self._server.start()
        self.address = self._server.address
        scheme = "https" if tls else "http"
        self.log.info(
            "serving /metrics on %s://%s:%d/metrics%s", scheme, host, self.address[1], " (basic auth)" if auth else ""
        )

    def write(self, points: Sequence[Point]) -> None:
        self.values.update(points)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    def stats(self) -> dict[str, int | float]:
        out: dict[str, int | float] = {
            "points_written_total": self.values.points_total,
            "series": len(self.values),
            "renders_total": self.values.renders_total,
            "series_refused_total": self.values.series_refused_total,
        }
        if self._server is not None:
            out["scrapes_total"] = self._server.requests_total
            out["scrapes_refused_total"] = self._server.refused_total
            out["scrape_timeouts_total"] = self._server.timeouts_total
            out["scrapes_unauthorized_total"] = self._server.unauthorized_total
            out["tls_handshake_failures_total"] = self._server.handshake_failures_total
        return out


@gpuagent.hookimpl
def gpuagent_register_sinks(register):
    register(PrometheusSink)
