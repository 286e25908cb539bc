"""The Sink contract: where points go."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from gpuagent.context import AgentContext
    from gpuagent.metric import Point


class SinkConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    enabled: bool = True


class Sink:
    """Base class of every sink.

    ``write`` is called from the scheduler's loop and must not block: a sink
    that talks to a network keeps its own buffer and thread, so one slow sink
    never holds another back. ``flush(timeout)`` delivers or persists what is
    buffered (to the server or a durable spool) before returning; ``close``
    stops threads. ``stats`` feeds the agent's own ``gpuagent`` measurement.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[SinkConfig]] = SinkConfig

    def __init__(self, config: SinkConfig, context: AgentContext):
        self.config = config
        self.context = context
        self.log = logging.getLogger(f"gpuagent.sink.{self.name}")

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
