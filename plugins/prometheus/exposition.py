"""The newest value of every series, rendered to the Prometheus text format once per change.

`update()` runs on the scheduler's thread and only stores values (a dict
assignment per field, under a lock held for that batch alone). Rendering
happens on the first scrape after a change, outside the update lock, and the
bytes (and their gzip form) are kept until the next change: a hundred
parallel scrapes cost one render, and no scrape ever holds up a collection.
"""

from __future__ import annotations

import gzip
import logging
import math
import threading
import time
from collections.abc import Sequence

from gpuagent.pipeline.metric import Point
from gpuagent.pipeline.names import utf8_safe
from gpuagent.plugins.prometheus.naming import MetricSpec, metric_for, sanitize
from gpuagent.schema.measurements import GPU_INFO

log = logging.getLogger("gpuagent.sink.prometheus")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Measurements sent seldom, kept on /metrics this much longer than expire_after: gpu_info is
# sent at start, on change and hourly (plugins/gpu_info), and must be in every scrape.
KEEP_LONGER = {GPU_INFO: 2 * 3600.0}
# A render is reused this long even without a change, so that series past expire_after leave.
MAX_RENDER_AGE_S = 5.0


def label_name(key: str) -> str:
    name = sanitize(key)
    if name.startswith("__"):  # reserved for Prometheus itself
        name = "tag" + name
    return name or "tag_"


def _escape_label(value: str) -> str:
    # A byte that is not UTF-8 (psutil's surrogateescape) reads \xff, as in the line protocol.
    return utf8_safe(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return utf8_safe(text).replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isfinite(value):
        return repr(value)
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


class LatestValues:
    """Series store and renderer."""

    def __init__(
        self,
        namespace: str,
        expire_after: float,
        string_fields: bool = True,
        max_series_per_metric: int = 10_000,
        max_series: int = 100_000,
    ):
        self.namespace = namespace
        self.expire_after = expire_after
        self.string_fields = string_fields
        # Caps, as Prometheus's own sample_limit is on the scraping side: a plugin adding tag
        # values every cycle must not grow the store (and each scrape) without end. A series past
        # a cap is not stored (the ones stored keep updating), counted, warned once per metric.
        self.max_series_per_metric = max_series_per_metric
        self.max_series = max_series
        self._per_metric: dict[str, int] = {}
        self._capped: set[str] = set()
        self.series_refused_total = 0
        self._lock = threading.Lock()
        # sample name -> spec; (sample name, label text) -> [value, last seen]
        self._specs: dict[str, MetricSpec] = {}
        self._series: dict[tuple[str, str], list] = {}
        self._labels: dict[tuple, tuple[str, dict[str, str]]] = {}  # tag items -> (label text, labels)
        self._version = 0
        self._render_lock = threading.Lock()
        self._rendered: tuple[int, float, bytes] | None = None
        self._gzipped: tuple[int, bytes] | None = None
        self.points_total = 0
        self.renders_total = 0

    def _label_text(self, tags: dict[str, str]) -> tuple[str, dict[str, str]]:
        key = tuple(tags.items())
        cached = self._labels.get(key)
        if cached is None:
            labels = {label_name(k): v for k, v in tags.items()}
            text = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(labels.items()))
            if len(self._labels) > 10_000:  # a cache, bounded: process tags churn (a miss costs a format)
                self._labels.clear()
            cached = self._labels[key] = (text, labels)
        return cached

    def update(self, points: Sequence[Point]) -> None:
        now = time.monotonic()
        ns = self.namespace
        with self._lock:
            for p in points:
                text, labels = self._label_text(p.tags)
                keep = KEEP_LONGER.get(p.measurement, 0.0)
                for key, value in p.fields.items():
                    is_string = isinstance(value, str)
                    if is_string and not self.string_fields:
                        continue
                    spec = metric_for(ns, p.measurement, key, is_string)
                    self._specs.setdefault(spec.name, spec)
                    series_key = (spec.name, text)
                    if series_key not in self._series and not self._admit(spec.name):
                        continue
                    if isinstance(value, str):  # is_string, narrowed for mypy
                        label = spec.label if spec.label not in labels else "field_" + spec.label
                        extra = f'{label}="{_escape_label(value)}"'
                        self._series[series_key] = [1.0, now + keep, f"{text},{extra}" if text else extra]
                    else:
                        self._series[series_key] = [float(value) * spec.scale, now + keep, text]
                self.points_total += 1
            self._version += 1

    def _admit(self, name: str) -> bool:
        """Whether a new series of metric ``name`` fits under the caps (update's lock held)."""
        count = self._per_metric.get(name, 0)
        if count < self.max_series_per_metric and len(self._series) < self.max_series:
            self._per_metric[name] = count + 1
            return True
        self.series_refused_total += 1
        if name not in self._capped and len(self._capped) < 1000:
            self._capped.add(name)
            which = (
                f"{count} series, max_series_per_metric"
                if count >= self.max_series_per_metric
                else f"no room: {len(self._series)} series in all, max_series"
            )
            log.warning(
                "metric %s has %s: its new series are not exported, "
                "counted in series_refused_total (warned once per metric)",
                name,
                which,
            )
        return False

    def render(self) -> bytes:
        """The exposition; rendered again only after a change (or MAX_RENDER_AGE_S)."""
        now = time.monotonic()
        with self._render_lock:
            cached = self._rendered
            if cached and cached[0] == self._version and now - cached[1] < MAX_RENDER_AGE_S:
                return cached[2]
            with self._lock:  # a snapshot; formatting happens without the update lock
                version = self._version
                if self.expire_after > 0:
                    for key in [k for k, s in self._series.items() if now - s[1] > self.expire_after]:
                        del self._series[key]
                        self._per_metric[key[0]] -= 1
                items = [(name, value, labels) for (name, _), (value, _, labels) in self._series.items()]
                specs = dict(self._specs)
            families: dict[str, list[str]] = {}
            for name, value, labels in items:
                lines = families.get(name)
                if lines is None:
                    spec = specs[name]
                    kind = "gauge" if spec.kind == "info" else spec.kind
                    lines = families[name] = [
                        f"# HELP {name} {_escape_help(spec.help)}",
                        f"# TYPE {name} {kind}",
                    ]
                lines.append(f"{name}{{{labels}}} {_number(value)}" if labels else f"{name} {_number(value)}")
            body = "\n".join("\n".join(families[n]) for n in sorted(families))
            data = (body + "\n").encode() if body else b""
            self._rendered = (version, now, data)
            self._gzipped = None
            self.renders_total += 1
            return data

    def render_gzip(self) -> bytes:
        data = self.render()
        with self._render_lock:
            if self._gzipped is None or self._gzipped[0] != id(data):
                self._gzipped = (id(data), gzip.compress(data, compresslevel=6))
            return self._gzipped[1]

    def __len__(self) -> int:
        with self._lock:
            return len(self._series)
