"""What /healthz and /readyz answer: is the scheduler's loop turning, has the first collection landed.

The scheduler's loop calls ``tick()`` on every turn (where it would ping the
systemd watchdog); ``alive()`` is false once no turn has come for
``stale_after`` seconds (the unit's WatchdogSec=30 by default, WATCHDOG_USEC
when systemd sets one). ``mark_ready()`` comes once the first collection has
been accepted by every sink (into its buffer or spool: a server that is down
does not hold it back). A reload carries the same object to the new agent, so
a pod does not go unready while its config is swapped.
"""

from __future__ import annotations

import threading
import time

DEFAULT_STALE_AFTER_S = 30.0  # config/gpuagent.service: WatchdogSec=30


class Liveness:
    def __init__(self, stale_after: float = DEFAULT_STALE_AFTER_S):
        self.stale_after = stale_after
        self.last_tick = time.monotonic()  # start-up counts as a turn: the loop has not begun yet
        self._ready = threading.Event()

    def tick(self) -> None:
        self.last_tick = time.monotonic()

    def mark_ready(self) -> None:
        self._ready.set()

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def alive(self) -> tuple[bool, str]:
        idle = time.monotonic() - self.last_tick
        if idle > self.stale_after:
            return False, f"scheduler loop stuck: no turn for {idle:.1f}s (limit {self.stale_after:g}s)\n"
        return True, "ok\n"

    def readiness(self) -> tuple[bool, str]:
        if self.ready:
            return True, "ok\n"
        return False, "first collection not yet accepted by every sink\n"
