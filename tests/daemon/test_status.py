"""The STATUS= line: what `systemctl status gpuagent` shows a person."""

from __future__ import annotations

from gpuagent.context import AgentContext
from gpuagent.errors import ConfigError
from gpuagent.service.daemon import one_line, status_line
from gpuagent.service.runtime import Agent
from gpuagent.service.scheduler import Scheduler
from gpuagent.sink import Sink, SinkConfig


class Spooling(Sink):
    name = "influxdb"

    def write(self, points):
        pass

    def describe(self):
        return "spooling 120 points (server unreachable)"

    def stats(self):
        return {"points_written_total": 10, "spool_points": 120, "spool_bytes": 4096}


class Broken(Sink):
    name = "odd"

    def write(self, points):
        pass

    def describe(self):
        raise RuntimeError("boom")


def agent_with(*sinks) -> Agent:
    context = AgentContext(hostname="node1")
    sched = Scheduler(context, [], list(sinks), 10.0)
    return Agent(None, None, context, [], list(sinks), sched)


def test_status_names_gpus_collectors_sinks_and_spool():
    context = AgentContext(hostname="node1")
    line = status_line(agent_with(Spooling(SinkConfig(), context), Broken(SinkConfig(), context)))
    assert line == (
        "0 GPUs; 0 collectors, 0 points; "
        "sinks: influxdb spooling 120 points (server unreachable), odd unknown (RuntimeError); "
        "spool 120 points, 4096 bytes"
    )


def test_status_without_a_spooling_sink_says_nothing_of_a_spool():
    context = AgentContext(hostname="node1")
    assert status_line(agent_with(Broken(SinkConfig(), context))).endswith("sinks: odd unknown (RuntimeError)")


def test_one_line_reasons():
    assert (
        one_line(ConfigError("gpuagent.toml: agent.interval:\n  expected a duration"))
        == "gpuagent.toml: agent.interval: expected a duration"
    )
    assert one_line(KeyError("x")) == "KeyError: 'x'"
