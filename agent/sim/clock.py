"""Time sources for the simulator: the real monotonic clock, or a manual one tests advance."""

from __future__ import annotations

import threading
import time


class MonotonicClock:
    """Real time (time.monotonic); what `--simulate` uses.

    Time advances in ticks of ``resolution`` seconds (NVML's own readings
    refresh on a similar period), so the readings of one collection cycle come
    from one evaluation of the load model per GPU.
    """

    manual = False

    def __init__(self, resolution: float = 0.02):
        self.resolution = resolution

    def now(self) -> float:
        r = self.resolution
        t = time.monotonic()
        return (t // r) * r if r > 0 else t

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """A clock that moves only when told to: deterministic tests.

    ``advance(s)`` moves it forward; ``sleep`` does not block (a simulated wait
    on a manual clock returns at once, as if the wait timed out).
    """

    manual = True

    def __init__(self, start: float = 0.0):
        self._t = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        with self._lock:
            self._t += float(seconds)
            return self._t

    def set(self, t: float) -> None:
        if t < self._t:
            raise ValueError("a clock cannot go backwards")
        self._t = float(t)

    def sleep(self, seconds: float) -> None:  # never blocks
        return None

    def __repr__(self) -> str:
        return f"<ManualClock t={self._t:.3f}s>"
