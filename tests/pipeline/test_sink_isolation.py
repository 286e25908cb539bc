"""gpuagent.pipeline.sink_isolation: a sink whose write may block is called from a worker of its own."""

import threading
import time

import pytest

import gpuagent
from gpuagent.context import AgentContext
from gpuagent.pipeline import sink_isolation
from gpuagent.pipeline.metric import Point
from gpuagent.pipeline.sink_isolation import IsolatedSink
from gpuagent.service.scheduler import Scheduler


class Gate(gpuagent.Sink):
    """write() waits at the gate; what got through is kept."""

    name = "gate"

    def __init__(self):
        super().__init__(gpuagent.SinkConfig(), None)
        self.open = threading.Event()
        self.entered = threading.Event()
        self.written: list[Point] = []
        self.closed = False

    def write(self, points):
        self.entered.set()
        self.open.wait(30)
        self.written.extend(points)

    def close(self):
        self.closed = True

    def stats(self):
        return {"points_written_total": len(self.written)}


def batch(n, tag="x"):
    return [Point("m", {"t": tag}, {"v": i}, i) for i in range(n)]


def test_writes_reach_the_sink_in_order_once_it_answers():
    gate = Gate()
    sink = IsolatedSink(gate, on_error=lambda *a: None)
    for tag in "abc":
        sink.write(batch(3, tag))  # returns at once, the gate still shut
    assert gate.entered.wait(10) and gate.written == []
    gate.open.set()
    assert sink.drain(10)
    assert [p.tags["t"] for p in gate.written] == list("aaabbbccc")
    sink.close()
    assert gate.closed


def test_a_stuck_sink_loses_its_oldest_points_counted_and_says_it_is_stalled(monkeypatch, caplog):
    monkeypatch.setattr(sink_isolation, "STALLED_AFTER_S", 0.0)
    gate = Gate()
    sink = IsolatedSink(gate, on_error=lambda *a: None, max_points=10)
    sink.write(batch(4, "held"))  # taken by the worker, which waits at the gate
    assert gate.entered.wait(10)
    for tag in "abcd":
        sink.write(batch(4, tag))  # 20 held, the write under way included, > 10: a, b, c go, oldest first
    assert sink.stats() == {"points_written_total": 0, "stalled_dropped_total": 12}
    assert sink.describe().startswith("stalled (a write has not returned for")
    assert "not keeping up" in caplog.text
    gate.open.set()
    assert sink.drain(10)
    assert [p.tags["t"] for p in gate.written] == ["held"] * 4 + ["d"] * 4
    sink.close()


def test_stop_with_a_write_that_never_returns_is_bounded_and_counts_what_is_left(caplog):
    gate = Gate()
    sink = IsolatedSink(gate, on_error=lambda *a: None)
    sink.write(batch(2))
    assert gate.entered.wait(10)
    sink.write(batch(5))
    started = time.monotonic()
    sink.flush(0.3)
    sink.close()
    assert time.monotonic() - started < 5
    assert gate.closed and sink.stats()["stalled_dropped_total"] == 5
    assert "a write has not returned within 0.3s" in caplog.text
    gate.open.set()


def test_a_write_that_raises_is_counted_by_the_scheduler_as_before():
    class Broken(gpuagent.Sink):
        name = "broken"

        def write(self, points):
            raise OSError("disk gone")

    class Healthy(gpuagent.Collector):
        name = "healthy"

        def collect(self, acc):
            acc.add_fields("healthy", {"v": 1})

    ctx = AgentContext(hostname="h")
    sched = Scheduler(ctx, [(Healthy(gpuagent.CollectorConfig(), ctx), 1, 1)], [Broken(gpuagent.SinkConfig(), ctx)], 1)
    sched.run_once()
    own = [p for p in sched.run_once() if p.tags.get("sink") == "broken"]
    assert own[0].fields["sink_errors_total"] >= 2  # both runs' collector points, at least
    sched.close(1)


@pytest.mark.parametrize("name", ["influxdb", "prometheus"])
def test_sinks_that_only_buffer_are_called_directly(name):
    from gpuagent.plugin_host import PluginHost

    assert PluginHost(load_entry_points=False).load().sinks[name].nonblocking
    assert not PluginHost(load_entry_points=False).load().sinks["file"].nonblocking
