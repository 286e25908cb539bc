"""The prometheus sink: /metrics over HTTP with the latest value per series."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuagent import Accumulator
from gpuagent.context import AgentContext
from gpuagent.errors import AgentError
from gpuagent.plugins.prometheus import DEFAULT_PORT, PrometheusSink

TAGS = {"gpu": "0", "uuid": "GPU-abc", "model": "NVIDIA L40S", "pci_bus_id": "00000000:01:00.0", "arch": "Ada Lovelace"}


def make(tmp_path, **options) -> PrometheusSink:
    options.setdefault("listen", "127.0.0.1:0")
    sink = PrometheusSink(PrometheusSink.Config.model_validate(options), AgentContext(hostname="h", state_dir=tmp_path))
    sink.start()
    return sink


def scrape(sink) -> str:
    host, port = sink.address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def samples(text: str) -> dict:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = (family.type, s.value)
    return out


def test_latest_values_gauges_counters_info_and_labels(tmp_path):
    sink = make(tmp_path)
    try:
        for i, power in enumerate((100.0, 250.5)):
            acc = Accumulator({"host": "node-1"}, time_ns=i)
            acc.add_fields(
                "gpu_power",
                {"power_w": power, "energy_j_total": 10 * (i + 1), "throttled": i == 1, "pstate": f"P{i}"},
                tags=TAGS,
            )
            acc.add_fields("gpu-odd.name", {"odd field": 1}, tags={"gpu": "1", "__x": "y"})
            sink.write(acc.points)
        got = samples(scrape(sink))
    finally:
        sink.close()
    labels = tuple(sorted({"host": "node-1", **TAGS}.items()))
    assert got[("gpuagent_gpu_power_power_watts", labels)] == ("gauge", 250.5)
    # energy_j is a counter by its README; energy_j_total by its name: both end in _joules_total
    assert got[("gpuagent_gpu_power_energy_joules_total", labels)] == ("counter", 20.0)
    assert got[("gpuagent_gpu_power_throttled", labels)] == ("gauge", 1.0)
    info_labels = tuple(sorted({"host": "node-1", **TAGS, "pstate": "P1"}.items()))
    # The text format has no info type: an info metric is exposed as a gauge of 1.
    assert got[("gpuagent_gpu_power_pstate_info", info_labels)] == ("gauge", 1.0)
    assert len([k for k in got if k[0] == "gpuagent_gpu_power_pstate_info"]) == 1  # P0 was replaced by P1
    odd = tuple(sorted({"host": "node-1", "gpu": "1", "tag__x": "y"}.items()))
    assert got[("gpuagent_gpu_odd_name_odd_field", odd)] == ("gauge", 1.0)
    assert len([k for k in got if k[0] == "gpuagent_gpu_power_power_watts"]) == 1  # latest only


def test_series_expire_and_string_fields_can_be_skipped(tmp_path):
    sink = make(tmp_path, expire_after="50ms", string_fields=False)
    try:
        acc = Accumulator({"host": "h"}, time_ns=1)
        acc.add_fields("gpu_clocks", {"sm_clock_mhz": 1980, "pstate": "P0"}, tags=TAGS)
        sink.write(acc.points)
        text = scrape(sink)
        assert "gpuagent_gpu_clocks_sm_clock_hertz" in text and "_info" not in text
        import time

        time.sleep(0.1)
        sink.write([])  # a change renders again
        acc = Accumulator({"host": "h"}, time_ns=2)
        acc.add_fields("gpu_power", {"power_w": 1.0}, tags=TAGS)
        sink.write(acc.points)
        assert "gpuagent_gpu_clocks_sm_clock_hertz" not in scrape(sink)
    finally:
        sink.close()


def test_default_listen_avoids_dcgm_exporter_and_a_busy_port_is_one_line(tmp_path):
    cfg = PrometheusSink.Config()
    assert cfg.listen == f"127.0.0.1:{DEFAULT_PORT}" and DEFAULT_PORT not in (9400, 9835, 9100)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(AgentError, match=f"cannot listen on 127.0.0.1:{port}"):
            make(tmp_path, listen=f"127.0.0.1:{port}")


@pytest.mark.parametrize("listen", ["9847", "host:", "h:70000", ":abc"])
def test_bad_listen_is_refused(listen):
    with pytest.raises(Exception, match="HOST:PORT"):
        PrometheusSink.Config.model_validate({"listen": listen})


@pytest.mark.slow
def test_agent_serves_an_8_gpu_machine_with_valid_names(tmp_path):
    """`gpuagent run` with the prometheus sink: every GPU's series, parseable by prometheus-client."""
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "gpuagent.toml"
    config.write_text(
        f'[agent]\ninterval = "500ms"\nhostname = "prom-node"\nstate_dir = "{tmp_path}"\n'
        f'[sinks.prometheus]\nlisten = "127.0.0.1:{port}"\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "run", "--config", str(config), "--simulate", "h100-sxm:8"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        text = ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                    text = resp.read().decode()
                if "gpuagent_gpu_power_power_watts" in text and "gpuagent_runs_total" in text:
                    break
            except OSError:
                pass
            time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(20)
    got = samples(text)  # the parser refuses malformed names or labels
    power = {dict(labels)["gpu"] for name, labels in got if name == "gpuagent_gpu_power_power_watts"}
    assert power == {str(i) for i in range(8)}
    assert any(kind == "counter" for kind, _ in got.values())
    assert proc.returncode == 0, proc.stderr.read().decode()[-2000:]


@pytest.mark.parametrize("client", ["none", "mid-request"])
def test_close_frees_the_port_at_once_whatever_the_clients_do(tmp_path, client):
    # Before: close() did not wake the thread in accept() and waited request_timeout + 1 s (31 s here),
    # with the port still bound, so a reload could not start the new server on it.
    sink = make(tmp_path, request_timeout="30s")
    host, port = sink.address
    slow = None
    if client == "mid-request":
        slow = socket.create_connection((host, port))
        slow.sendall(b"GET /metrics HTTP/1.1\r\n")  # a head that never ends
        time.sleep(0.3)  # a worker is serving it
    t0 = time.monotonic()
    sink.close()
    took = time.monotonic() - t0
    again = make(tmp_path, listen=f"{host}:{port}")
    try:
        scrape(again)  # the new server answers on the same port (urlopen raises otherwise)
    finally:
        again.close()
        if slow is not None:
            slow.close()
    assert took < 10, took  # within the agent's default shutdown_timeout


def test_a_label_or_string_that_is_not_utf8_keeps_metrics_answering(tmp_path):
    """Lone surrogates in a tag and a string field (issue 28, item 3): /metrics answers 200 with
    the byte as \\xff (psutil's surrogateescape) or U+FFFD; before, every scrape failed."""
    sink = make(tmp_path)
    try:
        acc = Accumulator({"host": "h"}, time_ns=1)
        acc.add_fields(
            "gpu_process", {"used_memory_bytes": 5, "name": "train\udcffjob"}, tags={"pid": "7", "job": "j\ud800"}
        )
        sink.write(acc.points)
        got = samples(scrape(sink))
    finally:
        sink.close()
    labels = {"host": "h", "pid": "7", "job": "j\ufffd"}
    assert got[("gpuagent_gpu_process_used_memory_bytes", tuple(sorted(labels.items())))] == ("gauge", 5.0)
    info = tuple(sorted({**labels, "name": "train\\xffjob"}.items()))
    assert got[("gpuagent_gpu_process_name_info", info)] == ("gauge", 1.0)


@pytest.mark.slow
def test_series_are_capped_per_metric_and_in_all_counted_and_warned_once(tmp_path, caplog):
    """A plugin adding 20,000 tag values a cycle (issue 28, item 11): the store stops at the caps,
    the series already served keep updating, the rest is counted, one warning per metric."""
    import logging

    sink = make(tmp_path, max_series_per_metric=300, max_series=500)
    try:
        with caplog.at_level(logging.WARNING, logger="gpuagent.sink.prometheus"):
            for cycle in range(3):
                acc = Accumulator({"host": "h"}, time_ns=cycle)
                acc.add_fields("gpu_power", {"power_w": 100.0 + cycle}, tags={"gpu": "0"})
                for measurement in ("churn", "other"):
                    for i in range(20_000):
                        acc.add_fields(measurement, {"value": i}, tags={"job": f"{cycle}-{i}"})
                sink.write(acc.points)
            got = samples(scrape(sink))
        stats = sink.stats()
    finally:
        sink.close()
    names = [name for name, _ in got]
    assert names.count("gpuagent_churn_value") == 300
    assert names.count("gpuagent_other_value") == 199  # what is left of max_series
    assert got[("gpuagent_gpu_power_power_watts", (("gpu", "0"), ("host", "h")))] == ("gauge", 102.0)
    assert (
        stats["series"] == 500 and stats["series_refused_total"] == 3 * 40_000 - 499
    )  # all but gpu_power's and 499 first
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2, warned
    assert "gpuagent_churn_value has 300 series, max_series_per_metric" in warned[0]
    assert "gpuagent_other_value has no room: 500 series in all, max_series" in warned[1]
