"""The thread behind a sink's delivery: calls step() until stopped, sleeping as long as step() says."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


class WorkerLoop:
    """A daemon thread that calls `step()` (which returns seconds to sleep, 0: at once) until stopped,
    unless woken sooner. An exception from step() is logged through `every_minute` (a note(key, count,
    message, level)) and step() runs again a second later: a dead worker would silently stop the sink.
    `cond` is the owner's condition; it is notified after every step, for a flush() waiting on it."""

    def __init__(self, name: str, step: Callable[[], float], cond: threading.Condition, every_minute):
        self.name = name
        self.step = step
        self.cond = cond
        self.every_minute = every_minute
        self.thread: threading.Thread | None = None
        self._wake = False
        self._closing = False

    @property
    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name=f"gpuagent-sink-{self.name}", daemon=True)
        self.thread.start()

    def wake(self) -> None:
        with self.cond:  # an RLock: callers may hold it already
            self._wake = True
            self.cond.notify_all()

    def stop(self, timeout: float, abort: Callable[[], None] | None = None) -> None:
        """Stop within `timeout` seconds; past that, abort() (what cuts a request in flight short) and
        give the thread 0.2 s more. It may still be running when this returns."""
        with self.cond:
            self._closing = True
        self.wake()
        if self.thread is not None:
            self.thread.join(max(0.0, timeout))
            if self.thread.is_alive():
                if abort is not None:
                    abort()
                self.thread.join(0.2)

    def _run(self) -> None:
        while True:
            try:
                wait = self.step()
            except Exception as exc:  # never let the worker die: the sink would silently stop
                self.every_minute.note(
                    f"worker:{type(exc).__name__}:{exc}",
                    1,
                    f"{self.name}: delivery worker error: {type(exc).__name__}: {exc}",
                    logging.ERROR,
                )
                wait = 1.0
            with self.cond:
                self.cond.notify_all()  # a flush() waiting for the spool or the buffer to empty
                if self._closing:
                    return
                if wait > 0 and not self._wake:
                    self.cond.wait(wait)
                self._wake = False
                if self._closing:
                    return
