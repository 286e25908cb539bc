"""SIGHUP with the real /metrics server on: the agent stays up, /metrics answers, stop is quick.

Issue 28, item 2: the server's thread blocked in accept() was not woken by
close(), so a reload could not bind the port again and the agent exited 1.
"""

from __future__ import annotations

import signal
import socket
import time
import urllib.request

INTERVAL = 1.0  # [agent] interval of this test's config, seconds
SHUTDOWN_TIMEOUT = 5.0  # what tests/daemon/conftest.py's config sets


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200
        return resp.read().decode()


def _host_times(text: str) -> list[float]:
    """Timestamps (s) of the host collector's points in the file sink's output."""
    return sorted(int(line.rsplit(" ", 1)[1]) / 1e9 for line in text.splitlines() if line.startswith("host,"))


def test_sighup_with_metrics_keeps_the_agent_up_and_stop_is_within_shutdown_timeout(agent_run):
    port = _free_port()
    # A long request_timeout: closing the server used to wait request_timeout + 1 s.
    extra = f'\n[sinks.prometheus]\nlisten = "127.0.0.1:{port}"\nrequest_timeout = "30s"\n'
    proc, notes = agent_run.start(extra=extra)
    first = notes.wait_for("READY=1")
    agent_run.write_config(interval=f'"{INTERVAL:g}s"', extra=extra)
    proc.send(signal.SIGHUP)  # take the 1 s interval (before the test's reload, to time a steady state)
    start = notes.wait_for("READY=1", start=notes.wait_for("RELOADING=1", start=first + 1))
    assert "host" in _scrape(port)

    agent_run.write_config(interval=f'"{INTERVAL:g}s"', tags={"reload": "2"}, extra=extra)
    proc.send(signal.SIGHUP)
    reloading = notes.wait_for("RELOADING=1", start=start + 1)
    ready = notes.wait_for("READY=1", start=reloading)
    assert proc.proc.poll() is None, proc.stderr()
    assert "last reload failed" not in notes.messages[ready][1], proc.stderr()
    assert 'reload="2"' in _scrape(port)  # the new server, on the same port, with the new config's tags

    time.sleep(2 * INTERVAL)  # collections after the reload, to close the gap
    times = _host_times(agent_run.out.read_text())
    gap = max(b - a for a, b in zip(times, times[1:], strict=False))
    # Before: no reload at all (exit 1 after 12 s); with a reload that binds, a 32 s gap.
    assert gap <= 2 * INTERVAL + 1, f"collection gap {gap:.2f}s across the reload"

    t0 = time.monotonic()
    assert proc.stop(signal.SIGTERM, timeout=60) == 0, proc.stderr()
    took = time.monotonic() - t0
    assert took <= SHUTDOWN_TIMEOUT, f"stop took {took:.1f}s"  # before: request_timeout + 1 s = 31 s
    print(f"reload gap {gap:.2f}s, stop {took:.2f}s")
