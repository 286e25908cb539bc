"""gpuagent run as a long-running service, under systemd or in a terminal.

The main thread runs the scheduler's loop. Signal handlers only set flags;
the loop's ``on_tick`` (main thread) turns them into work:

- READY=1 once the first collection has been handed to the sinks, and again
  after a reload; STATUS= lines a person can read, refreshed every
  [agent] interval (between 1 and STATUS_EVERY seconds);
- WATCHDOG=1 from ``on_tick``, so a stuck scheduler loop stops the pings and
  systemd restarts the service;
- SIGHUP: RELOADING=1, read and validate the config again (plugins' tables
  included); a config that fails leaves the running agent untouched and logs
  one line; a good one is built next to the running agent (sharing its NVML
  session when the simulate spec is unchanged), the old one is flushed and
  closed, and the new one takes over;
- SIGTERM / SIGINT: STOPPING=1, flush every sink (to its server or spool)
  within [agent] shutdown_timeout, return (exit 0).

With GPUAGENT_TEST_HOOKS=1, SIGUSR2 freezes / unfreezes the scheduler loop
(Scheduler.hang) so a test can prove the watchdog pings stop.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from gpuagent.errors import AgentError
from gpuagent.service import scheduler as scheduler_mod
from gpuagent.service.logsetup import setup_logging
from gpuagent.service.runtime import Agent, Options, build, load
from gpuagent.service.sdnotify import monotonic_usec, notify, watchdog_interval

log = logging.getLogger("gpuagent")

STATUS_EVERY = 10.0  # most seconds between STATUS= refreshes
RELOAD_FAILED = "reload failed, keeping the running config"


def serve(options: Options, config, host, log_level: str | None = None, log_format: str | None = None) -> None:
    Daemon(options, config, host, log_level=log_level, log_format=log_format).serve()


def one_line(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, AgentError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


def status_line(agent: Agent) -> str:
    """What STATUS= says, e.g. '2 GPUs (simulated l40s:2); 9 collectors, 1520 points;
    sinks: file ok, influxdb spooling 40 points; spool 40 points, 5120 bytes'."""
    sched = agent.scheduler
    gpus = agent.context.gpus
    what = f"{len(gpus)} GPU{'' if len(gpus) == 1 else 's'}"
    if agent.nvml is not None and agent.nvml.simulated:
        what += f" (simulated {agent.nvml.spec})"
    lost = sum(1 for g in gpus if getattr(g, "lost", False))
    if lost:
        what += f", {lost} lost"
    stats = [r.stats for r in sched.runners]
    coll = f"{len(stats)} collector{'' if len(stats) == 1 else 's'}, {sum(s.points_total for s in stats)} points"
    errors, timeouts = sum(s.errors_total for s in stats), sum(s.timeouts_total for s in stats)
    if errors:
        coll += f", {errors} errors"
    if timeouts:
        coll += f", {timeouts} timeouts"
    sinks, spool_points, spool_bytes, spooled = [], 0, 0, False
    for sink in sched.sinks:
        try:
            state = sink.describe()
            counters = sink.stats()
        except Exception as exc:
            state, counters = f"unknown ({type(exc).__name__})", {}
        sinks.append(f"{sink.name} {state}")
        if "spool_points" in counters or "spool_bytes" in counters:
            spooled = True
            spool_points += int(counters.get("spool_points", 0))
            spool_bytes += int(counters.get("spool_bytes", 0))
    line = f"{what}; {coll}; sinks: {', '.join(sinks) or 'none'}"
    if spooled:
        line += f"; spool {spool_points} points, {spool_bytes} bytes"
    return line


