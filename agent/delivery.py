"""At-least-once delivery for a network sink: buffer, batches, retries and the durable spool.

A sink hands line-protocol lines to ``Delivery.put`` (never blocks, no I/O);
one worker thread per sink sends them through a ``Transport`` in batches of
``batch_size``, every ``flush_interval`` (plus a random jitter, so a fleet
does not write in lock-step) or as soon as a batch is full.

A batch leaves memory or the spool only after the server accepted it.
When a send fails for a reason that may pass (connection error, timeout,
5xx, 429, an auth or not-found answer an operator can fix) the batch goes to
the spool, the sink enters the *outage* state, and every new write is moved
to the spool at once (so a kill -9 loses at most the write in flight). It
retries with capped exponential backoff (or the server's Retry-After),
probing with the oldest spooled batch; once the server takes it, the spool is
replayed oldest first, then the in-memory buffer is sent.

A 400/422 answer means the server refused lines, not that it is down: a
"partial write" stored the rest, so only the refused lines are dropped; a
refusal of the whole request is split in halves until the offending lines
are alone. Refused lines are logged once and counted in ``rejected_total``.
A 413 is split the same way without dropping anything.
"""

from __future__ import annotations

import email.utils
import enum
import logging
import random
import re
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from gpuagent.spool import Spool


class Outcome(enum.Enum):
    ACCEPTED = "accepted"  # 2xx: everything stored
    PARTIAL = "partial"  # stored except `rejected` lines; never resend
    REJECTED = "rejected"  # 400/422 for the whole request: split to find the bad lines
    TOO_LARGE = "too_large"  # 413: split, drop nothing
    RETRY = "retry"  # connection error, timeout, 5xx, 429, other 4xx: try again later
    FATAL = "fatal"  # 401/403/404: needs the operator; keep the data, retry slowly, log loudly


@dataclass
class Result:
    outcome: Outcome
    status: int | None = None
    message: str = ""
    retry_after: float | None = None
    rejected: int = 0


class Transport(Protocol):
    def send(self, body: bytes, lines: int) -> Result: ...

    def close(self) -> None: ...


_UNABLE_TO_PARSE = re.compile(r"unable to parse")
_DROPPED = re.compile(r"dropped=(\d+)")


