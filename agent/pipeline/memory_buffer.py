"""Lines a sink holds in memory, not in the spool: bounded, oldest dropped first and counted."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


class MemoryBuffer:
    """Lines waiting in memory (write_ahead off, or the spool cannot be written) and the batch taken
    from them that is being sent. At most `max_points` lines wait: more drops the oldest, counted in
    `dropped_total` and logged through `every_minute` (a note(key, count, message)), for sink `name`.
    Not locked: its owner's lock guards every call."""

    def __init__(self, max_points: int, name: str, every_minute):
        self.max_points = max_points
        self.name = name
        self.every_minute = every_minute
        self.dropped_total = 0
        self.inflight: list[str] | None = None  # the batch being sent
        self._lines: deque[str] = deque()
        self._inflight_spooled = False  # a copy of the in-flight batch went to the spool already

    def __len__(self) -> int:
        return len(self._lines)

    @property
    def pending(self) -> int:
        """Lines not delivered yet, the in-flight batch included."""
        return len(self._lines) + (len(self.inflight) if self.inflight else 0)

    def add(self, lines: Iterable[str]) -> int:
        """Append the newest lines; return how many of the oldest were dropped to make room."""
        self._lines.extend(lines)
        return self._trim()

    def requeue(self, lines: list[str]) -> int:
        """Put lines that could not go elsewhere back in front, in their order; return how many were dropped
        (the oldest, which may be these)."""
        self._lines.extendleft(reversed(lines))
        return self._trim()

    def take(self, count: int) -> list[str]:
        """The oldest `count` lines, as the in-flight batch until sent() is called."""
        batch = [self._lines.popleft() for _ in range(min(count, len(self._lines)))]
        self.inflight, self._inflight_spooled = batch, False
        return batch

    def sent(self) -> bool:
        """The in-flight batch is done with; True when take_for_spool() had already kept a copy."""
        spooled, self.inflight = self._inflight_spooled, None
        return spooled

    def take_all(self) -> list[str]:
        """Every waiting line, oldest first (not the in-flight batch)."""
        lines = list(self._lines)
        self._lines.clear()
        return lines

    def take_for_spool(self) -> list[str]:
        """Every waiting line and, once, a copy of the in-flight batch ahead of them: at stop the request
        may still be waiting on the server. If it lands after all, the duplicate is harmless (same series
        and time)."""
        lines = self.take_all()
        if self.inflight is not None and not self._inflight_spooled:
            lines = self.inflight + lines
            self._inflight_spooled = True
        return lines

    def drop_all(self) -> int:
        """Drop every waiting line (nowhere left to keep them); return how many, counted as dropped."""
        lost = len(self._lines)
        self._lines.clear()
        self.dropped_total += lost
        return lost

    def _trim(self) -> int:
        over = len(self._lines) - self.max_points
        for _ in range(over):
            self._lines.popleft()
        if over <= 0:
            return 0
        self.dropped_total += over
        self.every_minute.note(
            "memory-full",
            over,
            f"{self.name}: memory buffer is full ({self.max_points} points) and the spool cannot take more: "
            "dropped the oldest points",
        )
        return over