class Daemon:
    def __init__(self, options: Options, config, host, log_level: str | None = None, log_format: str | None = None):
        self.options = options
        self._initial: tuple[Any, Any] | None = (config, host)
        self._log_overrides = (log_level, log_format)
        self.agent: Agent | None = None
        self.watchdog = watchdog_interval()  # seconds, or None
        self._last_ping = float("-inf")
        self._last_status = time.monotonic()
        self._note = ""  # shown in STATUS= until the next good reload
        self._pending: tuple[Any, Any] | None = (
            None  # a validated (config, plugins) waiting to replace the running agent
        )
        # Set by signal handlers: plain attributes, no locks (see _loop_should_stop).
        self._stop_signal: str | None = None
        self._reload_requested = False

    # -- signals: flags only ------------------------------------------------

    def _install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop_signal)
        signal.signal(signal.SIGINT, self._on_stop_signal)
        signal.signal(signal.SIGHUP, self._on_reload_signal)
        if os.environ.get("GPUAGENT_TEST_HOOKS") == "1":
            signal.signal(signal.SIGUSR2, self._on_hang_signal)

    def _on_stop_signal(self, signum, frame) -> None:
        self._stop_signal = signal.Signals(signum).name

    def _on_reload_signal(self, signum, frame) -> None:
        self._reload_requested = True

    def _on_hang_signal(self, signum, frame) -> None:
        # Test hook. Event.set/clear are safe here: the loop only reads hang with is_set().
        if self.agent is not None:
            hang = self.agent.scheduler.hang
            hang.clear() if hang.is_set() else hang.set()

    class _StopWhen:
        """What run_forever(stop) needs (is_set), read from plain flags: a threading.Event
        set from a signal handler could deadlock on the Event's own lock."""

        def __init__(self, test: Callable[[], bool]):
            self._test = test

        def is_set(self) -> bool:
            return self._test()

    def _running(self) -> Agent:
        """The agent: set before the scheduler's callbacks and the reload can run."""
        assert self.agent is not None, "no agent running"
        return self.agent

    def _loop_should_stop(self) -> bool:
        return self._stop_signal is not None or self._pending is not None

    # -- main thread ----------------------------------------------------------

    def serve(self) -> None:
        self._install_signal_handlers()
        assert self._initial is not None, "serve() runs once"
        config, host = self._initial
        self._initial = None
        try:
            self.agent = build(self.options, config, host)
        except Exception as exc:
            notify(f"STATUS=failed to start: {one_line(exc)}")
            raise
        self._attach(self.agent)
        log.info("running: %s", status_line(self.agent))
        try:
            while self._stop_signal is None:
                self._running().scheduler.run_forever(self._StopWhen(self._loop_should_stop))
                if self._pending is not None and self._stop_signal is None:
                    self._apply_reload(*self._pending)
                self._pending = None
        finally:
            self._shutdown()

    def _attach(self, agent: Agent, previous: Agent | None = None) -> None:
        sched = agent.scheduler
        if previous is not None:  # /readyz stays ready and /healthz keeps its clock across a reload
            agent.context.liveness = previous.context.liveness
        if self.watchdog:
            agent.context.liveness.stale_after = self.watchdog
        sched.on_tick = self._on_tick
        sched.on_first_collection = self._on_first_collection
        if self.watchdog:
            # Wake often enough to ping at least every watchdog/4 + watchdog/8 (< half).
            sched.tick = min(scheduler_mod.TICK, self.watchdog / 8)

    def _on_first_collection(self) -> None:
        status = status_line(self._running())
        notify("READY=1\nSTATUS=" + self._with_note(status))
        self._last_status = time.monotonic()
        log.info("first collection handed to the sinks: %s", status)

    def _on_tick(self) -> None:
        # A SIGHUP during start-up waits for READY=1: systemd expects RELOADING=1 only after it.
        agent = self._running()
        if self._reload_requested and agent.scheduler.first_collection_done.is_set():
            self._reload_requested = False
            self._begin_reload()
        now = time.monotonic()
        self._ping(now)
        if now - self._last_status >= max(1.0, min(STATUS_EVERY, agent.config.agent.interval)):
            self._last_status = now
            notify("STATUS=" + self._with_note(status_line(agent)))

    def _ping(self, now: float | None = None) -> None:
        if not self.watchdog:
            return
        now = time.monotonic() if now is None else now
        if now - self._last_ping >= self.watchdog / 4:
            self._last_ping = now
            notify("WATCHDOG=1")

    def _with_note(self, status: str) -> str:
        return f"{status}; {self._note}" if self._note else status

    # -- reload ---------------------------------------------------------------

    def _begin_reload(self) -> None:
        """Validate the new config inside the loop; only a good one stops the loop for the swap."""
        notify(f"RELOADING=1\nMONOTONIC_USEC={monotonic_usec()}\nSTATUS=reloading the configuration")
        log.info("SIGHUP: reloading the configuration")
        try:
            self._pending = load(self.options)
        except Exception as exc:
            self._reload_failed(exc)
            # The running agent is untouched; tell systemd the reload is over.
            notify("READY=1\nSTATUS=" + self._with_note(status_line(self._running())))

    def _reload_failed(self, exc: BaseException) -> None:
        reason = one_line(exc)
        log.error("%s: %s", RELOAD_FAILED, reason)
        self._note = f"last reload failed: {reason}"

    def _apply_reload(self, config, plugins) -> None:
        old = self._running()
        same_nvml = _nvml_key(self.options, config) == _nvml_key(self.options, old.config)
        session = old.nvml
        if same_nvml:
            # Build next to the running agent; it keeps collecting until the swap.
            try:
                new = build(self.options, config, plugins, nvml=session, liveness=old.context.liveness)
            except Exception as exc:
                # Perhaps it needs something the running agent holds (a listening port):
                # try again once the old one is closed.
                log.info(
                    "reload: building beside the running agent failed (%s); retrying after closing it", one_line(exc)
                )
            else:
                self._ping()
                self._retire(old, keep_nvml=True)
                self._adopt(new, old)
                _say_spools_left_behind(old, new)
                return
        # The simulator is process-wide: a different spec means closing the old session first.
        self._retire(old, keep_nvml=same_nvml)
        self.agent = None  # closed: nothing to shut down if no agent comes back
        self._ping()
        try:
            new = build(self.options, config, plugins, nvml=session if same_nvml else None)
        except Exception as exc:
            self._reload_failed(exc)
            # Bring the previous config back.
            try:
                new = build(self.options, old.config, old.plugins, nvml=session if same_nvml else None)
            except Exception as again:
                raise AgentError(
                    f"reload failed ({one_line(exc)}) and the previous config could not be restored: {one_line(again)}"
                ) from None
            self._attach(new, old)
            self.agent = new
            return
        self._adopt(new, old)
        _say_spools_left_behind(old, new)

    def _adopt(self, new: Agent, old: Agent) -> None:
        self._note = ""
        level, fmt = self._log_overrides
        setup_logging(level or new.config.agent.log_level, fmt or new.config.agent.log_format)
        self._attach(new, old)
        self.agent = new
        log.info("reloaded %s: %s", new.config.path or "the default config", status_line(new))

    def _retire(self, agent: Agent, keep_nvml: bool) -> None:
        """Hand the agent's last counters to its sinks, flush them and close everything."""
        sched = agent.scheduler
        try:
            sched.deliver(sched.self_points())
        except Exception as exc:
            log.error("final self-measurement failed: %s", one_line(exc))
        if keep_nvml:
            agent.nvml = None  # shared with its successor
        agent.close()

    # -- stop -----------------------------------------------------------------

    def _shutdown(self) -> None:
        notify("STOPPING=1\nSTATUS=stopping: flushing the sinks")
        if self._stop_signal:
            log.info("received %s; flushing and stopping", self._stop_signal)
        agent, self.agent = self.agent, None
        if agent is not None:
            self._retire(agent, keep_nvml=False)
        log.info("stopped")


def _say_spools_left_behind(old: Agent, new: Agent) -> None:
    """A sink the reload removed leaves its spooled points on disk: say how many, and where."""
    kept = {sink.name for sink in new.scheduler.sinks}
    for sink in old.scheduler.sinks:
        if sink.name in kept:
            continue
        try:
            points = int(sink.stats().get("spool_points", 0))
        except Exception:  # noqa: BLE001 - a closed third-party sink: nothing to say
            continue
        if points:
            spool = getattr(getattr(sink, "delivery", None), "spool", None)
            where = getattr(spool, "directory", None) or "its spool"
            log.warning(
                "reload: sink %s is no longer configured; %d points stay in its spool in %s, "
                "sent when [sinks.%s] is configured again",
                sink.name,
                points,
                where,
                sink.name,
            )


def _nvml_key(options: Options, config) -> tuple:
    simulate = options.simulate or config.agent.simulate or None
    seed = options.seed if options.seed is not None else config.agent.seed
    return (simulate, seed if simulate else None)
