"""A third-party-style sink that holds every point in memory until flush().

The daemon tests load it with --plugins-dir: after SIGTERM its file must hold
exactly what the file sink wrote as it went, which proves shutdown flushes.
"""

from __future__ import annotations

import threading

import gpuagent
from gpuagent.pipeline.metric import to_lines


class BufferedConfig(gpuagent.SinkConfig):
    path: str


class BufferedSink(gpuagent.Sink):
    name = "buffered"
    Config = BufferedConfig

    def __init__(self, config, context):
        super().__init__(config, context)
        self._lock = threading.Lock()
        self._points = []

    def write(self, points):
        with self._lock:
            self._points.extend(points)

    def flush(self, timeout):
        with self._lock:
            points, self._points = self._points, []
        if points:
            with open(self.config.path, "a", encoding="utf-8") as fh:
                fh.write(to_lines(points))

    def stats(self):
        return {"buffered_points": len(self._points)}

    def describe(self):
        return f"{len(self._points)} points buffered"


@gpuagent.hookimpl
def gpuagent_register_sinks(register):
    register(BufferedSink)
