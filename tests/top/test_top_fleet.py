"""`gpuagent top --fleet` against a real influxd and a real VictoriaMetrics filled by `sim fleet`."""

from __future__ import annotations

import re
import time
import uuid

import pytest
from compare_helpers import openmetrics, sim_fleet_args

from gpuagent.top.app import Top
from gpuagent.top.view import View

pytestmark = pytest.mark.servers

SPECS = ("l40s:2", "h100-sxm-mig:1", "rtx4090:1")
HOSTS = 6  # sim fleet gives the specs to the hosts in turn: 2 hosts each
STEP_S = 10


def backfill(cli, url, db, end_s):
    args = sim_fleet_args(url, db, hosts=HOSTS, duration_s=120, step_s=STEP_S, end_s=end_s, seed=5, specs=SPECS)
    result = cli(*args)
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def fleet(influxdb_v1, victoria_metrics, cli):
    db = f"top_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    end_s = int(time.time()) - 5
    backfill(cli, influxdb_v1.url, db, end_s)
    backfill(cli, victoria_metrics.url, db, end_s)
    victoria_metrics.export(f'{{__name__="gpu_power_power_w",db="{db}"}}', min_samples=10)
    hosts = sorted(
        {s["tags"]["host"] for s in influxdb_v1.query('SELECT LAST("power_w") FROM "gpu_power" GROUP BY "host"', db=db)}
    )
    # One GPU of the last host turns to drain now (InfluxDB, and the Prometheus made from it).
    row = influxdb_v1.query(f'SELECT LAST("verdict") FROM "gpu_health" WHERE host = \'{hosts[-1]}\' GROUP BY *', db=db)[
        0
    ]
    tags = ",".join(f"{k}={v.replace(' ', chr(92) + ' ')}" for k, v in sorted(row["tags"].items()) if v)
    influxdb_v1.write([f'gpu_health,{tags} verdict="drain",verdict_reason="test: drain" {time.time_ns()}'], db=db)
    yield db, hosts
    influxdb_v1.drop_database(db)


def frame_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


def test_influx_lists_every_host_worst_health_first(fleet, influxdb_v1, cli):
    db, hosts = fleet
    assert len(hosts) == HOSTS
    sick = hosts[-1]  # drained by the fixture: its host leads the list
    result = cli("top", "--fleet", "--once", "--url", influxdb_v1.url, "--database", db)
    assert result.exit_code == 0, result.output
    lines = frame_lines(result.output)
    listed = [line.split()[0] for line in lines if line.split()[0] in hosts]
    assert sorted(listed) == hosts
    assert listed[0] == sick, result.output
    assert listed[0] == sick and "drain" in next(line for line in lines if line.startswith(sick))
    assert f"{HOSTS} hosts, 8 GPUs" in lines[0] and "sort health" in lines[1]


def test_influx_by_model_aggregates_the_gpus(fleet, influxdb_v1, cli):
    db, _ = fleet
    result = cli("top", "--fleet", "--once", "--by", "model", "--url", influxdb_v1.url, "--database", db)
    assert result.exit_code == 0, result.output
    rows = {line.split("  ")[0].strip(): line for line in frame_lines(result.output)[3:]}
    gpus = {"NVIDIA L40S": 4, "NVIDIA H100 80GB HBM3": 2, "NVIDIA GeForce RTX 4090": 2}
    for model, count in gpus.items():
        row = next(line for name, line in rows.items() if name.startswith(model[:18]))
        assert f" {count} " in row, row


def test_selecting_a_host_shows_its_gpus(fleet, influxdb_v1):
    from gpuagent.compare.query import Connection, InfluxQL
    from gpuagent.top.fleet import InfluxFleet

    db, hosts = fleet
    source = InfluxFleet(InfluxQL(Connection(url=influxdb_v1.url, database=db)), by="host")
    app = Top(source, View(fleet=True, sort="health"), follow_pace=True)
    try:
        app.refresh()
        first = app.frame.rows[1].label
        assert app.key("down") and app.key("enter")
        assert app.view.host == first
        assert [r.label for r in app.frame.rows] == [str(i) for i in range(len(app.frame.rows))]
        assert len(app.frame.rows) in (1, 2) and all(r.power_limit_w for r in app.frame.rows)
        app.key("esc")
        assert app.view.host is None and len(app.frame.rows) == len(hosts)
        assert not app.key("q")
    finally:
        source.close()
    assert app.view.interval == STEP_S  # the server's pace: sim fleet wrote every 10 s


