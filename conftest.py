"""Repository-wide pytest fixtures: the real test servers (see tests/servers.py for their API)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest


def _load_servers():
    # Loaded by path: pytest runs with --import-mode=importlib, so tests/ is not on sys.path.
    name = "gpuagent_test_servers"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / "tests" / "servers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


servers = _load_servers()

# The fast lane (`pytest -m "not slow"`, scripts/fast-lane.sh) leaves out every test that uses one
# of these fixtures, directly or through another fixture: each starts a real server or daemon
# (influxd, VictoriaMetrics, Prometheus, the Slurm cluster, a `gpuagent run` process) or waits
# out a deadline by design (the dripping server). A new fixture that starts one goes here; a
# slow test that uses none of them carries @pytest.mark.slow itself. tests/test_fast_lane.py
# checks that every name here is still a fixture of the repository.
SLOW_FIXTURES = frozenset(
    {
        "influxdb_v1",
        "influxdb_v1_factory",
        "victoria_metrics",
        "victoria_metrics_factory",
        "prometheus_factory",
        "slurm_cluster",  # this file
        "grafana_influx",
        "grafana_prometheus",  # tests/grafana/conftest.py: a real agent feeds them
        "agent_run",  # tests/daemon/conftest.py: `gpuagent run` under a notify socket
        "running_agent",  # plugins/health/tests/test_health_command.py: `gpuagent run` writing its state
        "dripping_server",  # this file: each test waits for a client's deadline
    }
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # Real-GPU tests run only when asked for (`-m gpu`): any other -m, `-m "not slow"` among
    # them, leaves them out as the default does, instead of collecting them to skip.
    if "gpu" not in (config.option.markexpr or ""):
        gpu = [item for item in items if item.get_closest_marker("gpu")]
        if gpu:
            config.hook.pytest_deselected(items=gpu)
            items[:] = [item for item in items if not item.get_closest_marker("gpu")]


@pytest.fixture
def dripping_server():
    """A local HTTP server that drips a valid answer one byte at a time (tests/servers.py)."""
    server = servers.DrippingServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def influxdb_v1(tmp_path_factory):
    """A running influxd 1.x shared by the session, database "gpuagent" created. Do not stop it."""
    binary = servers.find_binary(servers.INFLUXD, "influxdb")
    server = servers.InfluxdServer(binary, tmp_path_factory.mktemp("influxd"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def influxdb_v1_factory(tmp_path_factory):
    """make(auth=False, max_row_limit=0) -> a private influxd for this test (free to stop/start), stopped afterwards."""
    binary = servers.find_binary(servers.INFLUXD, "influxdb")
    made = []

    def make(auth: bool = False, max_row_limit: int = 0):
        server = servers.InfluxdServer(
            binary, tmp_path_factory.mktemp("influxd"), auth=auth, max_row_limit=max_row_limit
        )
        made.append(server)
        server.start()
        return server

    yield make
    for server in made:
        server.stop()


@pytest.fixture(scope="session")
def victoria_metrics(tmp_path_factory):
    """A running VictoriaMetrics shared by the session. Do not stop it."""
    binary = servers.find_binary(servers.VICTORIA_METRICS, "victoria-metrics")
    server = servers.VictoriaMetricsServer(binary, tmp_path_factory.mktemp("vm"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def victoria_metrics_factory(tmp_path_factory):
    """make() -> a private VictoriaMetrics for this test (free to stop/start), stopped afterwards."""
    binary = servers.find_binary(servers.VICTORIA_METRICS, "victoria-metrics")
    made = []

    def make():
        server = servers.VictoriaMetricsServer(binary, tmp_path_factory.mktemp("vm"))
        made.append(server)
        server.start()
        return server

    yield make
    for server in made:
        server.stop()


@pytest.fixture
def prometheus_factory(tmp_path_factory):
    """make(targets=(), scrape_interval="1s", backfill=None, start=True) -> a private Prometheus, stopped afterwards."""
    binary = servers.find_binary(servers.PROMETHEUS, "prometheus")
    made = []

    def make(targets=(), scrape_interval="1s", backfill=None, start=True):
        server = servers.PrometheusServer(binary, tmp_path_factory.mktemp("prometheus"), list(targets), scrape_interval)
        made.append(server)
        if backfill is not None:
            server.backfill(backfill)
        if start:
            server.start()
        return server

    yield make
    for server in made:
        server.stop()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster needs root (slurmd starts jobs as their user)")
    cluster = servers.SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()
