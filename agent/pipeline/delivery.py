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

import logging
import random
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from gpuagent.pipeline.backoff import Outage
from gpuagent.pipeline.batch_sender import BatchSender, Outcome, Sent, Transport, encode
from gpuagent.pipeline.memory_buffer import MemoryBuffer
from gpuagent.pipeline.spool import Spool
from gpuagent.pipeline.spool_writer import SpoolWriter
from gpuagent.pipeline.worker_loop import WorkerLoop


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
    """The worker of one sink: routes lines to the spool or memory, decides when to send and replay
    (``_step``, the one state machine), and keeps the counters. Sending and settling answers is a
    BatchSender's, the retry timing an Outage's, the lines in memory a MemoryBuffer's and the spool
    commits a SpoolWriter's."""

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
        target: str = "",
    ):
        self.name = name
        self.transport = transport
        self.spool = spool
        self.batch_size = max(1, int(batch_size))
        self.flush_interval = flush_interval
        self.flush_jitter = flush_jitter
        self.write_ahead = write_ahead
        self.log = log or logging.getLogger(f"gpuagent.pipeline.delivery.{name}")
        self._every_minute = _EveryMinute(self.log)
        self._outage = Outage(name, self.log, initial_backoff, max_backoff, target=target)
        self._sender = BatchSender(name, transport, self._every_minute)
        self._memory = MemoryBuffer(max(self.batch_size, int(max_buffer_points)), name, self._every_minute)
        self._cond = threading.Condition()  # guards _memory; flush() waits on it for the worker
        self._writer = SpoolWriter(name, spool, self.batch_size, self._memory, self._cond, self.log, self._every_minute)
        self._worker = WorkerLoop(name, self._step, self._cond, self._every_minute)
        self._flush_deadline: float | None = None
        self._stop_by: float | None = None  # set by flush(): close() must be done by then
        self._draining = spool.points > 0  # spooled batches to send without waiting for the interval
        self._catching_up = self._draining  # sending what waited past an interval: an outage, an earlier run
        self._next_flush = time.monotonic() + self._interval()
        self.points_written_total = 0
        self.replayed_total = 0

    @classmethod
    def open(
        cls,
        name: str,
        transport: Transport,
        spool_dir: Path,
        *,
        max_spool_bytes: int,
        spool_sync: str = "normal",
        max_buffer_points: int = 100_000,
        log: logging.Logger | None = None,
        **options,
    ) -> Delivery:
        """A Delivery over the spool in `spool_dir` (made if need be), its state said once. Never refuses
        to start: a damaged file heals itself, and a spool that cannot be opened at all leaves delivery
        in memory (said once here, retried now and then). `options`: the constructor's."""
        log = log or logging.getLogger(f"gpuagent.pipeline.delivery.{name}")
        spool = Spool(spool_dir, max_spool_bytes, sync=spool_sync, log=log)
        delivery = cls(name, transport, spool, max_buffer_points=max_buffer_points, log=log, **options)
        if spool.available and not spool.writable:
            log.error(
                "%s: the spool in %s cannot be written (%s): its %d points are replayed, new points wait in "
                "memory (at most %d; a restart loses them) until it can",
                name,
                spool_dir,
                spool.problem,
                spool.points,
                max_buffer_points,
            )
        elif not spool.available:
            log.error(
                "%s: no spool (%s): delivering from memory only (at most %d points wait for the server; "
                "a restart loses them) until %s can be written",
                name,
                spool.problem,
                max_buffer_points,
                spool_dir,
            )
        if spool.points:
            log.info("%s: %d points in the spool from an earlier run; replaying", name, spool.points)
        return delivery

    # -- API used by the sink ---------------------------------------------------

    def start(self) -> None:
        self._worker.start()

    def put(self, lines: Iterable[str]) -> None:
        """Queue lines (no newline) for delivery; with write_ahead they are committed to the spool first.
        Never does network I/O nor waits on it: what it shares with the worker (the spool, the memory
        buffer) the worker locks for local work alone, never across a request.

        The commit is made here, in the caller's thread (the scheduler's, for the influxdb sink), and
        not handed to the worker, by choice: the spool is the durability guarantee, and a line counts
        as collected once put returns, so it must be on disk by then (fsynced, with spool_sync =
        "full"). The worker may be in a request for up to the sink's `timeout`: lines handed to it
        would wait uncommitted that long (a kill -9 meanwhile loses them), or put would wait on the
        network. What it costs the caller is local disk work only: one SQLite transaction (and an
        fsync), rarely the salvage of a damaged spool file (see gpuagent.sink.Sink.nonblocking)."""
        lines = [line for line in lines if line]
        if self.write_ahead and lines and self._writer.ready:
            lines = self._writer.write(lines)
            if not lines and (self._outage.active or self.spool.points >= self.batch_size):
                self._worker.wake()
        if lines:
            with self._cond:
                self._memory.add(lines)
                if self._outage.active or len(self._memory) >= self.batch_size:
                    self._worker.wake()

    def flush(self, timeout: float) -> None:
        """Deliver what is waiting, or leave it in the spool, within timeout seconds."""
        self._stop_by = time.monotonic() + max(0.0, timeout)
        # Leave a slice of the time to move what is left to the spool ourselves.
        soft = self._stop_by - min(1.0, max(0.0, timeout) * 0.2)
        with self._cond:
            self._flush_deadline = soft
            self._worker.wake()
            while (
                self._worker.alive
                and not self._outage.active
                and (self._memory or self._memory.inflight is not None or (self.write_ahead and self.spool.points))
            ):
                left = soft - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            self._flush_deadline = None
            leftover = self._memory.take_for_spool()
        if leftover:
            self._writer.keep(leftover)

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker by the deadline the last flush() was given (or within `timeout`, default 1 s):
        a request still in flight is cut short; nothing is waited for beyond that."""
        now = time.monotonic()
        stop_by = now + timeout if timeout is not None else (self._stop_by or now + 1.0)
        self._worker.stop(stop_by - time.monotonic(), getattr(self.transport, "abort", None))
        self._writer.spill(at_stop=True)  # close() without flush(): still never lose what was written
        with self._cond:
            lost = self._memory.drop_all()
        if lost:
            self.log.error(
                "%s: %d points could neither be delivered nor spooled (%s) before stopping; dropped",
                self.name,
                lost,
                self.spool.problem or "spool unavailable",
            )
        self._every_minute.flush()
        try:
            self._sender.close()
        finally:
            if not self._worker.alive:
                self.spool.close()

    def stats(self) -> dict[str, int | float]:  # as Sink.stats
        with self._cond:
            buffered = self._memory.pending
        return {
            "points_written_total": self.points_written_total,
            "write_errors_total": self._outage.errors_total,
            "spool_bytes": self.spool.bytes,
            "spool_points": self.spool.points,
            "replayed_total": self.replayed_total,
            "dropped_total": self.spool.dropped_total + self._memory.dropped_total,
            "rejected_total": self._sender.rejected_total,
            "buffered_points": buffered,
            "spool_damaged_total": self.spool.damaged_total,
            "spool_quarantined_total": self.spool.quarantined_total,
            "spool_writable": int(self.spool.writable),
        }

    def describe(self) -> str:
        memory = "" if self.spool.writable else f"; spool {self.spool.problem or 'unavailable'}, delivery in memory"
        if self._outage.active:
            return f"spooling {self.spool.points + len(self._memory)} points ({self._outage.last_error}){memory}"
        if self._catching_up and self.spool.points:
            return f"replaying {self.spool.points} spooled points{memory}"
        if not self.points_written_total:
            # Before the server has stored anything, "ok" would claim what nobody knows yet.
            return "no point written yet" + memory
        return "ok" + memory

    @property
    def outage(self) -> bool:
        return self._outage.active

    # -- the worker -----------------------------------------------------------------

    def _interval(self) -> float:
        return self.flush_interval + (random.uniform(0, self.flush_jitter) if self.flush_jitter > 0 else 0.0)

    def _step(self) -> float:
        """Do one unit of work; return how long to sleep before the next (0: go on at once)."""
        self.spool.reopen_if_due()
        self._writer.note_state()
        now = time.monotonic()
        outage = self._outage.active
        if outage and now < self._outage.retry_at:
            self._writer.spill()
            return self._outage.retry_at - now

        with self._cond:
            flushing = self._flush_deadline is not None
            due = now >= self._next_flush
            if due:
                self._next_flush = now + self._interval()
            memory = len(self._memory)
        backlog = self.spool.points
        if backlog and (due or flushing or outage or not self.write_ahead or backlog >= self.batch_size):
            self._draining = True
        memory_ready = memory and (memory >= self.batch_size or due or flushing or outage)
        # New points first when the spool is failing: the spool's batches are safe where they are.
        if backlog and self._draining and not (memory_ready and not self.spool.writable):
            if memory >= self.batch_size and self.spool.writable:
                self._writer.spill()  # the replay has the right of way; keep memory small meanwhile
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
            batch = self._memory.take(self.batch_size)
        sent = self._heard(self._sender.deliver(encode(batch), len(batch)), replay=False)
        with self._cond:
            already_spooled = self._memory.sent()
            self._cond.notify_all()
        if not sent.done and not already_spooled:
            self._writer.keep(batch)
        return 0.0

    def _replay_one(self) -> float:
        first = self.spool.peek(self.batch_size)
        if first is None:  # the totals were stale (another instance replayed): re-read them
            self.spool.refresh()
            if not self.spool.points:
                self._draining = self._catching_up = False
            return 0.0
        # Two requests at once, but only one (the probe) after an outage; one at the spool's tail.
        second = None if self._outage.active else self.spool.peek(self.batch_size, after_id=first[0])
        if second is None:
            sent = self._heard(self._sender.deliver(first[2], first[1]), replay=True)
        else:
            pairs = ((first[2], first[1]), (second[2], second[1]))  # (body, points) of each
            sent = self._heard(self._sender.deliver_two(*pairs), replay=True)
        if sent.done:  # through the last batch done with, in order
            last = second if sent.done == 2 and second is not None else first
            self.spool.remove_through(last[0])
            self._writer.note_state()
            if not self.spool.points:
                self._draining = self._catching_up = False
        return 0.0

    # -- what the sender heard --------------------------------------------------------

    def _heard(self, sent: Sent, replay: bool) -> Sent:
        """Count what the server took and time the retries by what came of a send; return `sent`."""
        if sent.answered:
            self._stored(sent.stored, replay)
        if sent.failure is not None:  # after what was stored: a split may store one half, then fail
            self._outage.failed(
                sent.failure, fatal=sent.failure.outcome is Outcome.FATAL, keeping=sent.kept + self.spool.points
            )
        return sent

    def _stored(self, count: int, replay: bool) -> None:
        self.points_written_total += count
        # With write-ahead every batch passes through the spool: only those that waited there
        # past an interval (an outage, a restart) count as replayed, the probe ending an outage too.
        if replay and (self._outage.active or not self.write_ahead or self._catching_up):
            self.replayed_total += count
        if self._outage.ended():
            self.log.warning(
                "%s: server is accepting writes again; replaying %d spooled points", self.name, self.spool.points
            )
            self._draining = self._catching_up = self.spool.points > 0