def test_victoria_metrics_lists_every_host(fleet, victoria_metrics, cli):
    db, hosts = fleet
    result = cli("top", "--fleet", "--once", "--promql-url", victoria_metrics.url, "--where", f'db="{db}"')
    assert result.exit_code == 0, result.output
    lines = frame_lines(result.output)
    assert sorted(line.split()[0] for line in lines if line.split()[0] in hosts) == hosts
    rows = [line for line in lines if line.split()[0] in hosts]
    # Power against the limit and the SM clock against its max, read back from the server.
    assert all(len(re.findall(r"(?<!\S)\d+/\d+(?!\S)", line)) == 2 for line in rows), result.output
    assert "every 10s" in lines[1]  # the server's pace: sim fleet wrote every 10 s


def test_an_empty_window_says_so(fleet, influxdb_v1, cli):
    db, _ = fleet
    result = cli("top", "--fleet", "--once", "--url", influxdb_v1.url, "--database", db, "--where", "host = 'nope'")
    assert result.exit_code == 0
    assert "no GPU sample in the last 300s" in result.output


@pytest.fixture(scope="module")
def prometheus_fleet(fleet, influxdb_v1, tmp_path_factory):
    """A Prometheus whose TSDB holds the same fleet under the /metrics names (compare's converter)."""
    from gpuagent_test_servers import PROMETHEUS, PrometheusServer, find_binary

    db, _ = fleet
    server = PrometheusServer(find_binary(PROMETHEUS, "prometheus"), tmp_path_factory.mktemp("prom"))
    server.backfill(openmetrics(influxdb_v1, db, int(time.time()) + 1))
    server.start()
    yield server
    server.stop()


def test_prometheus_names_carry_the_verdict(fleet, prometheus_fleet, cli):
    _, hosts = fleet
    result = cli("top", "--fleet", "--once", "--promql-url", prometheus_fleet.url)
    assert result.exit_code == 0, result.output
    rows = [line for line in frame_lines(result.output) if line.split()[0] in hosts]
    assert sorted(line.split()[0] for line in rows) == hosts
    # The verdict's _info series (line protocol in VictoriaMetrics has none: "-" there); the drained
    # GPU has an `ok` series too, sampled before the `drain` one.
    assert rows[0].split()[0] == hosts[-1] and rows[0].split()[-1] == "drain", result.output
    assert all(line.split()[-1] == "ok" for line in rows[1:]), result.output


def test_a_server_that_stops_answering_keeps_the_last_frame(victoria_metrics_factory, cli):
    from gpuagent.compare.promql import PromConnection, PromQL
    from gpuagent.top.fleet import PromFleet

    server = victoria_metrics_factory()
    backfill(cli, server.url, "x", int(time.time()) - 5)
    server.export('{__name__="gpu_power_power_w"}', min_samples=10)
    source = PromFleet(PromQL(PromConnection(server.url, timeout=5.0)), by="host")
    app = Top(source, View(fleet=True, sort="health"))
    try:
        app.refresh()
        assert len(app.frame.rows) == HOSTS and not app.frame.note
        server.stop()
        app.refresh()
        assert len(app.frame.rows) == HOSTS and "cannot reach the PromQL server" in app.frame.note
    finally:
        source.close()


def test_a_dripping_server_is_cut_off_at_the_timeout_in_one_line(dripping_server):
    # top --fleet asks through compare's clients: a server that answers a byte at a time is cut
    # off at the connection's timeout (the whole request), in one line that says so.
    from gpuagent.compare.promql import PromConnection, PromQL
    from gpuagent.errors import AgentError
    from gpuagent.top.fleet import PromFleet

    source = PromFleet(PromQL(PromConnection(dripping_server.url, timeout=1.0)), by="host")
    app = Top(source, View(fleet=True, sort="health"))
    try:
        with pytest.raises(AgentError, match=f"the PromQL server at {dripping_server.url} did not answer within 1s"):
            app.refresh()
        assert dripping_server.wait_cut() and dripping_server.finished == 0
    finally:
        source.close()