def classify_http(status: int, body: bytes | str | None, headers=None) -> Result:
    """Turn an HTTP answer from an InfluxDB-compatible /write into a Result."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    text = text.strip()[:2000]
    if 200 <= status < 300:
        return Result(Outcome.ACCEPTED, status)
    if status in (400, 422):
        if "partial write" in text:
            rejected = len(_UNABLE_TO_PARSE.findall(text)) + sum(int(n) for n in _DROPPED.findall(text))
            return Result(Outcome.PARTIAL, status, text, rejected=max(rejected, 1))
        return Result(Outcome.REJECTED, status, text)
    if status == 413:
        return Result(Outcome.TOO_LARGE, status, text)
    if status in (401, 403, 404):
        return Result(Outcome.FATAL, status, text)
    return Result(Outcome.RETRY, status, text, retry_after=parse_retry_after(headers))


def parse_retry_after(headers) -> float | None:
    if not headers:
        return None
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if not value:
        return None
    value = str(value).strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class Delivery:
    """The buffer, worker thread and spool of one sink."""

    def __init__(
        self,
        name: str,
        transport: Transport,
        spool: Spool,
        *,
        batch_size: int = 5000,
        flush_interval: float = 10.0,
        flush_jitter: float = 0.0,
        max_buffer_points: int = 100_000,
        initial_backoff: float = 1.0,
        max_backoff: float = 60.0,
        log: logging.Logger | None = None,
    ):
        self.name = name
        self.transport = transport
        self.spool = spool
        self.batch_size = max(1, int(batch_size))
        self.flush_interval = flush_interval
        self.flush_jitter = flush_jitter
        self.max_buffer_points = max(self.batch_size, int(max_buffer_points))
        self.initial_backoff = initial_backoff
        self.max_backoff = max(max_backoff, initial_backoff)
        self.log = log or logging.getLogger(f"gpuagent.delivery.{name}")

        self._cond = threading.Condition()
        self._buffer: deque[str] = deque()
        self._inflight: list[str] | None = None  # a batch from memory being sent
        self._inflight_spooled = False  # flush() put a copy in the spool already
        self._wake = False
        self._closing = False
        self._flush_deadline: float | None = None
        self._thread: threading.Thread | None = None
        self._spool_failing = False
        self._pool: ThreadPoolExecutor | None = None  # the second request of a replay

        self._outage = False
        self._retry_at = 0.0
        self._backoff = initial_backoff
        self._last_error: str = ""
        self._next_flush = time.monotonic() + self._interval()

        self.points_written_total = 0
        self.write_errors_total = 0
        self.replayed_total = 0
        self.rejected_total = 0
        self._memory_dropped_total = 0

    # -- API used by the sink ---------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"gpuagent-sink-{self.name}", daemon=True)
        self._thread.start()

    def put(self, lines: Iterable[str]) -> None:
        """Queue lines (no newline) for delivery. Never blocks on I/O."""
        with self._cond:
            self._buffer.extend(lines)
            over = len(self._buffer) - self.max_buffer_points
            if over > 0:  # the worker is stuck in a slow request: keep the newest
                for _ in range(over):
                    self._buffer.popleft()
                self._memory_dropped_total += over
            if self._outage or len(self._buffer) >= self.batch_size:
                self._wake = True
                self._cond.notify_all()

    def flush(self, timeout: float) -> None:
        """Deliver what is in memory, or move it to the spool, within timeout seconds."""
        deadline = time.monotonic() + max(0.0, timeout)
        # Leave a slice of the time to move what is left to the spool ourselves.
        soft = deadline - min(1.0, max(0.0, timeout) * 0.2)
        with self._cond:
            self._flush_deadline = soft
            self._wake = True
            self._cond.notify_all()
            while (self._buffer or self._inflight is not None) and self._thread and self._thread.is_alive():
                left = soft - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            self._flush_deadline = None
            leftover = list(self._buffer)
            self._buffer.clear()
            if self._inflight is not None and not self._inflight_spooled:
                # The worker is still waiting on the server: keep a copy. If it
                # lands after all, the duplicate is harmless (same series and time).
                leftover = self._inflight + leftover
                self._inflight_spooled = True
        if leftover:
            self._spool_lines(leftover)

    def close(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._closing = True
            self._wake = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._cond:
            leftover = list(self._buffer)
            self._buffer.clear()
        if leftover:  # close() without flush(): still never lose what was written
            self._spool_lines(leftover)
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        try:
            self.transport.close()
        finally:
            if self._thread is None or not self._thread.is_alive():
                self.spool.close()

    def stats(self) -> dict[str, int]:
        with self._cond:
            buffered = len(self._buffer) + (len(self._inflight) if self._inflight else 0)
        return {
            "points_written_total": self.points_written_total,
            "write_errors_total": self.write_errors_total,
            "spool_bytes": self.spool.bytes,
            "spool_points": self.spool.points,
            "replayed_total": self.replayed_total,
            "dropped_total": self.spool.dropped_total + self._memory_dropped_total,
            "rejected_total": self.rejected_total,
            "buffered_points": buffered,
        }

    def describe(self) -> str:
        if self._outage:
            return f"spooling {self.spool.points} points ({self._last_error})"
        if self.spool.points:
            return f"replaying {self.spool.points} spooled points"
        return "ok"

    @property
    def outage(self) -> bool:
        return self._outage

    # -- the worker -----------------------------------------------------------------

    def _interval(self) -> float:
        return self.flush_interval + (random.uniform(0, self.flush_jitter) if self.flush_jitter > 0 else 0.0)

    def _run(self) -> None:
        while True:
            try:
                wait = self._step()
            except Exception:  # never let the worker die: the sink would silently stop
                self.log.exception("%s: delivery worker error", self.name)
                wait = 1.0
            with self._cond:
                if self._closing:
                    return
                if wait > 0 and not self._wake:
                    self._cond.wait(wait)
                self._wake = False
                if self._closing:
                    return

    def _step(self) -> float:
        """Do one unit of work; return how long to sleep before the next (0: go on at once)."""
        now = time.monotonic()
        if self._outage and now < self._retry_at:
            self._spill_memory()
            return self._retry_at - now

        if self.spool.points:
            with self._cond:
                big = len(self._buffer) >= self.batch_size
            if big:  # the replay has the right of way; keep memory small meanwhile
                self._spill_memory()
            return self._replay_one()

        with self._cond:
            flushing = self._flush_deadline is not None
            due = now >= self._next_flush
            ready = len(self._buffer) >= self.batch_size or (self._buffer and (due or flushing))
            if due:
                self._next_flush = now + self._interval()
            if ready:
                batch = [self._buffer.popleft() for _ in range(min(self.batch_size, len(self._buffer)))]
                self._inflight, self._inflight_spooled = batch, False
            else:
                self._cond.notify_all()  # a flush() waiting on an empty buffer
                wait = max(0.0, self._next_flush - now)
        if not ready:
            if due:  # idle tick: pick up batches another instance spooled (the sink before a reload)
                self.spool.refresh()
                if self.spool.points:
                    return 0.0
            return wait

        ok = self._deliver(_encode(batch), len(batch))
        with self._cond:
            already_spooled = self._inflight_spooled
            self._inflight = None
            self._cond.notify_all()
        if not ok and not already_spooled:
            self._spool_lines(batch)
        return 0.0

    def _replay_one(self) -> float:
        first = self.spool.peek(self.batch_size)
        if first is None:  # the totals were stale (another instance replayed): re-read them
            self.spool.refresh()
            return 0.0
        second = None if self._outage else self.spool.peek(self.batch_size, after_id=first[0])
        if second is None:  # one request: the probe after an outage, or the spool's tail
            if self._deliver(first[2], first[1], replay=True):
                self.spool.remove_through(first[0])
            return 0.0
        # Two requests in flight: the server parses one while it receives the other,
        # which nearly doubles the replay rate into a server with cores to spare.
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"gpuagent-replay-{self.name}")
        later = self._pool.submit(self._send, second[2], second[1])
        results = [self._send(first[2], first[1]), later.result()]
        done_through = None
        for (last_id, points, data), result in zip((first, second), results, strict=True):
            # Stop at the first failure: what follows stays spooled and is sent again
            # (a duplicate the server may already hold is harmless), counted then.
            if not self._handle(result, data, points, replay=True):
                break
            done_through = last_id
        if done_through is not None:
            self.spool.remove_through(done_through)
        return 0.0

    def _deliver(self, body: bytes, count: int, replay: bool = False) -> bool:
        """Send `count` lines; True when they are done with (stored, or refused by the server)."""
        return self._handle(self._send(body, count), body, count, replay)

    def _handle(self, result: Result, body: bytes, count: int, replay: bool) -> bool:
        if result.outcome in (Outcome.ACCEPTED, Outcome.PARTIAL):
            stored = count - (result.rejected if result.outcome is Outcome.PARTIAL else 0)
            if result.outcome is Outcome.PARTIAL:
                self._reject(result.rejected, result)
            self.points_written_total += stored
            if replay:
                self.replayed_total += stored
            self._recovered()
            return True
        if result.outcome in (Outcome.REJECTED, Outcome.TOO_LARGE):
            return self._split(body.decode("utf-8").splitlines(), result, replay)
        self._failed(result, count)
        return False

    def _split(self, lines: list[str], result: Result, replay: bool) -> bool:
        if len(lines) == 1:
            # Alone and still refused: this line is the bad one (or too large to ever fit).
            self._reject(1, result, lines[0])
            self._recovered()
            return True
        mid = len(lines) // 2
        # A transient failure of either half keeps the whole batch: resending a half
        # the server already took only writes the same points again.
        first, second = lines[:mid], lines[mid:]
        return self._deliver(_encode(first), len(first), replay) and self._deliver(
            _encode(second), len(second), replay
        )

    def _send(self, body: bytes, count: int) -> Result:
        try:
            return self.transport.send(body, count)
        except Exception as exc:  # a transport bug must not lose data: treat as transient
            return Result(Outcome.RETRY, None, f"{type(exc).__name__}: {exc}")

    def _reject(self, count: int, result: Result, line: str | None = None) -> None:
        self.rejected_total += count
        what = f"line {line[:500]!r}" if line is not None else f"{count} line(s)"
        self.log.warning(
            "%s: server refused %s (HTTP %s): %s; dropped", self.name, what, result.status, result.message[:1000]
        )

    def _recovered(self) -> None:
        if self._outage:
            self.log.warning(
                "%s: server is accepting writes again; replaying %d spooled points",
                self.name, self.spool.points,
            )
        self._outage = False
        self._backoff = self.initial_backoff
        self._last_error = ""

    def _failed(self, result: Result, points: int) -> None:
        self.write_errors_total += 1
        reason = f"HTTP {result.status}: {result.message[:300]}" if result.status else result.message[:300]
        fatal = result.outcome is Outcome.FATAL
        if fatal:
            delay = self.max_backoff
            hint = {401: "check the token / credentials", 403: "the token lacks write permission",
                    404: "the database / bucket / org does not exist"}.get(result.status or 0, "")
            if reason != self._last_error:
                self.log.error(
                    "%s: write refused, %s (%s); keeping %d points in the spool and retrying every %gs",
                    self.name, hint, reason, points + self.spool.points, delay,
                )
        else:
            delay = self._backoff * random.uniform(0.8, 1.2)
            self._backoff = min(self._backoff * 2, self.max_backoff)
            if result.retry_after is not None:
                delay = min(max(result.retry_after, 0.0), max(self.max_backoff, 300.0))
            if not self._outage:
                self.log.warning(
                    "%s: write failed (%s); spooling and retrying in %.1fs", self.name, reason, delay
                )
            else:
                self.log.debug("%s: retry failed (%s); next in %.1fs", self.name, reason, delay)
        self._last_error = reason
        self._outage = True
        self._retry_at = time.monotonic() + delay

    # -- spool ---------------------------------------------------------------------

    def _spill_memory(self) -> None:
        with self._cond:
            lines = list(self._buffer)
            self._buffer.clear()
            self._cond.notify_all()
        if lines:
            self._spool_lines(lines)

    def _spool_lines(self, lines: list[str]) -> None:
        for i in range(0, len(lines), self.batch_size):
            chunk = lines[i : i + self.batch_size]
            try:
                dropped = self.spool.push(_encode(chunk), len(chunk))
            except sqlite3.Error as exc:  # disk full, read-only state dir: keep it in memory (bounded)
                if not self._spool_failing:
                    self.log.error(
                        "%s: cannot write the spool in %s (%s); keeping points in memory (at most %d)",
                        self.name, self.spool.directory, exc, self.max_buffer_points,
                    )
                self._spool_failing = True
                self._requeue(lines[i:])
                return
            self._spool_failing = False
            if dropped:
                self.log.warning(
                    "%s: spool is full (%d bytes): dropped the %d oldest points", self.name,
                    self.spool.max_bytes, dropped,
                )

    def _requeue(self, lines: list[str]) -> None:
        with self._cond:
            self._buffer.extendleft(reversed(lines))
            over = len(self._buffer) - self.max_buffer_points
            for _ in range(max(0, over)):
                self._buffer.popleft()
            self._memory_dropped_total += max(0, over)


def _encode(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8")
