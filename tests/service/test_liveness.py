"""What /healthz and /readyz read (gpuagent.service.liveness), fed by the scheduler's loop."""

from __future__ import annotations

import threading
import time

import pytest

import gpuagent
from gpuagent.context import AgentContext
from gpuagent.service import scheduler as scheduler_mod
from gpuagent.service.liveness import Liveness
from gpuagent.service.scheduler import Scheduler


class Once(gpuagent.Collector):
    name = "once"

    def collect(self, acc):
        acc.add_fields("once", {"v": 1})


class Gate(gpuagent.Sink):
    """A sink whose writes wait until it is opened (a disk that hangs)."""

    name = "gate"

    def __init__(self, ctx):
        super().__init__(gpuagent.SinkConfig(), ctx)
        self.open = threading.Event()

    def write(self, points):
        self.open.wait(30)


def wait(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.02)
    return predicate()


@pytest.mark.slow
def test_not_ready_while_a_sink_has_not_taken_the_first_collection(monkeypatch):
    monkeypatch.setattr(scheduler_mod, "FIRST_DRAIN_S", 0.1)  # READY's bounded wait gives up quickly
    ctx = AgentContext(hostname="h")
    gate = Gate(ctx)
    sched = Scheduler(ctx, [(Once(gpuagent.CollectorConfig(), ctx), 0.2, 1)], [gate], 10)
    stop = threading.Event()
    loop = threading.Thread(target=sched.run_forever, args=(stop,), daemon=True)
    loop.start()
    try:
        assert wait(sched.first_collection_done.is_set)
        time.sleep(0.3)
        # READY=1 went out (bounded), but the sink holds the first collection: /readyz says 503.
        assert ctx.liveness.readiness() == (False, "first collection not yet accepted by every sink\n")
        gate.open.set()
        assert wait(lambda: ctx.liveness.ready)
        assert ctx.liveness.alive() == (True, "ok\n")
    finally:
        gate.open.set()
        stop.set()
        loop.join(5)
        sched.close(1)


def test_alive_until_no_turn_for_stale_after():
    live = Liveness(stale_after=0.2)
    assert live.alive()[0]
    live.last_tick -= 0.5
    ok, text = live.alive()
    assert not ok and text.startswith("scheduler loop stuck: no turn for 0.5s (limit 0.2s)")
    live.tick()
    assert live.alive()[0]
