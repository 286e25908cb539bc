"""`gpuagent run` under a real NOTIFY_SOCKET: READY, WATCHDOG, RELOADING, STOPPING, signals."""

from __future__ import annotations

import fcntl
import re
import signal
import time

WATCHDOG_USEC = 1_000_000


def _wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_ready_after_first_collection_then_watchdog_until_the_loop_hangs(agent_run, tmp_path):
    proc, notes = agent_run.start(watchdog_usec=WATCHDOG_USEC, hooks=True)
    ready = notes.wait_for("READY=1")

    # READY=1 came after the first collection had reached the sink.
    at_ready = notes.ready_snapshots[0]
    assert "\nhost," in "\n" + at_ready, f"file sink had no host point at READY: {at_ready[:300]!r}"
    for measurement in ("gpu_clocks", "gpu_power", "gpu_memory"):
        assert f"\n{measurement}," in at_ready, f"no {measurement} point in the file sink at READY"
    status = notes.messages[ready][1]
    assert "STATUS=" in status and "sinks: file ok" in status
    assert f"2 GPUs (simulated {agent_run.simulate})" in status

    # Pings at least every half WATCHDOG_USEC while the loop runs.
    t_ready = notes.messages[ready][0]
    time.sleep(1.6)
    pings = notes.times_of("WATCHDOG=1", since=t_ready)
    assert len(pings) >= 3, pings
    gaps = [b - a for a, b in zip([t_ready, *pings[:-1]], pings, strict=True)]
    assert max(gaps) <= WATCHDOG_USEC / 2e6, f"watchdog gaps {gaps}"
    # STATUS= is refreshed as collections go on (every [agent] interval, at least 1 s apart).
    refreshed = [m for t, m in notes.messages[ready + 1 :] if m.startswith("STATUS=")]
    assert refreshed and "2 GPUs (simulated" in refreshed[-1] and refreshed[-1] != status.split("\n")[1], refreshed

    # A stuck scheduler loop sends no more pings; systemd would kill and restart it.
    t_hang = proc.send(signal.SIGUSR2)
    time.sleep(1.3)  # longer than WATCHDOG_USEC: systemd would have fired
    late = notes.times_of("WATCHDOG=1", since=t_hang + 0.3)
    assert late == [], f"pings while the loop hung: {[round(t - t_hang, 2) for t in late]}"
    assert proc.proc.poll() is None

    # Unfrozen, it pings again.
    t_resume = proc.send(signal.SIGUSR2)
    _wait_until(lambda: notes.times_of("WATCHDOG=1", since=t_resume), 2.0, "pings after the loop resumed")

    assert proc.stop(signal.SIGINT) == 0, proc.stderr()
    notes.wait_for("STOPPING=1", start=ready)


def test_sighup_bad_config_keeps_running_and_good_config_reloads(agent_run, tmp_path):
    proc, notes = agent_run.start()
    out = agent_run.out
    first_ready = notes.wait_for("READY=1")

    # A config that fails validation: the running agent goes on, one line says why.
    agent_run.write_config(interval='"soon"')
    proc.send(signal.SIGHUP)
    reloading = notes.wait_for("RELOADING=1", start=first_ready + 1)
    assert re.search(r"^MONOTONIC_USEC=\d+$", notes.messages[reloading][1], re.M)
    back = notes.wait_for("READY=1", start=reloading)
    assert "last reload failed" in notes.messages[back][1]
    failed = [line for line in proc.stderr().splitlines() if "reload failed" in line]
    assert len(failed) == 1, failed
    assert "reload failed, keeping the running config: " in failed[0] and "/gpuagent.toml: agent.interval:" in failed[0]
    size = out.stat().st_size
    _wait_until(lambda: out.stat().st_size > size, 3.0, "the file sink to keep growing after a bad reload")
    assert proc.proc.poll() is None

    # A good, changed config: RELOADING=1, then READY=1 once the new agent's first collection is out.
    assert "reload=2" not in out.read_text()
    agent_run.write_config(tags={"reload": "2"})
    proc.send(signal.SIGHUP)
    reloading = notes.wait_for("RELOADING=1", start=back + 1)
    ready = notes.wait_for("READY=1", start=reloading)
    assert "last reload failed" not in notes.messages[ready][1]
    assert "reload=2" in notes.ready_snapshots[-1], "new config's tags not in the sink at READY"

    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    notes.wait_for("STOPPING=1", start=ready)


def test_sigterm_flushes_buffered_sink_and_exits_0_logging_for_journald(agent_run, tmp_path):
    buffered, out = tmp_path / "buffered.lp", tmp_path / "out.lp"
    proc, notes = agent_run.start(
        plugins_dir=agent_run.plugins_dir, extra=f'\n[sinks.buffered]\npath = "{buffered}"\n', journal=True
    )
    ready = notes.wait_for("READY=1")
    assert "buffered " in notes.messages[ready][1] and "points buffered" in notes.messages[ready][1]
    time.sleep(0.5)
    assert not buffered.exists(), "the buffered sink wrote before it was flushed"

    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
    notes.wait_for("STOPPING=1", start=ready)
    # Every point handed to the sinks, the final self-measurement included, reached the
    # buffered sink's file at shutdown: it matches what the file sink wrote as it went.
    written = out.read_text()
    assert written.endswith("\n") and "\ngpuagent," in "\n" + written
    assert buffered.read_text() == written
    # stderr is "the journal" here: priorities, no timestamps of our own.
    log = proc.stderr().splitlines()
    assert "<6>gpuagent: received SIGTERM; flushing and stopping" in log
    assert log and all(re.match(r"<[2-7]>", line) for line in log), log
    assert not any(re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", line) for line in log), log


def test_reload_frees_what_the_running_agent_holds_or_restores_it(agent_run, tmp_path):
    lock, held = tmp_path / "sink.lock", tmp_path / "held.lock"
    sink = f'\n[sinks.exclusive]\nlock = "{lock}"\n'
    proc, notes = agent_run.start(plugins_dir=agent_run.plugins_dir, extra=sink)
    start = notes.wait_for("READY=1")

    # The new agent's sink cannot start beside the old one: the reload closes the old first.
    agent_run.write_config(tags={"reload": "2"}, extra=sink)
    proc.send(signal.SIGHUP)
    ready = notes.wait_for("READY=1", start=notes.wait_for("RELOADING=1", start=start + 1))
    assert "reload=2" in notes.ready_snapshots[-1]
    assert "last reload failed" not in notes.messages[ready][1]

    # A valid config whose sink cannot start at all: the running config comes back.
    with open(held, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        agent_run.write_config(tags={"reload": "3"}, extra=f'\n[sinks.exclusive]\nlock = "{held}"\n')
        proc.send(signal.SIGHUP)
        back = notes.wait_for("READY=1", start=notes.wait_for("RELOADING=1", start=ready + 1))
    assert "last reload failed: sink exclusive failed to start" in notes.messages[back][1]
    size = agent_run.out.stat().st_size
    _wait_until(lambda: agent_run.out.stat().st_size > size, 3.0, "collection to go on with the restored config")
    text = agent_run.out.read_text()
    assert "reload=2" in text[size:] and "reload=3" not in text
    failed = [line for line in proc.stderr().splitlines() if "reload failed" in line]
    assert len(failed) == 1 and "keeping the running config: sink exclusive failed to start" in failed[0], failed

    assert proc.stop(signal.SIGTERM) == 0, proc.stderr()
