"""The influxdb sink under faults: slow and misbehaving servers, a full or read-only spool.

Servers that misbehave on purpose are small local HTTP servers (only they can
drip an answer or send Retry-After: 0); everything that must be stored is
checked against the real influxd 1.6 of tests/servers.py.
"""

from __future__ import annotations

import contextlib
import email.utils
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpuagent.context import AgentContext
from gpuagent.plugins.influxdb import InfluxDBSink


def _sibling(name: str):
    # --import-mode=importlib: test folders are not packages; load the helpers by path.
    import importlib.util
    import sys

    key = f"gpuagent_influxdb_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        sys.modules[key] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[key]


_helpers = _sibling("test_influxdb_sink")
assert_all_in_v1, fleet_points, make_sink, wait_for = (
    _helpers.assert_all_in_v1,
    _helpers.fleet_points,
    _helpers.make_sink,
    _helpers.wait_for,
)

pytestmark = pytest.mark.servers


class BadServer:
    """A local HTTP server that answers every request with `behaviour(conn, request_bytes)`."""

    def __init__(self, behaviour):
        self.behaviour = behaviour
        self.requests = 0
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn):
        try:
            with conn:
                while not self._stop.is_set():
                    head = b""
                    while b"\r\n\r\n" not in head:
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        head += chunk
                    length = next(
                        (
                            int(line.split(b":")[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length")
                        ),
                        0,
                    )
                    body = head.split(b"\r\n\r\n", 1)[1]
                    while len(body) < length:
                        body += conn.recv(65536)
                    self.requests += 1
                    self.behaviour(conn, self)
        except OSError:
            return

    def close(self):
        self._stop.set()
        self._sock.close()


@contextlib.contextmanager
def bad_server(behaviour):
    server = BadServer(behaviour)
    try:
        yield server
    finally:
        server.close()


def drip(conn, server):
    """A valid 204, one byte every half second: a per-read timeout never fires."""
    for byte in b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n":
        if server._stop.is_set():
            return
        conn.sendall(bytes([byte]))
        time.sleep(0.5)


@pytest.mark.parametrize("api", ["v1", "v2"])
@pytest.mark.slow
def test_a_dripping_server_is_cut_off_at_timeout_and_counted_as_a_failure(tmp_path, api):
    target = {"database": "d"} if api == "v1" else {"bucket": "b", "token": "t"}
    with bad_server(drip) as server:
        sink = make_sink(
            tmp_path,
            api=api,
            url=server.url,
            timeout="1s",
            retry_initial_backoff="5s",
            retry_max_backoff="5s",
            **target,
        )
        try:
            sink.write(fleet_points(intervals=1, gpus=1))
            wait_for(lambda: sink.stats()["write_errors_total"] >= 1, timeout=6, what="the deadline")
            assert sink.describe().startswith("spooling") and "within 1s" in sink.describe()
            assert sink.stats()["spool_points"] == 3  # kept, for the next try
        finally:
            sink.close()


def drip_after_close(conn, server):
    """Headers at once saying `Connection: close` (no length), then a body one byte every half
    second: http.client drops its own reference to the socket (issue 46)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
    for byte in b"x" * 120:
        if server._stop.is_set():
            return
        conn.sendall(bytes([byte]))
        time.sleep(0.5)
    raise OSError("done")  # the connection ends with the answer


@pytest.mark.slow
def test_a_dripping_body_after_connection_close_is_cut_at_timeout_counted_and_logged(tmp_path, caplog):
    with bad_server(drip_after_close) as server:
        sink = make_sink(tmp_path, api="v1", url=server.url, database="d", timeout="1s", retry_initial_backoff="5s")
        try:
            with caplog.at_level(logging.WARNING):
                sink.write(fleet_points(intervals=1, gpus=1))
                wait_for(lambda: sink.stats()["write_errors_total"] >= 1, timeout=8, what="the deadline")
                wait_for(lambda: "within 1s" in caplog.text, timeout=5, what="the log line")
            assert sink.stats()["points_written_total"] == 0 and sink.stats()["spool_points"] == 3
        finally:
            sink.close()


@pytest.mark.slow
def test_stop_takes_at_most_the_shutdown_budget_whatever_the_server_does(tmp_path):
    with bad_server(drip) as server:
        sink = make_sink(tmp_path, api="v1", url=server.url, database="d", timeout="30s")
        sink.write(fleet_points(intervals=1, gpus=1))
        time.sleep(0.5)  # the request is in flight, dripping
        t0 = time.monotonic()
        sink.flush(2)
        sink.close()
        took = time.monotonic() - t0
    # 2 s of budget plus the slack of thread joins; before: 14 s (no deadline, a fixed 5 s join).
    assert took < 4, took
    spool = make_sink(tmp_path, api="v1", url="http://127.0.0.1:9", database="d")
    try:
        assert spool.stats()["spool_points"] == 3  # nothing lost by stopping early
    finally:
        spool.close()


def answer_503(retry_after: str):
    def behaviour(conn, server):
        conn.sendall(
            f"HTTP/1.1 503 Service Unavailable\r\nRetry-After: {retry_after}\r\nContent-Length: 0\r\n\r\n".encode()
        )

    return behaviour


@pytest.mark.parametrize("retry_after", ["0", "past-date"])
@pytest.mark.slow
def test_retry_after_never_shortens_the_backoff(tmp_path, retry_after):
    value = email.utils.formatdate(time.time() - 3600, usegmt=True) if retry_after == "past-date" else "0"
    with bad_server(answer_503(value)) as server:
        sink = make_sink(
            tmp_path, api="v1", url=server.url, database="d", retry_initial_backoff="500ms", retry_max_backoff="1s"
        )
        try:
            sink.write(fleet_points(intervals=1, gpus=1))
            time.sleep(3)
        finally:
            sink.close()
    # Backoff 0.5 s, 1 s, 1 s ... (±20 %): about 4 requests in 3 s; before, 21 a second.
    assert 2 <= server.requests <= 6, server.requests


@pytest.mark.slow
def test_retry_after_lengthens_the_wait(tmp_path):
    with bad_server(answer_503("3")) as server:
        sink = make_sink(
            tmp_path, api="v1", url=server.url, database="d", retry_initial_backoff="100ms", retry_max_backoff="200ms"
        )
        try:
            sink.write(fleet_points(intervals=1, gpus=1))
            time.sleep(2)
        finally:
            sink.close()
    assert server.requests == 1


def test_refusals_are_logged_once_per_kind_with_a_count(tmp_path, influxdb_v1, caplog):
    influxdb_v1.create_database("refusals")
    influxdb_v1.write(f"gpu_power,gpu=0,host=node-1 power_w=1.5 {10**18}", "refusals")  # a float, same shard
    from gpuagent import Accumulator

    sink = make_sink(tmp_path, api="v1", url=influxdb_v1.url, database="refusals", batch_size=5)
    try:
        with caplog.at_level(logging.WARNING, logger="gpuagent"):
            for i in range(20):
                acc = Accumulator({"host": "node-1"}, time_ns=10**18 + i)
                acc.add_fields("gpu_power", {"power_w": 42}, tags={"gpu": str(i)})  # an int: refused
                acc.add_fields("gpu_ok", {"v": 1}, tags={"gpu": str(i)})
                sink.write(acc.points)
                sink.flush(5)
            stats = sink.stats()
    finally:
        sink.close()
    assert stats["rejected_total"] == 20 and stats["points_written_total"] == 20, stats
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert 1 <= len(refused) <= 2, refused  # the first, and the count of the rest at stop
    assert "(1; more of these are counted" in refused[0] and "(19 more since" in refused[-1]


# -- a spool that cannot be written ---------------------------------------------------------------


@contextlib.contextmanager
def mounted(path: Path, *args: str):
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small file system needs root")
    done = subprocess.run(["mount", *args, str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_full_disk_keeps_points_in_memory_and_delivers_them_when_the_server_is_back(
    tmp_path, influxdb_v1_factory, caplog
):
    server = influxdb_v1_factory()
    server.stop()
    start = (time.time_ns() // 10**9 - 3000) * 10**9
    batches = [fleet_points(intervals=1, start_ns=start + i * 10**9) for i in range(120)]
    with mounted(tmp_path / "state", "-t", "tmpfs", "-o", "size=256k", "tmpfs"):
        with caplog.at_level(logging.WARNING, logger="gpuagent"):
            sink = make_sink(
                tmp_path,
                api="v1",
                url=server.url,
                database=server.database,
                retry_initial_backoff="200ms",
                retry_max_backoff="200ms",
            )
            try:
                for batch in batches:
                    sink.write(batch)
                wait_for(lambda: sink.stats()["spool_writable"] == 0, what="the disk to fill")
                stats = sink.stats()
                # Counters follow commits: the spool cannot claim more than the disk holds.
                assert stats["spool_bytes"] < 256 * 1024
                assert stats["spool_points"] + stats["buffered_points"] == sum(len(b) for b in batches)
                server.start()
                wait_for(
                    lambda: sink.stats()["buffered_points"] == 0 and sink.stats()["spool_points"] == 0,
                    timeout=30,
                    what="delivery after the outage",
                )
                stats = sink.stats()
            finally:
                sink.close()
    assert stats["dropped_total"] == 0
    assert_all_in_v1(server, [p for b in batches for p in b])
    spool_errors = [r.getMessage() for r in caplog.records if "cannot write the spool" in r.getMessage()]
    assert len(spool_errors) == 1, spool_errors  # one per change of state, not one per batch
    assert not [r for r in caplog.records if "worker error" in r.getMessage()]


def test_a_read_only_spool_is_replayed_once_and_drops_at_stop_are_counted(tmp_path, influxdb_v1_factory, caplog):
    server = influxdb_v1_factory()
    server.stop()
    start = (time.time_ns() // 10**9 - 4000) * 10**9
    old = [fleet_points(intervals=1, start_ns=start + i * 10**9) for i in range(3)]
    state = tmp_path / "state"
    sink = make_sink(tmp_path, api="v1", url=server.url, database=server.database)
    for batch in old:
        sink.write(batch)
    wait_for(lambda: sink.stats()["spool_points"] == 72, what="spooled")
    sink.close()
    ro = tmp_path / "ro"
    with mounted(ro, "--bind", "-o", "ro", str(state)):
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True)
        server.start()
        new = [fleet_points(intervals=1, start_ns=start + (10 + i) * 10**9) for i in range(3)]
        config = InfluxDBSink.Config.model_validate(
            {
                "api": "v1",
                "url": server.url,
                "database": server.database,
                "flush_interval": "100ms",
                "flush_jitter": 0,
                "retry_initial_backoff": "100ms",
                "retry_max_backoff": "300ms",
            }
        )
        with caplog.at_level(logging.WARNING, logger="gpuagent"):
            sink = InfluxDBSink(config, AgentContext(hostname="node-1", state_dir=ro))
            sink.start()
            try:
                for batch in new:
                    sink.write(batch)
                wait_for(
                    lambda: sink.stats()["spool_points"] == 0 and sink.stats()["buffered_points"] == 0,
                    what="replay and new points",
                )
                time.sleep(1)
                written = sink.stats()["points_written_total"]
                assert written == 6 * 24, written  # replayed once, not in a loop
                # Server gone, spool read-only: what is buffered at stop is dropped and counted.
                server.stop()
                last = fleet_points(intervals=1, start_ns=start + 30 * 10**9)
                sink.write(last)
                sink.flush(1)
            finally:
                sink.close()
        assert sink.stats()["dropped_total"] == len(last)
    server.start()
    assert_all_in_v1(server, [p for b in old + new for p in b])
    assert any("neither be delivered nor spooled" in r.getMessage() for r in caplog.records)


# -- issue 28: a gateway answering 400, endless and huge answers, what the log says ----------------

NGINX_400 = (
    b"<html>\r\n<head><title>400 The plain HTTP request was sent to HTTPS port</title></head>\r\n"
    b"<body>\r\n<center><h1>400 Bad Request</h1></center>\r\n"
    b"<center>The plain HTTP request was sent to HTTPS port</center>\r\n<hr><center>nginx</center>\r\n"
    b"</body>\r\n</html>\r\n"
)
# A 400 in InfluxDB's words, the same for every request: a policy, not a line (InfluxDB quotes the line).
SAME_400 = b'{"error":"unable to parse the request: refused by the write policy"}'


def answer(status: str, body: bytes, extra: str = "", content_type: str = "text/html"):
    def behaviour(conn, server):
        conn.sendall(
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

    return behaviour


@pytest.mark.parametrize("body", [NGINX_400, SAME_400], ids=["nginx-https-port", "same-words-for-every-half"])
def test_a_gateway_answering_400_to_everything_loses_nothing_and_the_fixed_url_gets_it_all(
    tmp_path, influxdb_v1, caplog, body
):
    db = f"gw400_{len(body)}"
    influxdb_v1.create_database(db)
    start = (time.time_ns() // 10**9 - 900) * 10**9
    batches = [fleet_points(intervals=1, start_ns=start + i * 10**9) for i in range(4)]
    with (
        bad_server(answer("400 Bad Request", body, content_type="application/json")) as server,
        caplog.at_level(logging.WARNING, logger="gpuagent"),
    ):
        sink = make_sink(tmp_path, api="v1", url=server.url, database=db, batch_size=50)
        try:
            for batch in batches:
                sink.write(batch)
            wait_for(lambda: server.requests >= 6, what="retries")
            stats, state = sink.stats(), sink.describe()
        finally:
            sink.close()
    # Before: every line split out and dropped as rejected (96 of 96).
    assert stats["rejected_total"] == 0 and stats["spool_points"] == 96, stats
    assert state.startswith("spooling 96 points (HTTP 400"), state
    said = [r.getMessage() for r in caplog.records if re.search(r"write( to \S+)? refused", r.getMessage())]
    assert said and "the server refuses the request itself" in said[0], said
    words = "400 The plain HTTP request was sent to HTTPS port" if body is NGINX_400 else SAME_400.decode()
    assert words in said[0] and "\n" not in said[0]  # what the server answered, on one line
    # The url corrected (a restart or a reload: the spool follows its sink), everything arrives.
    sink = make_sink(tmp_path, api="v1", url=influxdb_v1.url, database=db)
    try:
        wait_for(lambda: sink.stats()["spool_points"] == 0, what="the kept batches to reach the fixed url")
    finally:
        sink.close()
    assert_all_in_v1(influxdb_v1, [p for b in batches for p in b], db)


def test_a_partial_write_counts_every_refused_line_of_real_length(tmp_path, influxdb_v1):
    influxdb_v1.create_database("partial_long")
    points = fleet_points(intervals=2)  # 48 lines of about 300 characters
    lines = [p.to_line() for p in points]
    bad = {i for i in range(len(lines)) if i % 3 == 0}  # 16 lines influxd cannot parse
    sent = [line + " not-a-timestamp" if i in bad else line for i, line in enumerate(lines)]
    sink = make_sink(tmp_path, api="v1", url=influxdb_v1.url, database="partial_long")
    try:
        sink.delivery.put(sent)
        sink.flush(10)
        stats = sink.stats()
    finally:
        sink.close()
    # Before: counted from the message cut to 2,000 characters (6), and written overcounted by 10.
    assert stats["rejected_total"] == len(bad), stats
    assert stats["points_written_total"] == len(lines) - len(bad), stats
    assert_all_in_v1(influxdb_v1, [p for i, p in enumerate(points) if i not in bad], "partial_long")


def _sockets() -> int:
    """Sockets open in this process (the agent's and the local server's ends)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the fd of the listing itself, gone meanwhile
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


def endless_chunks(conn, server):
    """A 200 whose chunked body never ends: a chunk every 0.1 s, forever."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    while not server._stop.is_set():
        conn.sendall(b"1\r\n \r\n")
        time.sleep(0.1)


@pytest.mark.parametrize("api", ["v1", "v2"])
@pytest.mark.slow
def test_a_chunked_answer_that_never_ends_leaks_no_thread_nor_socket(tmp_path, api):
    target = {"database": "d"} if api == "v1" else {"bucket": "b", "token": "t"}
    with bad_server(endless_chunks) as server:
        sink = make_sink(
            tmp_path,
            api=api,
            url=server.url,
            timeout="500ms",
            retry_initial_backoff="100ms",
            retry_max_backoff="100ms",
            **target,
        )
        try:
            threads, sockets = threading.active_count(), _sockets()
            sink.write(fleet_points(intervals=1, gpus=1))
            wait_for(lambda: sink.stats()["write_errors_total"] >= 8, timeout=30, what="8 cut requests")
            time.sleep(0.2)  # the last cut request's timer thread ends
            grown = threading.active_count() - threads, _sockets() - sockets
            assert "within 0.5s" in sink.describe()
        finally:
            sink.close()
    # At most the request in flight: its socket at both ends, its timer and the server's thread.
    # Before, with v2: a thread and a socket left behind per request (8 more of each here).
    assert grown[0] <= 3 and grown[1] <= 3, grown


def huge_500(conn, server):
    """A 500 that announces 1 GiB of body and sends it, 64 KiB at a time, while it is read."""
    conn.sendall(
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nContent-Length: 1073741824\r\n\r\n"
    )
    chunk = b"x" * 65536
    for _ in range(2**30 // len(chunk)):
        if server._stop.is_set():
            return
        conn.sendall(chunk)
        server.sent = getattr(server, "sent", 0) + len(chunk)


@pytest.mark.parametrize("api", ["v1", "v2"])
@pytest.mark.slow
def test_a_500_with_a_1_gib_body_is_read_a_few_kib_only(tmp_path, api):
    target = {"database": "d"} if api == "v1" else {"bucket": "b", "token": "t"}
    with bad_server(huge_500) as server:
        sink = make_sink(
            tmp_path,
            api=api,
            url=server.url,
            timeout="2s",
            retry_initial_backoff="5s",
            retry_max_backoff="5s",
            **target,
        )
        try:
            sink.write(fleet_points(intervals=1, gpus=1))
            wait_for(lambda: sink.stats()["write_errors_total"] >= 1, what="the 500")
            state = sink.describe()
            time.sleep(0.5)  # what the server could still push into the closed connection
        finally:
            sink.close()
    assert "HTTP 500: xxxx" in state, state
    # Before: read whole (or until the 2 s deadline): hundreds of MiB, 2 GiB RSS with the full body.
    assert getattr(server, "sent", 0) < 16 * 2**20, server.sent


def test_a_redirect_is_logged_with_its_location(tmp_path, caplog):
    where = "https://influx.example.net:8086/write?db=d"
    with (
        bad_server(answer("307 Temporary Redirect", b"", extra=f"Location: {where}\r\n")) as server,
        caplog.at_level(logging.WARNING, logger="gpuagent"),
    ):
        sink = make_sink(tmp_path, api="v1", url=server.url, database="d")
        try:
            sink.write(fleet_points(intervals=1, gpus=1))
            wait_for(lambda: sink.stats()["write_errors_total"] >= 1, what="the redirect")
        finally:
            sink.close()
    said = [r.getMessage() for r in caplog.records if re.search(r"write( to \S+)? failed", r.getMessage())]
    assert said and f"HTTP 307: redirected to {where}" in said[0], said


def test_v2_against_a_server_without_the_v2_api_says_so(tmp_path, influxdb_v1, caplog):
    with caplog.at_level(logging.WARNING, logger="gpuagent"):
        sink = make_sink(tmp_path, api="v2", url=influxdb_v1.url, bucket="b", token="t")
        try:
            sink.write(fleet_points(intervals=1, gpus=1))
            wait_for(lambda: sink.stats()["write_errors_total"] >= 1, what="the 404")
            kept = sink.stats()["spool_points"]
        finally:
            sink.close()
    said = [r.getMessage() for r in caplog.records if re.search(r"write( to \S+)? refused", r.getMessage())]
    assert said and "no v2 write API" in said[0] and "does not exist" not in said[0], said
    assert kept == 3


def test_the_first_retry_that_replays_a_whole_outage_counts_as_replayed(tmp_path, influxdb_v1_factory):
    server = influxdb_v1_factory()
    server.stop()
    points = fleet_points(intervals=1)  # 24 points: one request replays the whole outage
    sink = make_sink(tmp_path, api="v1", url=server.url, database=server.database)
    try:
        sink.write(points)
        wait_for(lambda: sink.stats()["write_errors_total"] >= 1, what="the outage")
        server.start()
        wait_for(lambda: sink.stats()["spool_points"] == 0, what="the replay")
        stats = sink.stats()
    finally:
        sink.close()
    assert stats["replayed_total"] == len(points), stats  # before: 0
    assert_all_in_v1(server, points)


@pytest.mark.slow
def test_gpuagent_run_behind_a_400_gateway_then_sighup_with_the_fixed_url_loses_no_line(tmp_path, influxdb_v1_factory):
    run = _sibling("test_agent_delivery")
    server = influxdb_v1_factory()
    log, record = tmp_path / "agent.log", tmp_path / "record.lp"
    with bad_server(answer("400 Bad Request", NGINX_400)) as gateway:
        config = run.agent_config(tmp_path, run.v1_table(gateway, database=server.database))
        agent = run.start_agent(config, log)
        try:
            run.wait_for(lambda: gateway.requests >= 5 and record.exists(), what="requests refused by the gateway")
            assert "the server refuses the request itself" in log.read_text()
            run.agent_config(tmp_path, run.v1_table(server))  # the url corrected
            agent.send_signal(signal.SIGHUP)
            run.wait_for(lambda: "reloaded" in log.read_text(), what="the reload")
            early = run.file_lines(record)[:100]  # collected behind the gateway
            run.wait_for(lambda: run.missing_from_influx(server, early) == [], what="the kept batches at the fixed url")
            time.sleep(2)
        finally:
            run.stop_agent(agent, log)
    lines = run.file_lines(record)
    # Every line the agent collected, those of the time behind the gateway included, is stored.
    assert len(lines) > 500 and run.missing_from_influx(server, lines) == []
    assert "rejected" not in log.read_text().lower() and "dropped" not in log.read_text()
