"""/metrics under load (issue 23 item 11): bounded threads, a queue that refuses, one deadline per
connection, one render per change, and scrapes that never hold up a collection."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpuagent import Accumulator
from gpuagent.context import AgentContext
from gpuagent.plugins.prometheus import PrometheusSink
from gpuagent.plugins.prometheus.server import BACKLOG

TAGS = {"gpu": "0", "uuid": "GPU-abc", "model": "NVIDIA L40S", "pci_bus_id": "00000000:01:00.0", "arch": "Ada Lovelace"}


def make(tmp_path, **options) -> PrometheusSink:
    options.setdefault("listen", "127.0.0.1:0")
    sink = PrometheusSink(PrometheusSink.Config.model_validate(options), AgentContext(hostname="h", state_dir=tmp_path))
    sink.start()
    return sink


def points(n_gpus: int = 8, t: int = 1):
    acc = Accumulator({"host": "node"}, time_ns=t)
    for g in range(n_gpus):
        acc.add_fields(
            "gpu_power",
            {"power_w": 100.0 + g + t, "energy_j": 1e6 + t, "temperature_c": 50},
            tags={**TAGS, "gpu": str(g), "uuid": f"GPU-{g}"},
        )
    return acc.points


def scrape(sink, timeout=10.0) -> tuple[int, bytes]:
    host, port = sink.address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_parallel_scrapes_cost_one_render_and_agree(tmp_path):
    sink = make(tmp_path)
    try:
        sink.write(points())
        with ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(lambda _: scrape(sink), range(100)))
        assert {status for status, _ in answers} == {200}
        assert len({body for _, body in answers}) == 1
        assert sink.values.renders_total == 1
        sink.write(points(t=2))  # a collection: the next scrape renders again, once
        assert b"gpuagent_gpu_power_power_watts" in scrape(sink)[1]
        assert sink.values.renders_total == 2
        stats = sink.stats()
        assert stats["scrapes_total"] == 101 and stats["renders_total"] == 2
    finally:
        sink.close()


@pytest.mark.slow
def test_silent_clients_are_bounded_refused_and_cut_off(tmp_path):
    sink = make(tmp_path, max_connections=4, queue=8, request_timeout="1s")
    sink.write(points())
    before = threading.active_count()
    host, port = sink.address
    clients = []
    try:
        for _ in range(200):  # connect and say nothing: each would hold a thread per connection before
            c = socket.create_connection((host, port), timeout=5)
            clients.append(c)
        time.sleep(0.3)
        assert threading.active_count() == before  # no thread per connection
        # Beyond 4 being served and 8 queued, connections were answered 503 at once.
        refused = 0
        for c in clients:
            c.settimeout(10)
            data = c.recv(200)  # 503 at once, or closed at the deadline
            refused += data.startswith(b"HTTP/1.1 503")
        # At most 4 served + 8 queued at a time; the rest were refused (workers freed by the
        # deadline while the test connected take a few more).
        assert 100 <= refused <= 200 - 12 and refused == sink.stats()["scrapes_refused_total"]
        # The silent ones holding workers are cut off at the deadline and counted; then scrapes work.
        deadline = time.monotonic() + 15
        while sink.stats()["scrape_timeouts_total"] < 200 - refused and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sink.stats()["scrape_timeouts_total"] == 200 - refused
        assert scrape(sink)[0] == 200
    finally:
        for c in clients:
            c.close()
        sink.close()
    assert BACKLOG >= 128


@pytest.mark.slow
def test_a_client_that_never_reads_does_not_hold_up_collection(tmp_path):
    sink = make(tmp_path, max_connections=1, request_timeout="2s")
    sink.write(points(n_gpus=5000))  # an exposition (about 3 MB) larger than the socket buffers
    host, port = sink.address
    stuck = socket.socket()
    stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stuck.connect((host, port))
    stuck.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")  # and never read the answer
    try:
        time.sleep(0.3)
        done = threading.Event()

        def collect():
            for t in range(3, 30):
                sink.write(points(n_gpus=5000, t=t))
            done.set()

        threading.Thread(target=collect, daemon=True).start()
        assert done.wait(60), "writes blocked behind a scrape"  # generous: 27 writes of 5,000 GPUs on a loaded machine
        # After the deadline the worker is free again and serves the newest values.
        status, body = scrape(sink, timeout=15)
        assert status == 200 and b"129.0" in body  # power_w of gpu 0 at t=29: 100 + 0 + 29
        assert sink.stats()["scrape_timeouts_total"] == 1
    finally:
        stuck.close()
        sink.close()


def test_gzip_head_and_unknown_paths(tmp_path):
    import gzip

    sink = make(tmp_path)
    try:
        sink.write(points())
        host, port = sink.address
        req = urllib.request.Request(f"http://{host}:{port}/metrics", headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            assert b"gpuagent_gpu_power_power_watts" in gzip.decompress(resp.read())
        req = urllib.request.Request(f"http://{host}:{port}/metrics", method="HEAD")
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert int(resp.headers["Content-Length"]) > 0 and resp.read() == b""
        try:
            urllib.request.urlopen(f"http://{host}:{port}/nope", timeout=5)
            raise AssertionError("404 expected")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
    finally:
        sink.close()
