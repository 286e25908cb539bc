"""Isolation: a collector that raises or hangs never stops the others."""

import threading
import time

import pytest

import gpuagent
from gpuagent.context import AgentContext
from gpuagent.service.scheduler import Scheduler


class Recorder(gpuagent.Sink):
    name = "recorder"

    def __init__(self):
        super().__init__(gpuagent.SinkConfig(), None)
        self.points = []
        self.lock = threading.Lock()

    def write(self, points):
        with self.lock:
            self.points.extend(points)

    def of(self, measurement, **tags):
        with self.lock:
            return [
                p
                for p in self.points
                if p.measurement == measurement and all(p.tags.get(k) == v for k, v in tags.items())
            ]


class Healthy(gpuagent.Collector):
    name = "healthy"

    def collect(self, acc):
        acc.add_fields("healthy", {"value": 1})


class Raising(gpuagent.Collector):
    name = "raising"

    def collect(self, acc):
        acc.add_fields("raising", {"value": 1})
        raise RuntimeError("sensor on fire")


class Hanging(gpuagent.Collector):
    name = "hanging"

    def __init__(self, config, context):
        super().__init__(config, context)
        self.release = threading.Event()
        self.finished = threading.Event()

    def collect(self, acc):
        acc.add_fields("hanging", {"value": 1})
        self.release.wait(60)
        self.finished.set()


def make(interval=0.1, timeout=0.3, agent_interval=0.2):
    ctx = AgentContext(hostname="test-host")
    cfg = gpuagent.CollectorConfig()
    healthy, raising, hanging = Healthy(cfg, ctx), Raising(cfg, ctx), Hanging(cfg, ctx)
    sink = Recorder()
    sched = Scheduler(
        ctx,
        [(healthy, interval, timeout), (raising, interval, timeout), (hanging, interval, timeout)],
        [sink],
        agent_interval=agent_interval,
    )
    return sched, sink, hanging


def stats(sched, name):
    return next(r.stats for r in sched.runners if r.name == name)


def test_run_once_isolates_raising_and_hanging():
    sched, sink, hanging = make(timeout=0.3)
    points = sched.run_once()
    # No clock: run_once came back while the hung collector was still hung.
    still_hung = not hanging.finished.is_set()
    hanging.release.set()
    assert still_hung, "run_once waited for the hung collector to finish"
    assert len(sink.of("healthy")) == 1
    assert sink.of("healthy")[0].tags == {"host": "test-host"}
    # A run that raised is counted as an error; what it gathered before raising is kept.
    assert stats(sched, "raising").errors_total == 1
    assert len(sink.of("raising")) == 1
    assert "sensor on fire" in stats(sched, "raising").last_error
    assert stats(sched, "hanging").timeouts_total == 1
    assert sink.of("hanging") == []
    own = {p.tags.get("collector"): p.fields for p in points if p.measurement == "gpuagent"}
    assert own["raising"]["errors_total"] == 1
    assert own["hanging"]["timeouts_total"] == 1
    assert own["healthy"]["errors_total"] == 0 and own["healthy"]["runs_total"] == 1


@pytest.mark.slow
def test_run_forever_keeps_healthy_collector_on_schedule():
    # Judged by order, not by the host's speed: ten healthy runs happen while the hung
    # collector's one run is still hung. The deadline only turns a hang into a failure.
    sched, sink, hanging = make(interval=0.1, timeout=0.25, agent_interval=0.2)
    stop = threading.Event()
    thread = threading.Thread(target=sched.run_forever, args=(stop,))
    thread.start()
    deadline = time.monotonic() + 60
    while stats(sched, "healthy").runs_total < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    still_hung = not hanging.finished.is_set()
    stop.set()
    thread.join(30)
    hanging.release.set()
    assert not thread.is_alive()
    assert still_hung, "the healthy collector waited for the hung one"
    healthy_runs = stats(sched, "healthy").runs_total
    assert healthy_runs >= 10, healthy_runs
    assert len(sink.of("healthy")) == healthy_runs
    raising = stats(sched, "raising")
    assert raising.errors_total == raising.runs_total >= 5
    hang = stats(sched, "hanging")
    assert hang.timeouts_total == 1  # one run, hung the whole time
    assert hang.skipped_total >= 5  # later runs skipped, not piled up
    own = sink.of("gpuagent", collector="hanging")
    assert own and own[-1].fields["timeouts_total"] == 1 and own[-1].fields["skipped_total"] >= 1


