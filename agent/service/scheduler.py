"""Runs each collector on its own interval, in its own thread, with a timeout.

Each collector gets a worker thread so that a hang in one cannot delay the
others; Python cannot kill a thread, so a hung run is counted as a timeout,
its late result is discarded, and its next runs are skipped (and counted)
until it returns. The scheduler's own loop hands results to the sinks, emits
the agent's `gpuagent` measurement and calls ``on_tick`` (the systemd
watchdog): if this loop is stuck, the pings stop.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import psutil

from gpuagent.collector import Collector
from gpuagent.context import AgentContext
from gpuagent.gpus.gpu import calls_made, current_collector
from gpuagent.gpus.nvml_read import current_tick
from gpuagent.pipeline import metric, names
from gpuagent.pipeline.accumulator import Accumulator
from gpuagent.pipeline.metric import Point
from gpuagent.pipeline.sink_isolation import IsolatedSink, isolate
from gpuagent.schema.measurements import GPUAGENT
from gpuagent.service import safe_files
from gpuagent.service.state_file import LatestState
from gpuagent.sink import Sink

log = logging.getLogger("gpuagent.service.scheduler")

TICK = 0.5  # longest sleep of the loop: bounds the watchdog and stop latency
COST_WINDOW_S = 60.0  # `gpuagent inspect` shows each collector's cost over the last minute
COST_FILE = "cost.json"  # in the state directory: the last minute's cost, for `inspect`
COST_WRITE_EVERY_S = 10.0  # a last-minute figure needs no fresher file (at 1 s this is a tenth of the writes)
RUN_ONCE_DRAIN_S = 10.0  # run_once waits this long at most for a sink's queued writes
FIRST_DRAIN_S = 2.0  # and the first collection (READY) this long: a stuck sink must not hold READY back


class StopFlag(Protocol):
    """What run_forever reads to stop: a threading.Event, or the daemon's signal flags."""

    def is_set(self) -> bool: ...


@dataclass
class CollectorStats:
    runs_total: int = 0
    errors_total: int = 0
    timeouts_total: int = 0
    skipped_total: int = 0
    points_total: int = 0
    late_points_discarded_total: int = 0
    nonfinite_dropped_total: int = 0
    out_of_range_dropped_total: int = 0
    gather_time_s: float = 0.0
    last_error: str = ""
    # The agent's own cost: NVML calls (through Gpu.query; a field-values batch is one) and the
    # CPU time of the collector's thread, of the last run and in total.
    nvml_calls: int = 0
    cpu_time_s: float = 0.0
    nvml_calls_total: int = 0
    cpu_seconds_total: float = 0.0
    recent: deque = field(default_factory=deque)  # (monotonic end, calls, cpu s) of the last minute's runs

    def add_cost(self, now: float, calls: int, cpu_s: float) -> None:
        self.nvml_calls, self.cpu_time_s = calls, cpu_s
        self.nvml_calls_total += calls
        self.cpu_seconds_total += cpu_s
        self.recent.append((now, calls, cpu_s))
        while self.recent and self.recent[0][0] < now - COST_WINDOW_S:
            self.recent.popleft()

    def last_minute(self) -> dict[str, float | int]:
        runs = list(self.recent)
        return {
            "runs": len(runs),
            "nvml_calls": sum(r[1] for r in runs),
            "cpu_ms": round(sum(r[2] for r in runs) * 1000, 3),
        }


@dataclass
class RunResult:
    runner: CollectorRunner
    seq: int
    points: list[Point]
    duration: float
    error: BaseException | None = None
    nonfinite: int = 0
    nvml_calls: int = 0
    cpu_s: float = 0.0
    out_of_range: int = 0


