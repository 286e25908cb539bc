"""What one collector hands the others each cycle: the processes collector's process list for
the work collector, so that NVML is asked once. One path for built-in and third-party
collectors: ``self.context.shared.publish(name, value)`` and ``.latest(name, wait)``, where
``name`` is the producing collector's name.

Collectors run in their own threads, started together on a scheduler tick, and the scheduler
tells the board which collectors it starts on each tick (``starting``). A reader that wants
this tick's value waits for it, at most ``wait`` seconds, only when the producer was started
on this same tick; otherwise (a producer on a longer interval, disabled, absent, or still busy
with an earlier run) it gets the last value at once.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from gpuagent.gpus.nvml_read import current_tick

_TICKS_KEPT = 4  # a reader started on a tick asks about that tick only


class Shared:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: dict[str, tuple[Any, Any]] = {}  # name -> (tick, value)
        self._started: deque[tuple[Any, frozenset[str]]] = deque(maxlen=_TICKS_KEPT)

    def starting(self, tick: Any, names: set[str]) -> None:
        """The scheduler: these collectors start on ``tick`` (before their threads run)."""
        with self._cond:
            self._started.append((tick, frozenset(names)))

    def publish(self, name: str, value: Any) -> None:
        with self._cond:
            self._items[name] = (current_tick.get(), value)
            self._cond.notify_all()

    def latest(self, name: str, wait: float = 0.0) -> Any:
        """The value last published under ``name`` (None: never), waiting up to ``wait`` s
        for this tick's when collector ``name`` was started on this tick."""
        tick = current_tick.get()
        with self._cond:
            running = tick is not None and any(t == tick and name in n for t, n in self._started)
            if wait > 0 and running:
                self._cond.wait_for(lambda: name in self._items and self._items[name][0] == tick, timeout=wait)
            item = self._items.get(name)
        return item[1] if item is not None else None
