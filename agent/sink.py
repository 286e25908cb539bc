"""The Sink contract: where points go."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from gpuagent.context import AgentContext
    from gpuagent.pipeline.metric import Point
    from gpuagent.schema.fields import Measurement


class SinkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    enabled: bool = True


class Sink:
    """Base class of every sink.

    ``write`` must not hold the scheduler's loop. A sink whose write never
    waits on the network or on another thread (it buffers, or commits to a
    local file, and sends from its own thread) says so with
    ``nonblocking = True`` and is called from the loop, in the scheduler's
    thread; any other sink is called from a thread of its own behind a bounded
    queue (gpuagent.pipeline.sink_isolation), so one slow or stuck sink never
    holds the others or the collection back. ``flush(timeout)`` delivers or
    persists what is buffered (to the server or a durable spool) before
    returning; ``close`` stops threads. ``stats`` feeds the agent's own
    ``gpuagent`` measurement.

    ``nonblocking`` allows local disk work in write(), no more: the influxdb
    sink (gpuagent.pipeline.delivery, with ``write_ahead``, the default)
    commits each batch to its spool there, one SQLite transaction and, with
    ``spool_sync = "full"``, an fsync, so that a point is on disk when write()
    returns (a kill -9, or with "full" a power cut, after that loses nothing).
    A disk that stalls stalls the loop for as long; the prometheus sink only
    updates its series in memory.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[SinkConfig]] = SinkConfig
    nonblocking: ClassVar[bool] = False  # True: write() waits on no network nor thread (see the class docstring)
    # The fields its stats() adds to the gpuagent measurement (tag sink=NAME), as Collector.schema.
    schema: ClassVar[tuple[Measurement, ...]] = ()

    def __init__(self, config: SinkConfig, context: AgentContext):
        self.config = config
        self.context = context
        self.log = logging.getLogger(f"gpuagent.sink.{self.name}")

    def check(self) -> None:
        """Raise AgentError (ConfigError) with one line for what ``start`` would refuse, found
        without side effects: a file to read, a folder to write. No thread, socket or file is
        opened. Run calls it before ``start``; ``gpuagent config check`` calls it alone."""

    def start(self) -> None:
        """Start background work. Called once before the first write."""

    def write(self, points: Sequence[Point]) -> None:
        raise NotImplementedError

    def flush(self, timeout: float) -> None:
        """Deliver or persist everything buffered, waiting at most ``timeout`` seconds."""

    def close(self) -> None:
        """Stop background work; buffered data must already be flushed or spooled."""

    def stats(self) -> dict[str, int | float]:
        """Counters for the gpuagent measurement (points_written_total, dropped_total, spool_bytes …)."""
        return {}

    def describe(self) -> str:
        """A short state for status lines: 'ok', 'spooling 1234 points', …"""
        return "ok"
