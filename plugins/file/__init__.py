"""file sink: line protocol to a file or to stdout (path "-")."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

import gpuagent
from gpuagent.metric import Point, to_lines


class FileSinkConfig(gpuagent.SinkConfig):
    path: str = "-"


class FileSink(gpuagent.Sink):
    name = "file"
    Config = FileSinkConfig

    def __init__(self, config, context):
        super().__init__(config, context)
        self._lock = threading.Lock()
        self._fh = None
        self.points_written = 0

    def start(self) -> None:
        if self.config.path == "-":
            self._fh = sys.stdout
        else:
            self._fh = open(self.config.path, "a", encoding="utf-8")

    def write(self, points: Sequence[Point]) -> None:
        text = to_lines(points)
        with self._lock:
            self._fh.write(text)
            self._fh.flush()
            self.points_written += len(points)

    def close(self) -> None:
        with self._lock:
            if self._fh is not None and self._fh is not sys.stdout:
                self._fh.close()
            self._fh = None

    def stats(self):
        return {"points_written_total": self.points_written}


@gpuagent.hookimpl
def gpuagent_register_sinks(register):
    register(FileSink)
