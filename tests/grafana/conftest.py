"""The session's InfluxDB 1.x holding what the dashboards read (see grafana_dashboards.py).

The agent runs with GPU 1 lost after 3 s, so its errors and last_error panels have data.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from grafana.grafana_dashboards import (
    AGENT_HOST,
    FLEET_SPECS,
    NODE_HOST,
    PROM_SPEC,
    SLURM_ENV,
    agent_config,
)


@pytest.fixture(scope="session")
def grafana_influx(influxdb_v1, tmp_path_factory):
    """(server, database) with the fleet's last 20 min, ~8 s of a real agent, and two probe runs."""
    tmp = tmp_path_factory.mktemp("grafana")
    db = f"grafana_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    gpuagent = [sys.executable, "-m", "gpuagent"]
    env = {k: v for k, v in os.environ.items() if k != "GPUAGENT_CONFIG"}
    fleet = [
        *gpuagent,
        "sim",
        "fleet",
        "--url",
        influxdb_v1.url,
        "--database",
        db,
        "--duration",
        "20m",
        "--step",
        "10s",
        "--seed",
        "5",
        "--jobs",
        "1",
        "--collectors",
        "all",
        "--with-jobs",
    ]
    for spec in FLEET_SPECS:
        fleet += ["--spec", spec]
    done = subprocess.run(fleet, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    # Hosts that do work (sim fleet's inference scenario writes gpu_work), for the work panels.
    work = [
        *gpuagent,
        "sim",
        "fleet",
        "--url",
        influxdb_v1.url,
        "--database",
        db,
        "--duration",
        "20m",
        "--step",
        "10s",
        "--seed",
        "5",
        "--jobs",
        "1",
        "--scenario",
        "inference",
        "--prefix",
        "work",
        "--collectors",
        "power,clocks,memory,pcie",
        "--spec",
        "l40s:2",
        "--spec",
        "h100-sxm:2",
    ]
    done = subprocess.run(work, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    # The agent's own measurement comes from a real agent, run as the daemon runs.
    config = agent_config(tmp / "agent.toml", influxdb_v1.url, db, tmp / "state", AGENT_HOST)
    agent = subprocess.Popen(
        [*gpuagent, "run", "--config", str(config), "--simulate", "l40s:2@lost=1:3s"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        # gpu_l2_probe points from the probe's own --send path (simulated curve), two runs.
        probe_cfg = agent_config(tmp / "probe.toml", influxdb_v1.url, db, tmp / "probe-state", NODE_HOST)
        for gpu in ("0", "1"):
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gpuagent.probe",
                    "--simulate",
                    "l40s:2",
                    "--gpu",
                    gpu,
                    "--max-util",
                    "100",
                    "--steps",
                    "12",
                    "--rounds",
                    "1",
                    "--send",
                    "--config",
                    str(probe_cfg),
                ],
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
            )
            assert done.returncode == 0, done.stderr
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rows = influxdb_v1.query(
                f'SELECT count("runs_total") FROM "gpuagent" WHERE "host" = \'{AGENT_HOST}\'', db=db
            )
            if rows and rows[0]["values"][0][1] >= 8 * 6:  # 8 runs of each collector
                break
            time.sleep(0.5)
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
    assert agent.returncode == 0, err[-2000:]
    yield influxdb_v1, db
    influxdb_v1.drop_database(db)


def _probe_points(tmp, env) -> list:
    """gpu_l2_probe points of two real `gpuagent.probe --send` runs (simulated curve), via a file sink."""
    from lineprotocol_parser import parse

    from gpuagent.pipeline.metric import Point

    out = tmp / "probe.lp"
    config = tmp / "probe-file.toml"
    config.write_text(
        f'[agent]\nhostname = "{NODE_HOST}"\nstate_dir = "{tmp / "probe-file-state"}"\n\n[sinks.file]\npath = "{out}"\n'
    )
    for gpu in ("0", "1"):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "gpuagent.probe",
                "--simulate",
                "l40s:2",
                "--gpu",
                gpu,
                "--max-util",
                "100",
                "--steps",
                "12",
                "--rounds",
                "1",
                "--send",
                "--config",
                str(config),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert done.returncode == 0, done.stderr
    return [Point(m, tags, fields, ts) for m, tags, fields, ts in parse(out.read_text())]


def _feed_work(sink, prometheus, stop) -> None:
    """gpu_work points (the work collector's schema) for two of the agent's GPUs, their counters
    growing every half second, served by the probe's sink: an L40S serving one model, and a
    workload over both H100s (gpus = 2). The agent has no work source of its own here."""
    from gpuagent.pipeline.metric import Point

    gpus = {}
    while not stop.is_set() and len(gpus) < 3:
        for r in prometheus.query('gpuagent_gpu_power_power_watts{gpu=~"0|2|3"}'):
            gpus[r["metric"]["gpu"]] = {
                k: v for k, v in r["metric"].items() if k in ("host", "gpu", "uuid", "model", "pci_bus_id", "arch")
            }
        stop.wait(0.5)
    pieces = [
        (["0"], "llama-3.1-8b", "tokens_out", "vllm", "4100:8000", 350),
        (["2", "3"], "llama-3.1-70b", "tokens_out", "vllm", "4200:8001", 120),
    ]
    total = 0
    while not stop.is_set():
        total += 1
        points = [
            Point(
                "gpu_work",
                {**gpus[g], "workload": w, "unit": u, "source": src, "work_id": wid},
                {"units_total": total * step, "gpus": len(on)},
                time.time_ns(),
            )
            for on, w, u, src, wid, step in pieces
            for g in on
        ]
        sink.write(points)
        stop.wait(0.5)


@pytest.fixture(scope="session")
def grafana_prometheus(tmp_path_factory):
    """(Prometheus, start time): a real Prometheus scraping every second a real agent (PROM_SPEC,
    an XID and a lost GPU at 4 s, a process of Slurm job 4242 on GPU 2, an influxdb sink whose
    server is down so the spool fills) and a
    prometheus sink serving real probe points; yielded once 12 s of scrapes are stored."""
    import gpuagent_test_servers as servers

    from gpuagent.context import AgentContext
    from gpuagent.plugins.prometheus import PrometheusSink

    tmp = tmp_path_factory.mktemp("grafana-prom")
    env = {k: v for k, v in os.environ.items() if k != "GPUAGENT_CONFIG"}
    binary = servers.find_binary(servers.PROMETHEUS, "prometheus")
    sink = PrometheusSink(
        PrometheusSink.Config.model_validate({"listen": "127.0.0.1:0", "expire_after": 0}),
        AgentContext(hostname=NODE_HOST, state_dir=tmp),
    )
    sink.start()
    sink.write(_probe_points(tmp, env))
    agent_port, down_port = servers.free_port(), servers.free_port()
    config = tmp / "agent.toml"
    config.write_text(
        f"""[agent]
interval = "1s"
hostname = "{NODE_HOST}"
state_dir = "{tmp / "state"}"

[sinks.prometheus]
listen = "127.0.0.1:{agent_port}"

[sinks.influxdb]
url = "http://127.0.0.1:{down_port}"
api = "v1"
database = "down"
flush_interval = "1s"
flush_jitter = 0
retry_initial_backoff = "1s"
retry_max_backoff = "2s"
"""
    )
    job = subprocess.Popen(["sleep", "600"], env={**env, **SLURM_ENV})
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "run", "--config", str(config), "--simulate", PROM_SPEC.format(pid=job.pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    prometheus = servers.PrometheusServer(
        binary, tmp / "prometheus", [f"127.0.0.1:{agent_port}", f"127.0.0.1:{sink.address[1]}"], "1s"
    )
    stop_work = threading.Event()
    worker = threading.Thread(target=_feed_work, args=(sink, prometheus, stop_work), daemon=True)
    try:
        prometheus.start()
        worker.start()
        since = time.time()
        deadline = since + 60
        while time.time() < deadline:
            up = prometheus.query("count_over_time(gpuagent_runs_total[1m])")
            if up and min(float(r["value"][1]) for r in up) >= 12:
                break
            assert agent.poll() is None, agent.stderr.read()[-2000:]
            time.sleep(1)
        yield prometheus, since
    finally:
        stop_work.set()
        worker.join(timeout=10)
        prometheus.stop()
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
        sink.close()
        job.kill()
        job.wait()
    assert agent.returncode == 0, err[-2000:]
