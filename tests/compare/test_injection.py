"""Statements smuggled into queries (issue 46): no --where value or database name drops a database
on a real influxd 1.6. Each case below dropped `victim` before: compare sent the --where to the
server before it refused the ';', top --fleet had no check, rollups init put the name in unescaped."""

from __future__ import annotations

import uuid

import pytest

from conftest import run_cli
from gpuagent.compare.query import quote_ident

pytestmark = pytest.mark.servers


def databases(server) -> set[str]:
    return {v[0] for s in server.query("SHOW DATABASES") for v in s.get("values") or []}


@pytest.fixture
def victim(influxdb_v1):
    name = f"victim_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(name)
    yield name
    assert name in databases(influxdb_v1), "the victim database was dropped"
    influxdb_v1.drop_database(name)


def one_error_line(proc) -> str:
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuagent: error: --where "), proc.stderr
    return lines[0]


def test_compare_refuses_a_second_statement_before_sending_it(influxdb_v1, victim):
    cond = f"host = 'x'; DROP DATABASE \"{victim}\"; SELECT * FROM m WHERE host = 'x'"
    proc = run_cli("compare", "--url", influxdb_v1.url, "--database", "gpuagent", "--since", "1h", "--where", cond)
    assert "';' (it ends a statement) at character 11" in one_error_line(proc)
    assert victim in databases(influxdb_v1)


def test_compare_over_promql_refuses_before_anything_is_sent():
    from gpuagent_test_servers import free_port

    dead = f"http://127.0.0.1:{free_port()}"  # a refusal told by the server would read "cannot reach"
    proc = run_cli("compare", "--promql-url", dead, "--since", "1h", "--where", 'host="a"} or vector(1)')
    assert "'}' outside a string" in one_error_line(proc)


def test_top_fleet_refuses_a_filter_that_closes_its_parenthesis(influxdb_v1, victim):
    cond = f'host = \'x\'); DROP DATABASE "{victim}"; SELECT "power_w" FROM "gpu_power" WHERE (host = \'x\''
    proc = run_cli("top", "--fleet", "--once", "--url", influxdb_v1.url, "--database", "gpuagent", "--where", cond)
    assert "a ')' that closes no '('" in one_error_line(proc)


def test_rollups_init_escapes_the_database_name(influxdb_v1, victim):
    name = f'x{victim}" DURATION 1h REPLICATION 1; DROP DATABASE "{victim}"; CREATE RETENTION POLICY "y" ON "x'
    influxdb_v1._query_raw(f"CREATE DATABASE {quote_ident(name)}", None, "POST")
    try:
        proc = run_cli("rollups", "init", "--url", influxdb_v1.url, "--database", name)
        assert proc.returncode == 0, proc.stderr
        policies = {v[0] for s in influxdb_v1.query("SHOW RETENTION POLICIES", name) for v in s["values"]}
        assert {"gpuagent_1m", "gpuagent_1h"} <= policies, policies  # made in the database named
        assert victim in databases(influxdb_v1)
    finally:
        influxdb_v1._query_raw(f"DROP DATABASE {quote_ident(name)}", None, "POST")
