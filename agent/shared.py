"""What one collector hands the others each cycle: the processes collector's process list for
the work collector, so that NVML is asked once. One path for built-in and third-party
collectors: ``self.context.shared.publish(name, value)`` and ``.latest(name, wait)``.

Collectors run in their own threads, started together on a scheduler tick; a reader that
wants this tick's value (not the last one) waits for it, at most ``wait`` seconds, and only
for a name some collector said it publishes (``will_publish``): a disabled or absent
producer costs the reader no wait.
"""

from __future__ import annotations

import threading
from typing import Any

from gpuagent.nvml_read import current_tick


class Shared:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._items: dict[str, tuple[Any, Any]] = {}  # name -> (tick, value)
        self._producers: set[str] = set()

    def will_publish(self, name: str) -> None:
        with self._cond:
            self._producers.add(name)

    def publish(self, name: str, value: Any) -> None:
        with self._cond:
            self._items[name] = (current_tick.get(), value)
            self._cond.notify_all()

    def latest(self, name: str, wait: float = 0.0) -> Any:
        """The value last published under ``name`` (None: never), waiting up to ``wait`` s
        for this tick's when a producer of it is enabled."""
        tick = current_tick.get()
        with self._cond:
            if wait > 0 and name in self._producers and tick is not None:
                self._cond.wait_for(
                    lambda: name in self._items and self._items[name][0] == tick, timeout=wait
                )
            item = self._items.get(name)
        return item[1] if item is not None else None