def test_late_result_is_discarded_and_counted():
    sched, sink, hanging = make(timeout=0.2)
    sched.run_once()
    hanging.release.set()
    deadline = time.monotonic() + 30  # a hang detector, not a timing goal
    runner = next(r for r in sched.runners if r.name == "hanging")
    while runner.stats.late_points_discarded_total == 0 and time.monotonic() < deadline:
        try:
            sched._handle(sched.results.get(timeout=0.1))
        except Exception:
            pass
    assert runner.stats.late_points_discarded_total == 1
    assert sink.of("hanging") == []


def test_first_collection_callback_fires_once_all_ran():
    sched, sink, hanging = make(timeout=0.2)
    fired = []
    sched.on_first_collection = lambda: fired.append(time.monotonic())
    stop = threading.Event()
    thread = threading.Thread(target=sched.run_forever, args=(stop,))
    thread.start()
    assert sched.first_collection_done.wait(30)
    stop.set()
    thread.join(5)
    hanging.release.set()
    assert len(fired) == 1
    assert sink.of("healthy")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_counted_in_own_measurement(bad):
    class Weird(gpuagent.Collector):
        name = "weird"

        def collect(self, acc):
            acc.add_fields("weird", {"x": bad, "y": 1.0})

    ctx = AgentContext(hostname="h")
    sink = Recorder()
    sched = Scheduler(ctx, [(Weird(gpuagent.CollectorConfig(), ctx), 1, 1)], [sink], 1)
    points = sched.run_once()
    own = next(p for p in points if p.tags.get("collector") == "weird")
    assert own.fields["nonfinite_dropped_total"] == 1
    assert sink.of("weird")[0].fields == {"y": 1.0}


def test_out_of_range_integers_counted_in_own_measurement():
    class Wide(gpuagent.Collector):
        name = "wide"

        def collect(self, acc):
            acc.add_fields("wide", {"x": 2**64 - 1, "y": 1})

    ctx = AgentContext(hostname="h")
    sink = Recorder()
    sched = Scheduler(ctx, [(Wide(gpuagent.CollectorConfig(), ctx), 1, 1)], [sink], 1)
    sched.run_once()
    own = next(p for p in sched.run_once() if p.tags.get("collector") == "wide")
    assert (own.fields["out_of_range_dropped_total"], own.fields["nonfinite_dropped_total"]) == (2, 0)
    assert [p.fields for p in sink.of("wide")] == [{"y": 1}, {"y": 1}]


class BadNames(gpuagent.Collector):
    name = "badnames"

    def collect(self, acc):
        acc.add_fields("fine", {"value": 1}, tags={"where": "ends-in-a-backslash-7f3\\"})
        acc.add_fields("#not-a-measurement-7f3", {"value": 1})


class Lines(Recorder):
    """Serialises what it gets, as the file and InfluxDB sinks do."""

    def write(self, points):
        super().write(points)
        gpuagent.pipeline.metric.to_lines(points)


def test_refused_names_and_unwritable_points_are_counted_in_the_agents_own_point():
    ctx = AgentContext(hostname="test-host")
    sink = Lines()
    sched = Scheduler(ctx, [(BadNames(gpuagent.CollectorConfig(), ctx), 10, 5)], [sink], agent_interval=10)
    first = sched.run_once()[-1].fields
    second = sched.run_once()[-1].fields
    third = sched.run_once()[-1].fields
    # The tag and the measurement are each one name, refused once however often they come.
    assert second["names_refused_total"] == first["names_refused_total"] == third["names_refused_total"]
    # Every point that could not be written is counted, run after run.
    assert third["points_unwritable_total"] - second["points_unwritable_total"] == 1
    assert second["points_unwritable_total"] - first["points_unwritable_total"] == 1
    lines = gpuagent.pipeline.metric.to_lines(sink.of("fine"))
    assert lines.count("fine,host=test-host value=1i ") == 3  # the tag is dropped, the point kept


def test_a_new_refused_name_moves_the_count():
    from gpuagent.pipeline import metric, names

    before = names.refused_total
    metric.Point("m", {"t": f"new-{time.monotonic_ns()}\\"}, {"v": 1}, 1).to_line()
    assert names.refused_total == before + 1


def test_collectors_started_on_one_tick_stamp_their_points_with_one_time():
    """A work sample and the GPU's energy sample of one tick carry one timestamp, so compare's energy
    window from the work's first to last sample holds the energy samples at both edges."""
    sched, sink, hanging = make(timeout=0.3)
    try:
        before = time.time_ns()
        sched.run_once()
        sched.run_once()
    finally:
        hanging.release.set()
    healthy, raising = sink.of("healthy"), sink.of("raising")
    assert len(healthy) == len(raising) == 2
    assert [p.time_ns for p in healthy] == [p.time_ns for p in raising]
    assert before <= healthy[0].time_ns < healthy[1].time_ns
