"""/metrics for production: TLS and basic auth (exporter-toolkit's keys), /healthz and /readyz.

The agent runs as `gpuagent run` (a subprocess) with certificates made by openssl; a real
Prometheus scrapes it over TLS with basic auth, and a second job with a wrong password is refused.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

bcrypt = pytest.importorskip("bcrypt", reason="basic auth needs the bcrypt module")
servers = pytest.importorskip("tests.servers", reason="the repository's test servers")

PLUGINS = Path(__file__).parent / "plugins"
USER, PASSWORD = "prom", "s3cret-scrape"


def make_certs(root: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 / localhost, by openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed (Debian package openssl)")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *args: subprocess.run([openssl, *args], cwd=root, check=True, capture_output=True)  # noqa: E731
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=gpuagent test CA")
    run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost")
    (root / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    )
    return {"ca": root / "ca.crt", "cert": root / "server.crt", "key": root / "server.key"}


def write_config(root: Path, port: int, certs: dict[str, Path], gate: Path) -> Path:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()
    path = root / "gpuagent.toml"
    path.write_text(f"""
[agent]
interval = "1s"
state_dir = "{root / "state"}"

[collectors.gated]
gate = "{gate}"
interval = "60s"

[sinks.prometheus]
listen = "127.0.0.1:{port}"

[sinks.prometheus.tls_server_config]
cert_file = "{certs["cert"]}"
key_file = "{certs["key"]}"

[sinks.prometheus.basic_auth_users]
{USER} = "{hashed}"
""")
    return path


def get(url: str, ca: Path, password: str | None = None) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(ca))
    request = urllib.request.Request(url)
    if password is not None:
        token = base64.b64encode(f"{USER}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = predicate()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


@pytest.fixture
def agent(tmp_path):
    certs = make_certs(tmp_path)
    gate = tmp_path / "gate"
    port = servers.free_port()
    config = write_config(tmp_path, port, certs, gate)
    # WATCHDOG_USEC as systemd sets it: /healthz allows the loop that long without a turn.
    env = {**os.environ, "GPUAGENT_TEST_HOOKS": "1", "WATCHDOG_USEC": "2000000"}
    env.pop("NOTIFY_SOCKET", None)
    err = open(tmp_path / "stderr.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuagent",
            "run",
            "--config",
            str(config),
            "--simulate",
            "h100-sxm:2",
            "--plugins-dir",
            str(PLUGINS),
        ],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    base = f"https://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(base, certs["ca"]), 30, f"the agent listening on {base}")
        yield {
            "base": base,
            "ca": certs["ca"],
            "gate": gate,
            "proc": proc,
            "port": port,
            "root": tmp_path,
            "stderr": tmp_path / "stderr.log",
        }
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        err.close()


def _answers(base: str, ca: Path) -> bool:
    try:
        return get(f"{base}/healthz", ca)[0] == 200
    except OSError:
        return False


def test_readyz_503_until_the_first_collection_then_prometheus_scrapes_over_tls_with_basic_auth(
    agent, prometheus_factory
):
    base, ca = agent["base"], agent["ca"]
    # The gated collector holds the first collection back: not ready, yet alive; no auth asked.
    assert get(f"{base}/readyz", ca) == (503, "first collection not yet accepted by every sink\n")
    assert get(f"{base}/healthz", ca) == (200, "ok\n")
    assert get(f"{base}/metrics", ca)[0] == 401
    assert get(f"{base}/metrics", ca, "wrong")[0] == 401
    agent["gate"].touch()
    wait_for(lambda: get(f"{base}/readyz", ca)[0] == 200, 20, "/readyz 200 after the first collection")
    status, body = get(f"{base}/metrics", ca, PASSWORD)
    assert status == 200 and "gpuagent_gpu_power_power_watts{" in body

    prom = prometheus_factory(start=False)
    target = f"127.0.0.1:{agent['port']}"
    job = """  - job_name: {name}
    scheme: https
    tls_config: {{ca_file: "{ca}", server_name: localhost}}
    basic_auth: {{username: {user}, password: "{password}"}}
    static_configs: [{{targets: ["{target}"]}}]
"""
    prom.config_file.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n"
        + job.format(name="gpuagent", ca=ca, user=USER, password=PASSWORD, target=target)
        + job.format(name="wrong_password", ca=ca, user=USER, password="wrong", target=target)
    )
    prom.start()
    wait_for(
        lambda: prom.query('gpuagent_gpu_power_power_watts{job="gpuagent"}'),
        30,
        "Prometheus stores the agent's series scraped over TLS",
    )
    up = wait_for(lambda: len(r := prom.query("up")) == 2 and r, 30, "both jobs scraped")
    assert {r["metric"]["job"]: r["value"][1] for r in up} == {"gpuagent": "1", "wrong_password": "0"}
    status, data = servers._http("GET", f"{prom.url}/api/v1/targets")
    errors = {t["labels"]["job"]: t["lastError"] for t in json.loads(data)["data"]["activeTargets"]}
    assert "401" in errors["wrong_password"], errors
    assert errors["gpuagent"] == ""


@pytest.mark.slow
def test_healthz_503_once_the_scheduler_loop_stops(agent):
    base, ca = agent["base"], agent["ca"]
    agent["gate"].touch()
    wait_for(lambda: get(f"{base}/readyz", ca)[0] == 200, 20, "ready")
    agent["proc"].send_signal(signal.SIGUSR2)  # GPUAGENT_TEST_HOOKS: the scheduler's loop freezes
    status, body = wait_for(lambda: (r := get(f"{base}/healthz", ca))[0] == 503 and r, 20, "/healthz 503")
    assert body.startswith("scheduler loop stuck: no turn for ")
    agent["proc"].send_signal(signal.SIGUSR2)  # and turns again
    wait_for(lambda: get(f"{base}/healthz", ca)[0] == 200, 10, "/healthz 200 again")


@pytest.mark.slow
def test_plain_http_to_the_tls_port_gets_no_metrics(agent):
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{agent['port']}/metrics", timeout=5).read()
    base, ca = agent["base"], agent["ca"]
    assert get(f"{base}/healthz", ca)[0] == 200  # the server goes on


def test_a_password_in_basic_auth_users_is_refused_with_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[sinks.prometheus.basic_auth_users]\nprom = "plaintext"\n')
    done = subprocess.run(
        [sys.executable, "-m", "gpuagent", "config", "check", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "basic_auth_users.prom: expected a bcrypt hash" in done.stderr
    assert "Traceback" not in done.stderr
