"""At-least-once delivery for a network sink: write-ahead spool, batches, retries, deadlines.

A sink hands line-protocol lines to ``Delivery.put``. With ``write_ahead``
(the default) put commits them to the durable spool before it returns (one
SQLite transaction, no network I/O), so a kill -9 or a crash loses at most
the collection in flight, even with a healthy server. One worker thread per
sink sends the spooled batches through a ``Transport`` in requests of up to
``batch_size`` points, every ``flush_interval`` (plus a random jitter, so a
fleet does not write in lock-step) or as soon as a batch is full, and
removes them from the spool once the server has accepted them. Without
write_ahead the lines wait in memory and reach the spool only when a send
fails or at stop (cheaper, but a kill -9 loses up to flush_interval).

When the spool cannot be written (disk full, read-only, unavailable) lines
wait in a bounded memory buffer instead (``max_buffer_points``; the oldest
are dropped and counted, at stop too); one error when that starts and one
line when the spool is writable again, never one per batch.

When a send fails for a reason that may pass (connection error, no complete
answer within ``timeout``, 5xx, 429, an auth or not-found answer an operator
can fix) the sink enters the *outage* state and retries with capped
exponential backoff; a Retry-After header can lengthen the wait, never
shorten it. Once the server takes the probe, the spool is replayed oldest
first.

A 400/422 answer whose body is InfluxDB's own line error means the server
refused lines, not that it is down: a "partial write" stored the rest, so
only the refused lines are dropped (counted from the server's whole message);
a refusal of the whole request is split in halves until the offending lines
are alone. Refusals are counted in ``rejected_total`` and logged once per
kind per minute with a count. A 413 is split the same way without dropping
anything. Any other 400 (a proxy, a WAF, http:// sent to a TLS port), or one
that refuses both halves of a split with the same words as the whole, is a
server problem: the lines stay spooled and are retried slowly, as for a 401.
"""

from __future__ import annotations

import email.utils
import enum
import logging
import random
import re
import threading
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from gpuagent.spool import Spool, SpoolError


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
    hint: str = ""  # what the operator should check, for a FATAL answer (replaces the status's own hint)


class Transport(Protocol):
    """send() must return within its whole-request deadline (the sink's `timeout`), whatever the server
    does; abort() (optional) cuts requests in flight short, from another thread, at stop."""

    def send(self, body: bytes, lines: int) -> Result: ...

    def close(self) -> None: ...


_UNABLE_TO_PARSE = re.compile(r"unable to parse")
_DROPPED = re.compile(r"dropped=(\d+)")
# The words of InfluxDB's own refusals of lines (1.x models/points.go and tsdb, 2.x's "invalid"):
# only a 400 that says one of these may cost lines.
_LINE_ERROR = re.compile(
    r"unable to parse|partial write|field type conflict|failed to parse|invalid field|bad timestamp"
    r"|line protocol|missing (?:fields|tag value|measurement)|invalid (?:number|boolean|tag)",
    re.IGNORECASE,
)
MESSAGE_CHARS = 2000  # what a Result keeps of the server's words (logs quote less)
BAD_REQUEST_HINT = (
    "the server refuses the request itself, not its lines (is the url right? http:// sent to an https "
    "port, a proxy or a firewall answers 400 like this)"
)


