"""compare against hostile input (issue 46, item 9): a range a nanosecond timestamp cannot hold is
one line before anything is sent."""

from __future__ import annotations

import pytest

from conftest import run_cli


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--since", "1000000000h"], "--since 1000000000h: the range would start before 1970-01-01T00:00:00Z"),
        (["--start", "0", "--end", "99999999999999"], "--end 99999999999999: after 2262-04-11"),
    ],
)
def test_a_range_out_of_timestamps_is_one_line(args, said):
    proc = run_cli("compare", "--url", "http://127.0.0.1:9", "--database", "d", *args)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"gpuagent: error: {said}" or proc.stderr.startswith(f"gpuagent: error: {said}")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.fixture
def hostile():
    """A server that answers every request with the body given to it (tests/servers.py)."""
    from gpuagent_test_servers import DrippingServer

    started = []

    def serve(body: bytes, status: int = 200):
        server = DrippingServer(body=body, pace=0, close=True, status=status)
        started.append(server)
        return server.url

    yield serve
    for server in started:
        server.close()


ROWS = b'{"results":[{"series":[{"name":"gpu_power","columns":["time","power_w","host"],"values":[["a","b","c"]]}]}]}'
PROM = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"host":"a"},"value":%s}]}}'


@pytest.mark.slow
@pytest.mark.parametrize(
    ("language", "body"),
    [
        ("influxql", b"[" * 100_000 + b"]" * 100_000),  # deeper than Python's stack
        ("influxql", b'{"results": "x"}'),
        ("influxql", ROWS),  # a series without the tags and fields compare asked for
        ("influxql", b'{"results":[{"series":[{"name":"gpu_power","columns":["time","x"],"values":[[1, NaN]]}]}]}'),
        ("promql", PROM % b'"x"'),
        ("promql", PROM % b'[1, "NaN"]'),
        ("promql", b'{"status":"success","data":' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ],
    ids=[
        "deep",
        "results-not-a-list",
        "rows-of-the-wrong-shape",
        "bare-NaN",
        "prom-value-str",
        "prom-NaN",
        "prom-deep",
    ],
)
def test_a_hostile_query_server_is_one_line_not_a_traceback(hostile, language, body):
    url = hostile(body)
    where = ["--promql-url", url] if language == "promql" else ["--url", url, "--database", "d"]
    proc = run_cli("compare", "--since", "1h", *where, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuagent: error: ") and url in lines[0], proc.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("language", ["influxql", "promql"])
def test_a_50_mib_error_body_is_a_short_line(hostile, language):
    from gpuagent.compare.promql import PromConnection, PromQL
    from gpuagent.compare.query import Connection, InfluxQL
    from gpuagent.errors import AgentError

    url = hostile(b'{"error": "' + b"refused " * (50 << 17) + b'"}', status=400)
    with pytest.raises(AgentError) as failed:
        if language == "promql":
            PromQL(PromConnection(url=url, timeout=30)).query("up", 0.0, "the test query")
        else:
            InfluxQL(Connection(url=url, database="d", timeout=30)).query("SHOW MEASUREMENTS")
    text = str(failed.value)
    assert "refused refused" in text and len(text) < 500 and "\n" not in text, len(text)


@pytest.mark.slow
@pytest.mark.parametrize(
    "body", [b"[" * 100_000 + b"]" * 100_000, b'{"results": [1]}'], ids=["deep", "results-of-numbers"]
)
def test_top_fleet_against_a_hostile_server_is_one_line(hostile, body):
    url = hostile(body)
    proc = run_cli("top", "--fleet", "--once", "--url", url, "--database", "d", timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuagent: error: ") and url in lines[0], proc.stderr[-2000:]
