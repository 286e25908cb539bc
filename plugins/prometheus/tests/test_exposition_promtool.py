"""/metrics of a simulated node passes `promtool check metrics`, and a real Prometheus scrapes it.

Both binaries come from Debian's `prometheus` package (scripts/test.sh installs it).
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest
from gpuagent_test_servers import free_port
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.servers

SPEC = "l40s:2,h100-sxm-mig:1,rtx4090:1"


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    """`gpuagent run` on the simulated node, prometheus sink only; collectors every 10 min, so the
    values stay put after the first collection and a scrape can be compared with the agent's."""
    tmp = tmp_path_factory.mktemp("agent")
    port = free_port()
    config = tmp / "gpuagent.toml"
    config.write_text(
        f'[agent]\ninterval = "10m"\nhostname = "prom-node"\nstate_dir = "{tmp}"\n'
        f'[sinks.prometheus]\nlisten = "127.0.0.1:{port}"\n'
        # Collectors with their own default interval run on the agent's 10 min here too.
        '[collectors.pcie]\ninterval = "10m"\n[collectors.nvlink]\ninterval = "10m"\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "run", "--config", str(config), "--simulate", SPEC],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    text = ""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            text = _get(url)
            # Every collector's first run in (memory's waits for its GPM warm-up first).
            wanted = ("gpu_power_power_watts", "gpu_health_", "gpu_memory_", "gpu_clocks_", "gpu_pcie_")
            if all(f"gpuagent_{w}" in text for w in wanted):
                break
        except OSError:
            pass
        time.sleep(0.2)
    assert "gpuagent_gpu_power_power_watts" in text, proc.stderr.read1().decode() if proc.poll() is not None else ""
    yield f"127.0.0.1:{port}", url
    proc.terminate()
    proc.wait(20)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def _samples(text: str) -> dict:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.slow
def test_promtool_check_metrics_finds_no_problem(agent):
    from gpuagent_test_servers import PROMTOOL, find_binary

    promtool = find_binary(PROMTOOL, "prometheus")
    text = _get(agent[1])
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done.stdout + done.stderr
    # The names the issue asked for, in base units, with types.
    assert "# TYPE gpuagent_gpu_power_energy_joules_total counter" in text
    assert "# TYPE gpuagent_gpu_clocks_sm_clock_hertz gauge" in text
    assert "# TYPE gpuagent_gpu_memory_gpu_util_ratio gauge" in text
    assert "# HELP gpuagent_gpu_power_power_watts board power draw" in text  # the README's words
    assert "undocumented" not in text


def test_a_real_prometheus_scrapes_it_and_promql_reads_the_agents_values(agent, prometheus_factory):
    target, url = agent
    server = prometheus_factory(targets=[target], scrape_interval="1s")
    expected = _samples(_get(url))
    deadline = time.monotonic() + 60
    got: dict = {}
    while time.monotonic() < deadline:
        result = server.query('{__name__=~"gpuagent_gpu_.+", job="gpuagent"}')
        got = {
            (
                r["metric"]["__name__"],
                tuple(sorted((k, v) for k, v in r["metric"].items() if k not in ("__name__", "job", "instance"))),
            ): float(r["value"][1])
            for r in result
        }
        if len(got) >= len([k for k in expected if k[0].startswith("gpuagent_gpu_")]):
            break
        time.sleep(0.5)
    gpu_expected = {k: v for k, v in expected.items() if k[0].startswith("gpuagent_gpu_")}
    assert len(gpu_expected) > 300
    assert got == gpu_expected
    # One PromQL read against the agent's own number, by name.
    power = server.query('sum(gpuagent_gpu_power_power_watts{model="NVIDIA L40S"})')
    want = sum(
        v
        for (name, labels), v in expected.items()
        if name == "gpuagent_gpu_power_power_watts" and ("model", "NVIDIA L40S") in labels
    )
    assert float(power[0]["value"][1]) == pytest.approx(want, rel=1e-12)
