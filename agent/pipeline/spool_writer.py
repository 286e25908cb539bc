"""Committing a sink's lines to its spool, memory taking them while it cannot; its state said once."""

from __future__ import annotations

import logging
import threading
import time

from gpuagent.pipeline.batch_sender import encode
from gpuagent.pipeline.memory_buffer import MemoryBuffer
from gpuagent.pipeline.spool import Spool, SpoolError

RETRY_PAUSE = 5.0  # seconds after a failed commit before the spool is tried again (memory takes lines meanwhile)


class SpoolWriter:
    """Commits lines to `spool` in batches of `batch_size`; what it cannot commit waits in `memory`
    (guarded by `lock`, the owner's condition, notified when memory empties). After a failed commit
    it is not `ready` for RETRY_PAUSE seconds; the spool's state is logged once per change, never
    once per batch; the oldest points a full spool drops are logged through `every_minute` (a
    note(key, count, message))."""

    def __init__(
        self,
        name: str,
        spool: Spool,
        batch_size: int,
        memory: MemoryBuffer,
        lock: threading.Condition,
        log: logging.Logger,
        every_minute,
    ):
        self.name = name
        self.spool = spool
        self.batch_size = batch_size
        self.memory = memory
        self.lock = lock
        self.log = log
        self.every_minute = every_minute
        self._retry_at = 0.0
        # The state at start is the opener's to report (the sink says it once); changes are ours.
        self._problem = spool.problem if not spool.writable else None

    @property
    def ready(self) -> bool:
        return self.spool.available and time.monotonic() >= self._retry_at

    def write(self, lines: list[str]) -> list[str]:
        """Commit lines in batches; return those that could not be committed (after the first failure)."""
        for i in range(0, len(lines), self.batch_size):
            chunk = lines[i : i + self.batch_size]
            try:
                dropped = self.spool.push(encode(chunk), len(chunk))
            except SpoolError:
                self._retry_at = time.monotonic() + RETRY_PAUSE
                self.note_state()
                return lines[i:]
            if dropped:
                self.every_minute.note(
                    "spool-full",
                    dropped,
                    f"{self.name}: spool is full ({self.spool.max_bytes} bytes): dropped the oldest points",
                )
        self.note_state()
        return []

    def keep(self, lines: list[str]) -> None:
        """Commit lines to the spool; what cannot be committed goes back to memory, in front."""
        left = self.write(lines)
        if left:
            with self.lock:
                self.memory.requeue(left)

    def spill(self, at_stop: bool = False) -> None:
        """Move what waits in memory to the spool when it can take it (at stop: try anyway)."""
        if not at_stop and not self.ready:
            return
        with self.lock:
            lines = self.memory.take_all()
            self.lock.notify_all()
        if lines:
            self.keep(lines)

    def note_state(self) -> None:
        """One log line per change of the spool's state."""
        problem = self.spool.problem if not self.spool.writable else None
        if problem == self._problem:
            return
        if problem is not None:
            self.log.error(
                "%s: cannot write the spool in %s (%s); delivery keeps points in memory (at most %d, "
                "oldest dropped and counted) until it can",
                self.name,
                self.spool.directory,
                problem,
                self.memory.max_points,
            )
        else:
            self.log.warning("%s: the spool in %s can be written again", self.name, self.spool.directory)
        self._problem = problem