@dataclass
class CollectorRunner:
    collector: Collector
    interval: float
    timeout: float
    results: queue.Queue
    default_tags: dict[str, str]
    stats: CollectorStats = field(default_factory=CollectorStats)
    next_due: float = 0.0
    busy: bool = False
    started_at: float = 0.0
    stamp_ns: int = 0
    timed_out: bool = False
    seq: int = 0
    completed_once: bool = False

    def __post_init__(self) -> None:
        self._go = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._work, name=f"collector-{self.collector.name}", daemon=True)
        self._thread.start()

    @property
    def name(self) -> str:
        return self.collector.name

    def start_run(self, now: float, stamp_ns: int | None = None) -> None:
        self.busy, self.timed_out, self.started_at = True, False, now
        # The tick's one timestamp: every collector started on it stamps its points with it, so a
        # work sample and the GPU's energy sample of one tick meet (compare's energy per unit).
        self.stamp_ns = stamp_ns if stamp_ns is not None else time.time_ns()
        self.seq += 1
        self._go.set()

    def stop(self) -> None:
        self._stop = True
        self._go.set()

    def _work(self) -> None:
        # NVML refusals in this thread are counted under this collector (gpuagent.gpus.gpu.NvmlErrors).
        current_collector.set(self.collector.name)
        while True:
            self._go.wait()
            self._go.clear()
            if self._stop:
                return
            seq = self.seq
            # Runs started on the same tick share their field-values batches (nvml_read.FieldGroup).
            current_tick.set(self.started_at)
            acc = Accumulator(self.default_tags, time_ns=self.stamp_ns)
            t0 = time.perf_counter()
            cpu0, calls0 = time.thread_time(), calls_made.n
            error = None
            try:
                self.collector.collect(acc)
            except BaseException as exc:  # isolation: any failure (SystemExit too) is this collector's alone
                error = exc
            duration = time.perf_counter() - t0
            self.results.put(
                RunResult(
                    self,
                    seq,
                    acc.points,
                    duration,
                    error,
                    acc.nonfinite_dropped,
                    calls_made.n - calls0,
                    time.thread_time() - cpu0,
                    acc.out_of_range_dropped,
                )
            )


