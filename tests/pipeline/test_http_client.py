"""gpuagent.pipeline.http_client and its clients in agent/: a deadline on the request as a whole.

Against a server that drips a valid answer one byte at a time, a per-read timeout never fires
(urllib3's and http.client's timeouts are per read): the answer arrives in full, however long
it takes. With the whole-request deadline the client hangs up first, and says so in one line.
"""

from __future__ import annotations

import pytest

from gpuagent.compare.promql import PromConnection, PromQL
from gpuagent.compare.query import Connection, InfluxQL
from gpuagent.errors import AgentError
from gpuagent.pipeline import http_client


def test_a_dripping_answer_is_cut_at_the_deadline(dripping_server):
    with pytest.raises(http_client.RequestFailed) as failed:
        http_client.request("GET", dripping_server.url + "/", timeout=1.0)
    assert failed.value.reason == "no complete answer within 1s"
    assert failed.value.timed_out and failed.value.connected
    assert dripping_server.wait_cut() and dripping_server.finished == 0


def test_an_answer_is_read_up_to_the_limit_and_says_it_was_cut(dripping_server):
    dripping_server.pace = 0.0
    answer = http_client.request("GET", dripping_server.url + "/", timeout=5.0, limit=10)
    assert answer.status == 200 and len(answer.body) == 10 and not answer.complete
    whole = http_client.request("GET", dripping_server.url + "/", timeout=5.0)
    assert whole.complete and whole.body.startswith(b'{"status"')


@pytest.fixture
def closing_server():
    """Headers at once with `Connection: close`, then the body one byte at a time (tests/servers.py)."""
    from gpuagent_test_servers import DrippingServer

    server = DrippingServer(close=True)
    yield server
    server.close()


def test_a_dripping_body_after_connection_close_is_cut_at_the_deadline(closing_server):
    # http.client drops conn.sock on `Connection: close`: the deadline must shut the socket itself.
    with pytest.raises(http_client.RequestFailed) as failed:
        http_client.request("GET", closing_server.url + "/", timeout=1.0)
    assert failed.value.reason == "no complete answer within 1s"
    assert failed.value.timed_out and failed.value.answered
    assert closing_server.wait_cut() and closing_server.finished == 0


def test_abort_cuts_a_connection_close_answer_too(closing_server):
    import threading

    conn = http_client.connection(closing_server.url, 30.0)
    errors = []

    def call():
        try:
            http_client.exchange(conn, "GET", "/", timeout=30.0)
        except http_client.RequestFailed as exc:
            errors.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    while not closing_server.wait_cut(0.3) and worker.is_alive():
        http_client.shutdown(conn)  # what the influxdb sink's abort() does at stop
    worker.join(10)
    assert not worker.is_alive() and errors and closing_server.finished == 0


@pytest.mark.parametrize("language", ["influxql", "promql"])
def test_compare_gives_up_on_a_connection_close_drip_in_one_line(closing_server, language):
    from conftest import run_cli

    url = (
        ["--promql-url", closing_server.url]
        if language == "promql"
        else ["--url", closing_server.url, "--database", "d"]
    )
    proc = run_cli("compare", "--since", "1h", "--timeout", "1s", *url, timeout=30)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "did not answer within 1s" in lines[0], proc.stderr
    assert closing_server.wait_cut() and closing_server.finished == 0


def test_a_refused_connection_is_one_short_reason():
    from gpuagent_test_servers import free_port

    with pytest.raises(http_client.RequestFailed) as failed:
        http_client.request("GET", f"http://127.0.0.1:{free_port()}/", timeout=1.0)
    assert failed.value.reason == "connection refused" and not failed.value.connected


def test_compare_influxql_gives_up_on_a_dripping_server_at_its_timeout(dripping_server):
    client = InfluxQL(Connection(url=dripping_server.url, database="gpuagent", timeout=1.0))
    with pytest.raises(AgentError) as failed:
        client.query("SHOW MEASUREMENTS")
    assert str(failed.value).startswith(f"InfluxDB at {dripping_server.url} did not answer within 1s (")
    assert dripping_server.wait_cut() and dripping_server.finished == 0


def test_compare_promql_gives_up_on_a_dripping_server_at_its_timeout(dripping_server):
    client = PromQL(PromConnection(url=dripping_server.url, timeout=1.0))
    with pytest.raises(AgentError) as failed:
        client.query("up", 0.0, "the test query")
    assert str(failed.value).startswith(
        f"the PromQL server at {dripping_server.url} did not answer within 1s (the test query; "
    )
    assert dripping_server.wait_cut() and dripping_server.finished == 0


@pytest.mark.slow
def test_no_module_but_http_client_opens_http_connections():
    # One HTTP layer: a client of its own (urllib, urllib3, a bare HTTPConnection) would bring
    # back a per-read timeout. Read from the source of the product (agent/, plugins/ less tests).
    import ast
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    opening = {"HTTPConnection", "HTTPSConnection", "urlopen", "PoolManager", "create_connection"}
    found = []
    for path in [*repo.glob("agent/**/*.py"), *repo.glob("plugins/**/*.py")]:
        rel = path.relative_to(repo)
        if "tests" in rel.parts or rel.as_posix() == "agent/pipeline/http_client.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            called = isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
            if called in opening:
                found.append(f"{rel}:{node.lineno} {called}()")
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found += [
                    f"{rel}:{node.lineno} import {n}"
                    for n in names
                    if n.split(".")[0] in ("urllib3", "requests", "httpx") or n == "urllib.request"
                ]
    assert not found, found
