"""`compare` of work counted by the real agent: `gpuagent run` on a simulated H100 with two stand-in
servers that speak vLLM's /metrics (plugins/work/tests/inference_server.py) on its GPU 0, one of
them data parallel over two engines whose engine 1 restarts. The agent's points go into a real
InfluxDB 1.6 and a real VictoriaMetrics; compare must count what the engines served on both, and
charge the two servers together at most the GPU's own hours and energy."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from compare_helpers import compare_json
from inference_stand_in import call, start_server
from lineprotocol_parser import parse

pytestmark = [pytest.mark.servers, pytest.mark.slow]

WORKLOAD = "meta-llama/Llama-3.1-8B-Instruct"


def _server(tmp_path: Path, name: str, *args: str) -> tuple[subprocess.Popen, dict]:
    return start_server(tmp_path, "vllm", *args, name=name)


def _call(port: int, path: str, method: str = "POST") -> dict:
    return call(port, path, method)


def _agent(tmp_path: Path, spec: str, out: Path) -> subprocess.Popen:
    from gpuagent.plugin_host import PluginHost

    text = (
        f'[agent]\ninterval = 1\nstate_dir = "{tmp_path}"\n[sinks.file]\npath = "{out}"\n'
        '[collectors.work]\njobs_dir = ""\nrequest_timeout = 1\n'
    )
    for name in PluginHost(load_entry_points=False).load().collectors:
        if name not in ("processes", "work", "power"):
            text += f"\n[collectors.{name}]\nenabled = false\n"
    config = tmp_path / "gpuagent.toml"
    config.write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "GPUAGENT_CONFIG"}
    cmd = [sys.executable, "-m", "gpuagent", "run", "--config", str(config), "--simulate", spec]
    return subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)


def _latest(out: Path) -> dict[str, float]:
    """work_id -> the newest tokens_out units_total the agent wrote."""
    if not out.exists():
        return {}
    text = out.read_text()
    got = {}
    for m, tags, fields, _ in parse(text[: text.rfind("\n") + 1]):
        if m == "gpu_work" and tags["unit"] == "tokens_out":
            got[tags["work_id"]] = fields["units_total"]
    return got


def _wait(agent, out: Path, check, what: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert agent.poll() is None, f"the agent exited: {agent.stderr.read()[-3000:]}"
        got = _latest(out)
        if check(got):
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout}s; last: {_latest(out)}")


@pytest.fixture(scope="module")
def counted(tmp_path_factory, influxdb_v1, victoria_metrics):
    tmp = tmp_path_factory.mktemp("work_servers")
    dp, a = _server(tmp, "dp", "--engines", "2")
    plain, b = _server(tmp, "plain")
    ida, idb = f"{a['pid']}:{a['port']}", f"{b['pid']}:{b['port']}"
    out = tmp / "points.lp"
    _call(a["port"], "/work?n=10")
    _call(b["port"], "/work?n=4")
    start_ns = time.time_ns()
    agent = _agent(tmp, f"h100-sxm:1@proc=0:{a['workers'][0]}:30000@proc=0:{b['workers'][0]}:20000", out)
    try:
        first = _wait(agent, out, lambda g: ida in g and idb in g, "both servers' points")
        for n in (20, 10):
            _call(a["port"], f"/work?n={n}")
            _call(b["port"], "/work?n=5")
            want = _call(a["port"], "/state", "GET")["tokens_out"]
            _wait(agent, out, lambda g, w=want: g.get(ida) == w, "the data-parallel server's new count")
        _call(a["port"], "/restart_engine?engine=1")  # engine 1 starts again from zero
        time.sleep(2.5)
        _call(a["port"], "/work?n=8")
        _call(b["port"], "/work?n=2")
        served = {k: _call(x["port"], "/state", "GET")["tokens_out"] for k, x in ((ida, a), (idb, b))}
        # The plain server's count reached (so this tick read both after the work); two more ticks.
        _wait(agent, out, lambda g: g.get(idb) == served[idb], "the final counts")
        time.sleep(2.5)
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
        for p in (dp, plain):
            p.terminate()
            p.wait(10)
    assert "Traceback" not in err, err[-3000:]
    end_ns = time.time_ns()
    db = f"servers_{uuid.uuid4().hex[:8]}"
    lines = out.read_text()
    influxdb_v1.create_database(db)
    influxdb_v1.write(lines, db=db)
    req = urllib.request.Request(f"{victoria_metrics.url}/write?db={db}", data=lines.encode(), method="POST")
    urllib.request.urlopen(req, timeout=10).read()
    n = sum(1 for line in lines.splitlines() if line.startswith("gpu_work,"))
    victoria_metrics.export(f'{{__name__="gpu_work_units_total",db="{db}"}}', min_samples=n)
    # What the engines served between the agent's first and last sample of each server.
    expected = sum(served[k] - first[k] for k in (ida, idb))
    yield db, start_ns, end_ns, expected
    influxdb_v1.drop_database(db)


def test_a_work_sample_and_its_gpus_energy_sample_of_one_tick_share_one_time(counted, influxdb_v1):
    db = counted[0]
    work = {r["time"] for r in influxdb_v1.points('SELECT "units_total" FROM "gpu_work"', db=db)}
    energy = {r["time"] for r in influxdb_v1.points('SELECT "energy_j" FROM "gpu_power"', db=db)}
    assert len(work) >= 5 and work <= energy  # so a work span's energy window holds both its edges


def _docs(cli, influxdb_v1, victoria_metrics, counted, *extra):
    db, start_ns, end_ns, _ = counted
    influx = compare_json(cli, ["--url", influxdb_v1.url, "--database", db], start_ns, end_ns, *extra)
    prom = compare_json(cli, ["--promql-url", victoria_metrics.url, "--where", f'db="{db}"'], start_ns, end_ns, *extra)
    return {"influxdb": influx, "victoriametrics": prom}


def test_an_engine_restart_counts_what_the_engines_served_on_both_engines(counted, influxdb_v1, victoria_metrics, cli):
    expected = counted[3]
    for engine, doc in _docs(cli, influxdb_v1, victoria_metrics, counted, "--by", "model,workload").items():
        (group,) = doc["groups"]
        assert group["key"]["workload"] == WORKLOAD
        got = group["work"]["tokens_out"]["units"]
        assert got == pytest.approx(expected, rel=0.05), (engine, got, expected)


def test_two_servers_on_one_gpu_are_charged_at_most_the_gpus_hours_and_energy(
    counted, influxdb_v1, victoria_metrics, cli
):
    for engine, doc in _docs(cli, influxdb_v1, victoria_metrics, counted, "--by", "gpu").items():
        (gpu,) = doc["groups"]
        work = gpu["work"]["tokens_out"]  # both servers' tokens, on the one GPU
        assert gpu["gpu_hours"] > 0 and gpu["energy_kwh"] > 0
        # PromQL's observed time is a difference of epoch seconds as float64 (timestamp()), exact to
        # about 2.4e-7 s at today's epoch; the work's span is of millisecond integers: allow one such step.
        slack = 0.0 if engine == "influxdb" else 5e-7 / 3600
        assert work["gpu_hours"] <= gpu["gpu_hours"] * (1 + 1e-9) + slack, engine
        assert work["gpu_hours"] > 0.5 * gpu["gpu_hours"], engine  # they did share it, not vanish
        assert work["energy_wh"] <= gpu["energy_kwh"] * 1000 * (1 + 1e-9), engine
