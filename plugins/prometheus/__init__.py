"""prometheus sink: the latest value of every series on an HTTP /metrics endpoint.

Names and labels are documented in README.md (this module is the reference):
``<namespace>_<measurement>_<field>``, sanitised to [a-zA-Z0-9_:]; the point's
tags are the labels; numbers and bools are gauges, fields ending ``_total``
counters; a point's string fields become one ``<namespace>_<measurement>_info``
series whose labels carry them.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from typing import Annotated

from pydantic import BeforeValidator, field_validator

import gpuagent
from gpuagent.durations import parse_duration
from gpuagent.errors import AgentError
from gpuagent.metric import Point

# 9400 is dcgm-exporter's, 9835 nvidia_gpu_exporter's and 9100 node_exporter's:
# all three are common on GPU machines, so the agent can run beside any of them.
DEFAULT_PORT = 9847

_INVALID = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(*parts: str) -> str:
    name = _INVALID.sub("_", "_".join(p for p in parts if p))
    return "_" + name if name[:1].isdigit() else name


def label_name(key: str) -> str:
    name = _INVALID.sub("_", key)
    if name[:1].isdigit():
        name = "_" + name
    if name.startswith("__"):  # reserved for Prometheus itself
        name = "tag" + name
    return name or "tag_"


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


class LatestValues:
    """A prometheus_client collector that serves the newest value of each series."""

    def __init__(self, namespace: str, expire_after: float, string_fields: bool = True):
        self.namespace = namespace
        self.expire_after = expire_after
        self.string_fields = string_fields
        self._lock = threading.Lock()
        # family name -> (type, documentation); series key -> (family, sample name, labels, value, seen)
        self._families: dict[str, tuple[str, str]] = {}
        self._series: dict[tuple, tuple[str, str, dict[str, str], float, float]] = {}
        self.points_total = 0

    def update(self, points: Sequence[Point]) -> None:
        now = time.monotonic()
        with self._lock:
            for p in points:
                labels = {label_name(k): v for k, v in p.tags.items()}
                label_key = tuple(sorted(labels.items()))
                info: dict[str, str] = {}
                for key, value in p.fields.items():
                    if isinstance(value, str):
                        if self.string_fields:
                            name = label_name(key)
                            info["field_" + name if name in labels else name] = value
                        continue
                    base = metric_name(self.namespace, p.measurement, key)
                    if key.endswith("_total"):
                        family, kind, sample = base[: -len("_total")], "counter", base
                    else:
                        family, kind, sample = base, "gauge", base
                    self._families.setdefault(family, (kind, f"{p.measurement}.{key}"))
                    self._series[(sample, label_key)] = (family, sample, labels, float(value), now)
                if info:
                    family = metric_name(self.namespace, p.measurement)
                    sample = family + "_info"
                    self._families.setdefault(family, ("info", f"{p.measurement} string fields"))
                    self._series[(sample, label_key)] = (family, sample, {**labels, **info}, 1.0, now)
                self.points_total += 1

    def collect(self):
        now = time.monotonic()
        with self._lock:
            if self.expire_after > 0:
                stale = [k for k, s in self._series.items() if now - s[4] > self.expire_after]
                for key in stale:
                    del self._series[key]
            from prometheus_client.metrics_core import Metric

            metrics: dict[str, Metric] = {}
            for family, sample, labels, value, _ in self._series.values():
                metric = metrics.get(family)
                if metric is None:
                    kind, doc = self._families[family]
                    metric = metrics[family] = Metric(family, doc, kind)
                metric.add_sample(sample, labels, value)
        return list(metrics.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._series)


class PrometheusSink(gpuagent.Sink):
    name = "prometheus"
    Config = PrometheusSinkConfig

    def __init__(self, config: PrometheusSinkConfig, context):
        super().__init__(config, context)
        # Imported here: prometheus-client costs start-up time and memory to agents without this sink.
        from prometheus_client import CollectorRegistry

        self.registry = CollectorRegistry(auto_describe=False)
        self.values = LatestValues(config.namespace, config.expire_after, config.string_fields)
        self.registry.register(self.values)
        self._server = None
        self._thread = None
        self.address: tuple[str, int] | None = None

    def start(self) -> None:
        host, port = parse_listen(self.config.listen)
        try:
            from prometheus_client import start_http_server

            self._server, self._thread = start_http_server(port, host, self.registry)
        except OSError as exc:
            raise AgentError(
                f"sinks.prometheus: cannot listen on {self.config.listen}: {exc.strerror or exc}"
            ) from None
        self.address = self._server.server_address[:2]
        self.log.info("serving /metrics on http://%s:%d/metrics", host, self.address[1])

    def write(self, points: Sequence[Point]) -> None:
        self.values.update(points)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)

    def stats(self) -> dict[str, int | float]:
        return {"points_written_total": self.values.points_total, "series": len(self.values)}


@gpuagent.hookimpl
def gpuagent_register_sinks(register):
    register(PrometheusSink)