def classify_http(status: int, body: bytes | str | None, headers=None) -> Result:
    """Turn an HTTP answer from an InfluxDB-compatible /write into a Result."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    text = text.strip()
    message = " ".join(text[: MESSAGE_CHARS * 2].split())[:MESSAGE_CHARS]  # one log line, even from an HTML page
    if 200 <= status < 300:
        return Result(Outcome.ACCEPTED, status)
    if status in (400, 422):
        if "partial write" in text:
            # Counted from the whole message: each refused line has its "unable to parse".
            rejected = len(_UNABLE_TO_PARSE.findall(text)) + sum(int(n) for n in _DROPPED.findall(text))
            return Result(Outcome.PARTIAL, status, message, rejected=max(rejected, 1))
        if status == 422 or _LINE_ERROR.search(text):
            return Result(Outcome.REJECTED, status, message)
        return Result(Outcome.FATAL, status, message, hint=BAD_REQUEST_HINT)
    if status == 413:
        return Result(Outcome.TOO_LARGE, status, message)
    if status in (401, 403, 404):
        return Result(Outcome.FATAL, status, message)
    if 300 <= status < 400:
        where = headers.get("Location") if headers is not None and hasattr(headers, "get") else None
        message = f"redirected to {where or '(no Location)'}, not followed: set url to where it points"
    return Result(Outcome.RETRY, status, message, retry_after=parse_retry_after(headers))


def parse_retry_after(headers) -> float | None:
    if not headers:
        return None
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if not value:
        return None
    value = str(value).strip()
    if value.isdigit():
        return float(value)
    if value.startswith("-") and value[1:].isdigit():  # not valid, but means "now"
        return 0.0
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class _EveryMinute:
    """Log a recurring event once per key per period, with how many happened since the last line."""

    def __init__(self, log: logging.Logger, period: float = 60.0):
        self.log = log
        self.period = period
        self._last: dict[str, float] = {}
        self._pending: dict[str, tuple[int, str]] = {}  # key -> (count, latest message)
        self._lock = threading.Lock()

    def note(self, key: str, count: int, message: str, level: int = logging.WARNING) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(key)
            pending, _ = self._pending.pop(key, (0, ""))
            if last is not None and now - last < self.period:
                self._pending[key] = (pending + count, message)
                return
            self._last[key] = now
        if last is None:
            self.log.log(level, "%s (%d; more of these are counted and logged once a minute)", message, count)
        else:
            self.log.log(level, "%s (%d in the last minute)", message, pending + count)

    def flush(self, level: int = logging.WARNING) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for count, message in pending.values():
            self.log.log(level, "%s (%d more since the last line like this)", message, count)


class Delivery:
    """The write-ahead spool, memory buffer and worker thread of one sink."""

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
        write_ahead: bool = True,
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
        self.write_ahead = write_ahead
        self.log = log or logging.getLogger(f"gpuagent.delivery.{name}")
        self._every_minute = _EveryMinute(self.log)

        self._cond = threading.Condition()
        self._buffer: deque[str] = deque()  # lines not in the spool: write_ahead off, or the spool failing
        self._inflight: list[str] | None = None  # a batch from memory being sent
        self._inflight_spooled = False  # flush() put a copy in the spool already
        self._wake = False
        self._closing = False
        self._flush_deadline: float | None = None
        self._stop_by: float | None = None  # set by flush(): close() must be done by then
        self._thread: threading.Thread | None = None
        self._spool_problem: str | None = None  # the spool state last reported in the log
        self._pool: ThreadPoolExecutor | None = None  # the second request of a replay
        self._draining = spool.points > 0  # spooled batches to send without waiting for the interval
        self._catching_up = self._draining  # sending what waited past an interval: an outage, an earlier run
        self._spool_retry_at = 0.0  # after a failed commit, memory takes new lines for a while

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
        # The state at start is the opener's to report (the sink says it once); changes are ours.
        self._spool_problem = spool.problem if not spool.writable else None

    # -- API used by the sink ---------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"gpuagent-sink-{self.name}", daemon=True)
        self._thread.start()

    def put(self, lines: Iterable[str]) -> None:
        """Queue lines (no newline) for delivery; with write_ahead they are committed to the spool first.
        Never does network I/O."""
        lines = [line for line in lines if line]
        if not lines:
            return
        if self.write_ahead and self.spool.available and time.monotonic() >= self._spool_retry_at:
            left = self._spool_lines(lines, keep_in_memory=False)
            if not left:
                if self._outage or self.spool.points >= self.batch_size:
                    with self._cond:
                        self._wake = True
                        self._cond.notify_all()
                return
            lines = left
        with self._cond:
            self._buffer.extend(lines)
            self._trim_memory()
            if self._outage or len(self._buffer) >= self.batch_size:
                self._wake = True
                self._cond.notify_all()

    def flush(self, timeout: float) -> None:
        """Deliver what is waiting, or leave it in the spool, within timeout seconds."""
        deadline = time.monotonic() + max(0.0, timeout)
        self._stop_by = deadline
        # Leave a slice of the time to move what is left to the spool ourselves.
        soft = deadline - min(1.0, max(0.0, timeout) * 0.2)
        with self._cond:
            self._flush_deadline = soft
            self._wake = True
            self._cond.notify_all()
            while self._thread and self._thread.is_alive() and not self._outage and (
                self._buffer or self._inflight is not None or (self.write_ahead and self.spool.points)
            ):
                left = soft - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
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

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker by the deadline the last flush() was given (or within `timeout`, default 1 s):
        a request still in flight is cut short; nothing is waited for beyond that."""
        now = time.monotonic()
        stop_by = now + timeout if timeout is not None else (self._stop_by or now + 1.0)
        with self._cond:
            self._closing = True
            self._wake = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(max(0.0, stop_by - time.monotonic()))
            if self._thread.is_alive():
                abort = getattr(self.transport, "abort", None)
                if abort is not None:
                    abort()
                self._thread.join(0.2)
        with self._cond:
            leftover = list(self._buffer)
            self._buffer.clear()
        if leftover:  # close() without flush(): still never lose what was written
            self._spool_lines(leftover)
        with self._cond:
            lost = len(self._buffer)
            self._buffer.clear()
        if lost:
            self._memory_dropped_total += lost
            self.log.error(
                "%s: %d points could neither be delivered nor spooled (%s) before stopping; dropped",
                self.name, lost, self.spool.problem or "spool unavailable",
            )
        self._every_minute.flush()
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
            "spool_damaged_total": self.spool.damaged_total,
            "spool_writable": int(self.spool.writable),
        }

    def describe(self) -> str:
        memory = "" if self.spool.writable else f"; spool {self.spool.problem or 'unavailable'}, delivery in memory"
        if self._outage:
            return f"spooling {self.spool.points + len(self._buffer)} points ({self._last_error}){memory}"
        if self._catching_up and self.spool.points:
            return f"replaying {self.spool.points} spooled points{memory}"
        return "ok" + memory

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
            except Exception as exc:  # never let the worker die: the sink would silently stop
                self._every_minute.note(
                    f"worker:{type(exc).__name__}:{exc}", 1,
                    f"{self.name}: delivery worker error: {type(exc).__name__}: {exc}", logging.ERROR,
                )
                wait = 1.0
            with self._cond:
                self._cond.notify_all()  # a flush() waiting for the spool or the buffer to empty
                if self._closing:
                    return
                if wait > 0 and not self._wake:
                    self._cond.wait(wait)
                self._wake = False
                if self._closing:
                    return

    def _step(self) -> float:
        """Do one unit of work; return how long to sleep before the next (0: go on at once)."""
        self.spool.reopen_if_due()
        self._note_spool_state()
        now = time.monotonic()
        if self._outage and now < self._retry_at:
            self._spill_memory()
            return self._retry_at - now

        with self._cond:
            flushing = self._flush_deadline is not None
            due = now >= self._next_flush
            if due:
                self._next_flush = now + self._interval()
            memory = len(self._buffer)
        backlog = self.spool.points
        if backlog and (due or flushing or self._outage or not self.write_ahead or backlog >= self.batch_size):
            self._draining = True
        memory_ready = memory and (memory >= self.batch_size or due or flushing or self._outage)
        # New points first when the spool is failing: the spool's batches are safe where they are.
        if backlog and self._draining and not (memory_ready and not self.spool.writable):
            if memory >= self.batch_size and self.spool.writable:
                self._spill_memory()  # the replay has the right of way; keep memory small meanwhile
            return self._replay_one()
        if memory_ready:
            return self._send_memory()
        if due:  # idle tick: pick up batches another instance spooled (the sink before a reload)
            self.spool.refresh()
            if self.spool.points:
                self._draining = self._catching_up = True
                return 0.0
        if backlog == 0:
            self._draining = False
        return max(0.0, self._next_flush - time.monotonic())

    def _send_memory(self) -> float:
        with self._cond:
            batch = [self._buffer.popleft() for _ in range(min(self.batch_size, len(self._buffer)))]
            self._inflight, self._inflight_spooled = batch, False
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
            if not self.spool.points:
                self._draining = self._catching_up = False
            return 0.0
        second = None if self._outage else self.spool.peek(self.batch_size, after_id=first[0])
        if second is None:  # one request: the probe after an outage, or the spool's tail
            if self._deliver(first[2], first[1], replay=True):
                self._removed(first[0])
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
            self._removed(done_through)
        return 0.0

    def _removed(self, last_id: int) -> None:
        self.spool.remove_through(last_id)
        self._note_spool_state()
        if not self.spool.points:
            self._draining = self._catching_up = False

    def _deliver(self, body: bytes, count: int, replay: bool = False) -> bool:
        """Send `count` lines; True when they are done with (stored, or refused by the server)."""
        return self._handle(self._send(body, count), body, count, replay)

    def _handle(self, result: Result, body: bytes, count: int, replay: bool) -> bool:
        if result.outcome in (Outcome.ACCEPTED, Outcome.PARTIAL):
            stored = count - (result.rejected if result.outcome is Outcome.PARTIAL else 0)
            if result.outcome is Outcome.PARTIAL:
                self._reject(result.rejected, result)
            self.points_written_total += stored
            if replay and (self._outage or self._outage_replay):  # the probe ending an outage too
                self.replayed_total += stored
            self._recovered()
            return True
        if result.outcome in (Outcome.REJECTED, Outcome.TOO_LARGE):
            # split("\n"), not splitlines(): a CR or a form feed inside a line is not a line break.
            return self._split([line for line in body.decode("utf-8").split("\n") if line], result, replay)
        self._failed(result, count)
        return False

    @property
    def _outage_replay(self) -> bool:
        # With write-ahead every batch passes through the spool: only those that waited
        # there past an interval (an outage, a restart) count as replayed.
        return not self.write_ahead or self._catching_up

    def _split(self, lines: list[str], result: Result, replay: bool) -> bool:
        if len(lines) <= 1:
            # Alone and still refused: this line is the bad one (or too large to ever fit).
            self._reject(len(lines), result, lines[0] if lines else "")
            self._recovered()
            return True
        mid = len(lines) // 2
        # A transient failure of either half keeps the whole batch: resending a half
        # the server already took only writes the same points again.
        first, second = _encode(lines[:mid]), _encode(lines[mid:])
        got_first = self._send(first, mid)
        if result.outcome is Outcome.REJECTED and _alike(got_first, result):
            got_second = self._send(second, len(lines) - mid)
            if _alike(got_second, result):
                # Both halves refused in the words of the whole: the server refuses requests,
                # not lines (InfluxDB names each bad line). Keep everything, as for a 401.
                self._failed(Result(Outcome.FATAL, result.status, result.message, hint=BAD_REQUEST_HINT),
                             len(lines))
                return False
            return self._handle(got_first, first, mid, replay) and self._handle(
                got_second, second, len(lines) - mid, replay)
        return self._handle(got_first, first, mid, replay) and self._deliver(second, len(lines) - mid, replay)

    def _send(self, body: bytes, count: int) -> Result:
        try:
            return self.transport.send(body, count)
        except Exception as exc:  # a transport bug must not lose data: treat as transient
            return Result(Outcome.RETRY, None, f"{type(exc).__name__}: {exc}")

    def _reject(self, count: int, result: Result, line: str | None = None) -> None:
        self.rejected_total += count
        if line is not None:
            kind, what = "line", f"a line, e.g. {line[:300]!r}"
        else:
            kind, what = "partial", "lines of a partial write"
        self._every_minute.note(
            f"refused:{kind}", count,
            f"{self.name}: server refused {what} (HTTP {result.status}): {result.message[:500]}; dropped",
        )

    def _recovered(self) -> None:
        if self._outage:
            self.log.warning(
                "%s: server is accepting writes again; replaying %d spooled points",
                self.name, self.spool.points,
            )
            self._draining = self._catching_up = self.spool.points > 0
        self._outage = False
        self._backoff = self.initial_backoff
        self._last_error = ""

    def _failed(self, result: Result, points: int) -> None:
        self.write_errors_total += 1
        reason = f"HTTP {result.status}: {result.message[:300]}" if result.status else result.message[:300]
        fatal = result.outcome is Outcome.FATAL
        if fatal:
            delay = self.max_backoff
            hint = result.hint or {401: "check the token / credentials", 403: "the token lacks write permission",
                                   404: "the database / bucket / org does not exist"}.get(result.status or 0, "")
            if reason != self._last_error:
                self.log.error(
                    "%s: write refused, %s (%s); keeping %d points and retrying every %gs",
                    self.name, hint, reason, points + self.spool.points, delay,
                )
        else:
            delay = self._backoff * random.uniform(0.8, 1.2)
            self._backoff = min(self._backoff * 2, self.max_backoff)
            if result.retry_after is not None:
                # The server may ask for a longer wait, never a shorter one (a Retry-After
                # of 0 or a date in the past must not turn the backoff into a busy loop).
                delay = max(delay, min(result.retry_after, max(self.max_backoff, 300.0)))
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

    def _note_spool_state(self) -> None:
        """One log line per change of the spool's state, not one per batch."""
        problem = self.spool.problem if not self.spool.writable else None
        if problem == self._spool_problem:
            return
        if problem is not None:
            self.log.error(
                "%s: cannot write the spool in %s (%s); delivery keeps points in memory (at most %d, "
                "oldest dropped and counted) until it can",
                self.name, self.spool.directory, problem, self.max_buffer_points,
            )
        else:
            self.log.warning("%s: the spool in %s can be written again", self.name, self.spool.directory)
        self._spool_problem = problem

    def _spill_memory(self) -> None:
        if not self.spool.available or time.monotonic() < self._spool_retry_at:
            return
        with self._cond:
            lines = list(self._buffer)
            self._buffer.clear()
            self._cond.notify_all()
        if lines:
            self._spool_lines(lines)

    def _spool_lines(self, lines: list[str], keep_in_memory: bool = True) -> list[str]:
        """Commit lines to the spool in batches; what cannot be committed is put back in memory
        (or, with keep_in_memory false, returned to the caller)."""
        for i in range(0, len(lines), self.batch_size):
            chunk = lines[i : i + self.batch_size]
            try:
                dropped = self.spool.push(_encode(chunk), len(chunk))
            except SpoolError:
                self._spool_retry_at = time.monotonic() + 5.0
                self._note_spool_state()
                if keep_in_memory:
                    self._requeue(lines[i:])
                    return []
                return lines[i:]
            if dropped:
                self._every_minute.note(
                    "spool-full", dropped,
                    f"{self.name}: spool is full ({self.spool.max_bytes} bytes): dropped the oldest points",
                )
        self._note_spool_state()
        return []

    def _requeue(self, lines: list[str]) -> None:
        with self._cond:
            self._buffer.extendleft(reversed(lines))
            self._trim_memory()

    def _trim_memory(self) -> None:
        """Keep the newest max_buffer_points lines; count the rest as dropped. Holds self._cond."""
        over = len(self._buffer) - self.max_buffer_points
        if over > 0:
            for _ in range(over):
                self._buffer.popleft()
            self._memory_dropped_total += over
            self._every_minute.note(
                "memory-full", over,
                f"{self.name}: memory buffer is full ({self.max_buffer_points} points) and the spool cannot "
                "take more: dropped the oldest points",
            )


def _alike(got: Result, whole: Result) -> bool:
    return got.outcome is Outcome.REJECTED and got.status == whole.status and got.message == whole.message


def _encode(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8")
