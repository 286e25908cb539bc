"""A sink whose write() may block runs in a thread of its own, behind a bounded queue.

The scheduler's loop hands points to every sink and must never wait on one: a stuck write would
stop collection for every sink and the systemd watchdog pings with it. A sink that promises a
write that waits on no network and no other thread (it buffers or commits to a local spool, and
sends from its own thread, as the InfluxDB and Prometheus sinks do: gpuagent.sink.Sink says what
that allows) sets ``nonblocking = True`` and is called directly; any other sink, built-in (the file
sink's disk) or third-party, is called from its own worker here. The queue is bounded: a sink that
stays stuck loses its oldest points, counted (``stalled_dropped_total``) and logged once, never
the agent's memory.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from gpuagent.pipeline.metric import Point
from gpuagent.sink import Sink

log = logging.getLogger("gpuagent.service.scheduler")

MAX_QUEUED_POINTS = 200_000  # about 15 minutes of an 8-GPU node at 1 s
STALLED_AFTER_S = 5.0  # a write that has not returned by then is said in the status line


class IsolatedSink(Sink):
    """``inner`` behind a queue and a worker thread; the same name, config, stats and state."""

    nonblocking = True

    def __init__(
        self, inner: Sink, on_error: Callable[[str, BaseException], None], max_points: int = MAX_QUEUED_POINTS
    ):
        self.inner = inner
        self.name = inner.name  # type: ignore[misc]  # a wrapper per sink: its sink's name, not one of the class
        self.config, self.context, self.log = inner.config, inner.context, inner.log
        self._on_error = on_error
        self._max_points = max_points
        self._queue: deque[Sequence[Point]] = deque()
        self._queued = 0  # points in the queue and in the write under way
        self._busy_since: float | None = None
        self._closing = False
        self._cond = threading.Condition()
        self.stalled_dropped_total = 0
        self._warned = False
        self._thread = threading.Thread(target=self._run, name=f"gpuagent-sink-{self.name}-writer", daemon=True)
        self._thread.start()

    def start(self) -> None:  # the inner sink was started when it was built
        pass

    def write(self, points: Sequence[Point]) -> None:
        with self._cond:
            self._queue.append(points)
            self._queued += len(points)
            while self._queued > self._max_points and len(self._queue) > 1:
                oldest = self._queue.popleft()
                self._queued -= len(oldest)
                self.stalled_dropped_total += len(oldest)
                if not self._warned:
                    self._warned = True
                    log.error(
                        "sink %s: its writes are not keeping up; dropping its oldest points (counted in "
                        "stalled_dropped_total)",
                        self.name,
                    )
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                batch = self._queue.popleft()
                self._busy_since = time.monotonic()
            try:
                self.inner.write(batch)
            except Exception as exc:  # counted by the scheduler, as a write that raised in its loop was
                self._on_error(self.name, exc)
            finally:
                with self._cond:
                    self._queued -= len(batch)
                    self._busy_since = None
                    self._cond.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until every queued point has been written (True), or ``timeout`` seconds (False)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._queued:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def flush(self, timeout: float) -> None:
        started = time.monotonic()
        if not self.drain(timeout):
            log.error(
                "sink %s: a write has not returned within %.1fs; %d points not handed to it",
                self.name,
                timeout,
                self._queued,
            )
        self.inner.flush(max(0.1, timeout - (time.monotonic() - started)))

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(0.2)  # a worker stuck in a write is left to it (daemon thread)
        with self._cond:
            lost = sum(len(batch) for batch in self._queue)
            self._queue.clear()
        if lost:
            self.stalled_dropped_total += lost
            log.error("sink %s: %d points were still waiting for a stuck write at stop; dropped", self.name, lost)
        self.inner.close()

    def stats(self) -> dict[str, int | float]:
        out = dict(self.inner.stats())
        if self.stalled_dropped_total:  # present once it happened: today's stream is unchanged
            out["stalled_dropped_total"] = self.stalled_dropped_total
        return out

    def describe(self) -> str:
        busy = self._busy_since
        if busy is not None and time.monotonic() - busy > STALLED_AFTER_S:
            return (
                f"stalled (a write has not returned for {time.monotonic() - busy:.0f}s; {self._queued} points queued)"
            )
        return self.inner.describe()


def isolate(sinks: Sequence[Sink], on_error: Callable[[str, BaseException], None]) -> list[Sink]:
    """Each sink as the scheduler should call it: directly when its write never blocks."""
    return [s if getattr(s, "nonblocking", False) else IsolatedSink(s, on_error) for s in sinks]