class Scheduler:
    def __init__(
        self,
        context: AgentContext,
        collectors: Sequence[tuple[Collector, float, float]],
        sinks: Sequence[Sink],
        agent_interval: float,
        on_tick: Callable[[], None] | None = None,
        on_first_collection: Callable[[], None] | None = None,
        failed_collectors: dict[str, str] | None = None,
    ):
        self.context = context
        self.born = time.monotonic()  # a young agent's "last minute" covers only its life so far
        # Enabled collectors that could not be built (name -> why): reported, never run.
        self.failed_collectors = dict(failed_collectors or {})
        self.fold_nvml_errors = False  # set by run --test
        self.sinks = isolate(sinks, self._sink_failed)
        self.agent_interval = agent_interval
        self.on_tick = on_tick
        self.on_first_collection = on_first_collection
        self.results: queue.Queue[RunResult] = queue.Queue()
        self.runners = [
            CollectorRunner(c, interval, timeout, self.results, context.default_tags)
            for c, interval, timeout in collectors
        ]
        self.sink_errors: dict[str, int] = {s.name: 0 for s in self.sinks}
        self.started = time.monotonic()
        self.first_collection_done = threading.Event()
        self._process = psutil.Process()
        self._stop = threading.Event()
        # Tests (and the daemon's self-check) can freeze the loop to prove the watchdog stops.
        self.hang = threading.Event()
        # Longest sleep of the loop; the daemon shortens it when the watchdog interval is short.
        self.tick = TICK
        # The latest readings and verdict per GPU, written to the state dir each cycle (state_file).
        self.latest = LatestState()

    # -- the loop ------------------------------------------------------------

    def run_forever(self, stop: StopFlag | None = None) -> None:
        if stop is None:
            stop = self._stop
        now = time.monotonic()
        for r in self.runners:
            r.next_due = now
        next_self = now + self.agent_interval
        while not stop.is_set():
            while self.hang.is_set() and not stop.is_set():
                time.sleep(0.05)
            now = time.monotonic()
            self.context.liveness.tick()
            self._start_due(now)
            self._check_timeouts(now)
            if self.first_collection_done.is_set() and not self.context.liveness.ready:
                self._check_ready()
            if now >= next_self:
                self.deliver(self.self_points())
                self.write_cost()
                self.latest.write(self.context.state_dir, self.agent_interval, self.context.hostname, self.cost())
                next_self = now + self.agent_interval
            if self.on_tick:
                self.on_tick()
                if stop.is_set():  # on_tick may end the loop (the daemon's reload)
                    break
            wake = min([next_self, now + self.tick] + [self._next_event(r) for r in self.runners])
            try:
                result = self.results.get(timeout=max(0.0, wake - time.monotonic()))
            except queue.Empty:
                continue
            self._handle(result)
            while True:
                try:
                    self._handle(self.results.get_nowait())
                except queue.Empty:
                    break

    def stop(self) -> None:
        self._stop.set()

    def run_once(self) -> list[Point]:
        """Run every collector once (in parallel), deliver, and return all points."""
        now = time.monotonic()
        pending = set()
        self.context.shared.starting(now, {r.name for r in self.runners})
        stamp = time.time_ns()
        for r in self.runners:
            r.start_run(now, stamp)
            pending.add(r.name)
        delivered: list[Point] = []
        while pending:
            now = time.monotonic()
            self._check_timeouts(now)
            for r in self.runners:
                if r.name in pending and r.timed_out:
                    pending.discard(r.name)
            if not pending:
                break
            deadline = min(r.started_at + r.timeout for r in self.runners if r.name in pending)
            try:
                result = self.results.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                continue
            delivered.extend(self._handle(result))
            pending.discard(result.runner.name)
        self._drain(RUN_ONCE_DRAIN_S)  # the own point counts what the sinks did with the run's points
        own = self.self_points()
        self.deliver(own)
        self.write_cost(force=True)
        self._drain(RUN_ONCE_DRAIN_S)
        return delivered + own

    def _drain(self, timeout: float) -> None:
        """Wait until the queued sinks have written what they were handed ("delivered" means in the
        sinks' hands), at most ``timeout`` seconds each."""
        for sink in self.sinks:
            if isinstance(sink, IsolatedSink) and not sink.drain(timeout):
                log.error("sink %s: its writes have not returned within %gs", sink.name, timeout)

    def close(self, flush_timeout: float = 10.0) -> None:
        deadline = time.monotonic() + flush_timeout
        for r in self.runners:
            r.stop()

        def flush(sink: Sink) -> None:
            try:
                sink.flush(max(0.1, deadline - time.monotonic()))
            except Exception as exc:
                log.error("sink %s: flush failed: %s", sink.name, exc)

        # All at once: each sink has the whole deadline, a slow or stuck one takes none of another's.
        flushing = [threading.Thread(target=flush, args=(s,), name=f"gpuagent-flush-{s.name}") for s in self.sinks]
        for t in flushing:
            t.start()
        for t in flushing:
            t.join(max(0.0, deadline - time.monotonic()) + 1.0)
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:
                log.error("sink %s: close failed: %s", sink.name, exc)
        for r in self.runners:
            try:
                r.collector.close()
            except Exception as exc:
                log.error("collector %s: close failed: %s", r.name, exc)

    # -- pieces --------------------------------------------------------------

    def _next_event(self, r: CollectorRunner) -> float:
        if r.busy and not r.timed_out:
            return min(r.next_due, r.started_at + r.timeout)
        return r.next_due

    def _start_due(self, now: float) -> None:
        due = []
        for r in self.runners:
            if now < r.next_due:
                continue
            # Keep a steady cadence; after a stall, start afresh rather than bursting.
            r.next_due = r.next_due + r.interval if r.next_due + r.interval > now else now + r.interval
            if r.busy:
                r.stats.skipped_total += 1
                log.warning("collector %s: still running, skipping this run", r.name)
                continue
            due.append(r)
        if due:
            # Before any starts: a collector reading another's value of this tick knows to wait.
            self.context.shared.starting(now, {r.name for r in due})
        stamp = time.time_ns()
        for r in due:
            r.start_run(now, stamp)

    def _check_timeouts(self, now: float) -> None:
        for r in self.runners:
            if r.busy and not r.timed_out and now - r.started_at > r.timeout:
                r.timed_out = True
                r.stats.timeouts_total += 1
                r.stats.last_error = f"timed out after {r.timeout:g}s"
                log.error("collector %s: timed out after %gs", r.name, r.timeout)
                self._mark_first(r)

    def _handle(self, result: RunResult) -> list[Point]:
        r = result.runner
        r.busy = False
        stats = r.stats
        if r.timed_out or result.seq != r.seq:
            stats.late_points_discarded_total += len(result.points)
            log.warning(
                "collector %s: returned after %.1fs, past its timeout; %d points discarded",
                r.name,
                result.duration,
                len(result.points),
            )
            return []
        stats.runs_total += 1
        stats.gather_time_s = result.duration
        stats.add_cost(time.monotonic(), result.nvml_calls, result.cpu_s)
        stats.nonfinite_dropped_total += result.nonfinite
        stats.out_of_range_dropped_total += result.out_of_range
        if result.error is not None:
            stats.errors_total += 1
            stats.last_error = f"{type(result.error).__name__}: {result.error}"
            log.error("collector %s: %s", r.name, stats.last_error, exc_info=log.isEnabledFor(logging.DEBUG))
        stats.points_total += len(result.points)
        self.latest.record(result.points)
        self.deliver(result.points)
        self._mark_first(r)  # after delivery: on_first_collection means "handed to the sinks"
        return result.points

    def _mark_first(self, r: CollectorRunner) -> None:
        r.completed_once = True
        if not self.first_collection_done.is_set() and all(x.completed_once for x in self.runners):
            # READY means the first collection is in the sinks: wait (once, briefly) for queued ones.
            self._drain(FIRST_DRAIN_S)
            self.first_collection_done.set()
            _name_unasked_faults()
            self._check_ready()
            if self.on_first_collection:
                self.on_first_collection()

    def _check_ready(self) -> None:
        """/readyz: ready once every queued sink has taken the first collection (a sink still stuck
        in its first write keeps the agent unready; the loop asks again on each turn)."""
        if all(s.drain(0) for s in self.sinks if isinstance(s, IsolatedSink)):
            self.context.liveness.mark_ready()

    def deliver(self, points: list[Point]) -> None:
        if not points:
            return
        for sink in self.sinks:
            try:
                sink.write(points)
            except Exception as exc:
                self._sink_failed(sink.name, exc)

    def _sink_failed(self, name: str, exc: BaseException) -> None:
        self.sink_errors[name] = self.sink_errors.get(name, 0) + 1
        log.error("sink %s: write failed: %s", name, exc)

    @staticmethod
    def _collector_stats(r: CollectorRunner) -> dict:
        try:
            return dict(r.collector.stats())
        except Exception as exc:  # a third-party collector's counters must not cost the agent's
            log.error("collector %s: stats failed: %s", r.name, exc)
            return {}

    def self_points(self) -> list[Point]:
        """The agent's own health: the `gpuagent` measurement."""
        acc = Accumulator(self.context.default_tags)
        for r in self.runners:
            s = r.stats
            acc.add_fields(
                GPUAGENT,
                {
                    **self._collector_stats(r),  # first: its own names never replace the scheduler's
                    "gather_time_ms": round(s.gather_time_s * 1000, 3),
                    "runs_total": s.runs_total,
                    "errors_total": s.errors_total,
                    "timeouts_total": s.timeouts_total,
                    "skipped_total": s.skipped_total,
                    "points_total": s.points_total,
                    "late_points_discarded_total": s.late_points_discarded_total,
                    "nonfinite_dropped_total": s.nonfinite_dropped_total,
                    "out_of_range_dropped_total": s.out_of_range_dropped_total,
                    "last_error": s.last_error or None,
                    "nvml_calls": s.nvml_calls,
                    "cpu_time_ms": round(s.cpu_time_s * 1000, 3),
                    "nvml_calls_total": s.nvml_calls_total,
                    "collector_cpu_seconds_total": round(s.cpu_seconds_total, 3),
                },
                tags={"collector": r.name},
            )
        for name, why in self.failed_collectors.items():
            acc.add_fields(GPUAGENT, {"started": False, "last_error": why}, tags={"collector": name})
        for sink in self.sinks:
            try:
                stats = dict(sink.stats())
            except Exception as exc:
                stats = {}
                log.error("sink %s: stats failed: %s", sink.name, exc)
            stats["sink_errors_total"] = self.sink_errors.get(sink.name, 0)
            acc.add_fields(GPUAGENT, stats, tags={"sink": sink.name})
        nvml = self.context.nvml
        unavailable = list(getattr(nvml, "unavailable", None) or ())
        errors = getattr(nvml, "errors", None)
        if errors is not None:
            # NVML refusals by collector, call and code (see gpuagent.gpus.gpu: the error policy).
            for tags, fields in errors.points_fields():
                acc.add_fields(GPUAGENT, fields, tags=tags)
        for gpu in unavailable:
            # A GPU NVML lists but that could not be opened: the others run; this says why.
            acc.add_fields(GPUAGENT, {"gpu_available": False, "gpu_unavailable_reason": gpu.reason}, tags=gpu.tags)
        gpus = self.context.gpus
        with self._process.oneshot():
            cpu = self._process.cpu_times()
            rss = self._process.memory_info().rss
        acc.add_fields(
            GPUAGENT,
            {
                "uptime_s": round(time.monotonic() - self.started, 3),
                "gpus": len(gpus),
                "gpus_lost": sum(1 for g in gpus if g.lost),
                "gpus_unavailable": len(unavailable),
                "collectors": len(self.runners),
                "cpu_seconds_total": round(cpu.user + cpu.system, 3),
                "rss_bytes": rss,
                # Names InfluxDB cannot store are left out (warned once): counted here too.
                "names_refused_total": names.refused_total,
                "points_unwritable_total": metric.unwritable_total,
                # Fields past the bounds on one point (metric.MAX_FIELDS_PER_POINT, MAX_LINE_BYTES).
                "fields_over_bound_total": metric.fields_over_bound_total,
            },
        )
        if self.fold_nvml_errors:  # run --test: one line per collector (gpuagent.service.self_compact)
            from gpuagent.service.self_compact import fold_nvml_errors

            return fold_nvml_errors(acc.points)
        return acc.points

    def cost(self) -> dict[str, dict[str, float | int]]:
        """Collector -> its runs, NVML calls and CPU ms over the last minute."""
        return {r.name: r.stats.last_minute() for r in self.runners}

    def write_cost(self, force: bool = False) -> None:
        """The last minute's cost per collector into the state directory, for `gpuagent inspect`
        (at most every COST_WRITE_EVERY_S unless ``force``)."""
        now = time.monotonic()
        # 0.9: called once per agent interval, a 10 s interval must not skip every other write.
        if not force and now - getattr(self, "_cost_written", -COST_WRITE_EVERY_S) < 0.9 * COST_WRITE_EVERY_S:
            return
        self._cost_written = now
        path = Path(self.context.state_dir) / COST_FILE
        if not path.parent.is_dir():  # the agent made no state dir (a one-off run): nothing to keep
            return
        # The window the figures cover: a minute, or the agent's life so far when shorter (the
        # table once said "last 60 s" over the one run of an agent started seconds before).
        window = round(min(COST_WINDOW_S, max(now - self.born, 0.1)), 1)
        doc = {"written": time.time(), "window_s": window, "collectors": self.cost()}
        try:
            safe_files.write_replace(path, json.dumps(doc).encode())
        except OSError as exc:  # a read-only or missing state dir: the measurement still has it
            if not getattr(self, "_cost_warned", False):
                self._cost_warned = True
                log.warning("cannot write %s: %s (inspect will not show the agent's cost)", path, exc)


def _name_unasked_faults() -> None:
    """On a simulated fleet, a line naming each forced symbol that no collector asked in the first
    collection (the fault changes nothing), with the called symbol nearest to it."""
    import sys

    sim = sys.modules.get("gpuagent.sim")  # not imported: no simulated fleet (and none is loaded here)
    machine = sim.installed() if sim is not None else None
    if machine is None:
        return
    import difflib

    called = sorted(machine.calls)
    for symbol in machine.unasked_forced():
        near = difflib.get_close_matches(symbol, called, n=1, cutoff=0.8)
        hint = f" (they ask {near[0]})" if near else ""
        log.warning("simulated fault on %s: no collector asks it%s; the fault changes nothing", symbol, hint)
