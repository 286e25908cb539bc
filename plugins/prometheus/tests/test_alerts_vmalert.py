"""Alerts without Prometheus: the shipped rules (config/prometheus/alerts.yml), unchanged, on
vmalert against VictoriaMetrics, routed to a real Alertmanager (all three from Debian's
packages). Two ways the data reaches VictoriaMetrics: it scrapes the agent's /metrics, or the
agent writes line protocol to its InfluxDB write path (config/victoriametrics/influx-relabel.yml
adds the gpuagent_ prefix). The fleet: 7 simulated GPUs where expected_gpus = 8."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpuagent_test_servers import (
    ALERTMANAGER,
    VICTORIA_METRICS,
    VMALERT,
    AlertmanagerServer,
    VictoriaMetricsServer,
    VmalertServer,
    find_binary,
    free_port,
)  # fmt: skip

pytestmark = [pytest.mark.servers, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "config" / "prometheus" / "alerts.yml"
RELABEL = REPO / "config" / "victoriametrics" / "influx-relabel.yml"


class ConfiguredVictoriaMetrics(VictoriaMetricsServer):
    def __init__(self, binary: str, root: Path, *extra: str):
        super().__init__(binary, root)
        self.extra = list(extra)

    def _argv(self) -> list[str]:
        return [*super()._argv(), *self.extra]


@pytest.fixture
def alerting(tmp_path):
    """start(vm_flags) -> (VictoriaMetrics, vmalert, Alertmanager), stopped afterwards."""
    started = []

    def start(*vm_flags: str):
        vm = ConfiguredVictoriaMetrics(find_binary(VICTORIA_METRICS, "victoria-metrics"), tmp_path / "vm", *vm_flags)
        am = AlertmanagerServer(find_binary(ALERTMANAGER, "prometheus-alertmanager"), tmp_path / "am")
        for server in (vm, am):
            server.start()
            started.append(server)
        vmalert = VmalertServer(find_binary(VMALERT, "victoria-metrics"), tmp_path / "vmalert", RULES, vm.url, am.url)
        vmalert.start()
        started.append(vmalert)
        return vm, vmalert, am

    yield start
    for server in reversed(started):
        server.stop()


def start_agent(tmp_path: Path, sinks: str) -> subprocess.Popen:
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        f'[agent]\ninterval = "1s"\nstate_dir = "{tmp_path}"\nhostname = "n7"\nsimulate = "h100-sxm:7"\n'
        f"[collectors.health]\nexpected_gpus = 8\n{sinks}"
    )
    return subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "run", "--config", str(cfg)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=30)[1]


def wait_for_alert(am: AlertmanagerServer, name: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for alert in am.alerts():
            if alert["labels"].get("alertname") == name:
                return alert
        time.sleep(0.5)
    raise AssertionError(f"Alertmanager holds no {name} alert after {timeout:g}s: {am.alerts()}")


def test_gpu_missing_fires_on_vmalert_scraping_and_reaches_alertmanager(tmp_path, alerting):
    port = free_port()
    scrape = tmp_path / "scrape.yml"
    scrape.write_text(
        "scrape_configs:\n  - job_name: gpuagent\n    scrape_interval: 1s\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    vm, vmalert, am = alerting(f"-promscrape.config={scrape}")
    agent = start_agent(tmp_path, f'[sinks.prometheus]\nlisten = "127.0.0.1:{port}"\n')
    try:
        alert = wait_for_alert(am, "GpuMissing")
    finally:
        err = stop(agent)
    assert alert["labels"]["host"] == "n7" and alert["labels"]["severity"] == "critical", err[-2000:]
    assert alert["annotations"]["summary"] == "1 GPU(s) missing on n7"
    assert alert["status"]["state"] == "active"
    firing = {a["name"] for a in vmalert.alerts() if a["state"] == "firing"}
    assert "GpuMissing" in firing and "GpuLost" not in firing  # missing is not lost: its own rule


def test_gpu_missing_fires_on_data_written_through_the_influxdb_write_path(tmp_path, alerting):
    vm, vmalert, am = alerting(f"-relabelConfig={RELABEL}")
    agent = start_agent(
        tmp_path,
        '[sinks.influxdb]\nurl = "{url}"\napi = "v1"\ndatabase = "gpuagent"\nflush_interval = "1s"\n'.replace(
            "{url}", vm.url
        ),
    )
    try:
        alert = wait_for_alert(am, "GpuMissing")
    finally:
        err = stop(agent)
    assert alert["labels"]["host"] == "n7", err[-2000:]
    assert alert["annotations"]["summary"] == "1 GPU(s) missing on n7"
    series = vm.export('{__name__="gpuagent_gpu_inventory_gpus_missing"}', min_samples=1)
    assert series and series[0]["values"][-1] == 1


def test_the_rules_docs_say_run_on_the_influxdb_write_path_use_names_that_path_makes():
    """docs/alerting.md lists the rules that run on line protocol written to VictoriaMetrics:
    each reads only metrics whose name there (gpuagent_ + <measurement>_<field>, after
    influx-relabel.yml) is the exposition's, and the rest are said not to."""
    import re

    from gpuagent.plugins.prometheus.naming import metric_for
    from gpuagent.schema import catalog

    same = set()
    for (measurement, field), doc in catalog.builtin().items():
        if doc.type is str:
            continue
        name = f"{measurement}_{field}"
        if metric_for("gpuagent", measurement, field).name == (
            name if name.startswith("gpuagent_") else f"gpuagent_{name}"
        ):
            same.add(metric_for("gpuagent", measurement, field).name)
    works = set()
    for block in re.split(r"- alert: ", RULES.read_text())[1:]:
        expr = block.split("annotations:")[0]
        names = set(re.findall(r"\bgpuagent_\w+", expr))
        if names and names <= same:
            works.add(block.split()[0])
    text = (REPO / "docs" / "alerting.md").read_text()
    said = set(re.findall(r"`(\w+)`", text[text.index("run unchanged:") : text.index("Not these")]))
    assert said == works, said ^ works
