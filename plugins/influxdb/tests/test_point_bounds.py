"""The bounds on one point (issue 28, item 10), against real servers.

A plugin's point with a million fields was one 15.8 MB line at the head of the
queue, retried whole; a 300 KB string makes a line VictoriaMetrics refuses
(-influx.maxLineSize, 256 KiB by default). A point keeps its first 1,000 fields
and a line over 256 KiB its shorter fields: counted, warned once.
"""

from __future__ import annotations

import logging
import time

import pytest

from gpuagent import Accumulator
from gpuagent.context import AgentContext
from gpuagent.pipeline import metric
from gpuagent.plugins.influxdb import InfluxDBSink

pytestmark = pytest.mark.servers


def make_sink(tmp_path, **options) -> InfluxDBSink:
    options = {
        "flush_interval": "100ms",
        "flush_jitter": 0,
        "retry_initial_backoff": "100ms",
        "retry_max_backoff": "300ms",
        "timeout": "5s",
        **options,
    }
    sink = InfluxDBSink(
        InfluxDBSink.Config.model_validate(options), AgentContext(hostname="node-1", state_dir=tmp_path / "state")
    )
    sink.start()
    return sink


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_point_with_a_million_fields_keeps_its_first_thousand_and_delivery_flows(tmp_path, influxdb_v1, caplog):
    db = "bounds_wide"
    influxdb_v1.create_database(db)
    before = metric.fields_over_bound_total
    acc = Accumulator({"host": "node-1"}, time_ns=10**18)
    with caplog.at_level(logging.WARNING, logger="gpuagent.pipeline.names"):
        acc.add_fields("wide", {f"f{i}": i for i in range(1_000_000)}, tags={"gpu": "0"})
        for seq in range(50):
            acc.add_fields("narrow", {"seq": seq}, tags={"gpu": "0"}, time_ns=10**18 + seq)
        assert len(acc.points[0].fields) == metric.MAX_FIELDS_PER_POINT
        acc.points[0].to_line()
    assert metric.fields_over_bound_total - before == 1_000_000 - metric.MAX_FIELDS_PER_POINT
    assert sum("'wide' has 1000000 fields" in r.getMessage() for r in caplog.records) == 1
    sink = make_sink(tmp_path, api="v1", url=influxdb_v1.url, database=db)
    try:
        sink.write(acc.points)
        wait_for(lambda: influxdb_v1.query("SELECT count(seq) FROM narrow", db), what="the narrow points")
    finally:
        sink.close()
    (keys,) = influxdb_v1.query('SHOW FIELD KEYS FROM "wide"', db)
    assert {k for k, _ in keys["values"]} == {f"f{i}" for i in range(metric.MAX_FIELDS_PER_POINT)}
    (count,) = influxdb_v1.query("SELECT count(seq) FROM narrow", db)
    assert count["values"][0][1] == 50


def test_a_line_over_256_kib_loses_its_longest_field_not_the_point(tmp_path, victoria_metrics, caplog):
    before = metric.fields_over_bound_total
    host = f"bounds-{time.time_ns()}"
    now = time.time_ns() // 10**9 * 10**9
    acc = Accumulator({"host": host}, time_ns=now)
    acc.add_fields("long", {"blob": "x" * 300_000, "size": 7}, tags={"gpu": "0"})
    acc.add_fields("short", {"seq": 1}, tags={"gpu": "0"})
    with caplog.at_level(logging.WARNING, logger="gpuagent.pipeline.names"):
        line = acc.points[0].to_line()
    assert len(line.encode()) <= metric.MAX_LINE_BYTES and "blob" not in line and "size=7i" in line
    assert metric.fields_over_bound_total - before == 1
    assert any("longer than 262144 bytes" in r.getMessage() for r in caplog.records)
    sink = make_sink(tmp_path, api="v2", url=victoria_metrics.url, bucket="b", org="o")
    try:
        sink.write(acc.points)
        wait_for(lambda: sink.stats()["points_written_total"] >= 2, what="the write")
    finally:
        sink.close()
    names = {s["metric"]["__name__"] for s in victoria_metrics.export(f'{{host="{host}"}}', min_samples=2)}
    assert names == {"long_size", "short_seq"}


WIDE_PLUGIN = """
import gpuagent

FIELDS = {f"f{i}": i for i in range(1_000_000)}  # built once: the agent's cost is what is measured


class Wide(gpuagent.Collector):
    name = "wide_tp"

    def collect(self, acc):
        acc.add_fields("wide", FIELDS)


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(Wide)
"""


@pytest.mark.slow
def test_a_plugin_emitting_a_million_fields_a_cycle_does_not_wedge_a_real_agent(tmp_path, influxdb_v1):
    import signal
    import subprocess
    import sys

    db = "bounds_agent"
    influxdb_v1.create_database(db)
    plugins = tmp_path / "plugins.d"
    plugins.mkdir()
    (plugins / "wide_plugin.py").write_text(WIDE_PLUGIN)
    config = tmp_path / "gpuagent.toml"
    config.write_text(
        f'[agent]\ninterval = "500ms"\nhostname = "wide-node"\nstate_dir = "{tmp_path / "state"}"\n'
        f'[plugins]\ndir = "{plugins}"\n'
        f'[sinks.influxdb]\napi = "v1"\nurl = "{influxdb_v1.url}"\ndatabase = "{db}"\nflush_interval = "200ms"\n'
    )
    log = tmp_path / "agent.log"
    with open(log, "wb") as fh:
        agent = subprocess.Popen(
            [sys.executable, "-m", "gpuagent", "run", "--config", str(config), "--simulate", "l40s:1"],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    try:

        def cycles() -> int:
            got = influxdb_v1.query("SELECT count(power_w) FROM gpu_power", db)
            return got[0]["values"][0][1] if got else 0

        wait_for(lambda: cycles() >= 10, timeout=90, what="ten cycles of gpu_power delivered")
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(60)
    assert agent.returncode == 0, log.read_text()[-3000:]
    (keys,) = influxdb_v1.query('SHOW FIELD KEYS FROM "wide"', db)
    assert len(keys["values"]) == metric.MAX_FIELDS_PER_POINT
    (own,) = influxdb_v1.query('SELECT last(fields_over_bound_total) FROM "gpuagent"', db)
    assert own["values"][0][1] >= 999_000
    assert log.read_text().count("'wide' has 1000000 fields") == 1
