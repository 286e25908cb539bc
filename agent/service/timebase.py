"""The clock for windows and refresh intervals inside collectors."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def monotonic_clock() -> Callable[[], float]:
    """Seconds: the simulator's clock when one is installed (so tests move time without
    sleeping), else time.monotonic."""
    sim = sys.modules.get("gpuagent.sim")  # never imported: not simulated (and not worth importing)
    machine = sim.installed() if sim is not None else None
    return machine.now if machine is not None else time.monotonic
