"""Ctrl-C, one behaviour for every command: it stops, says one line at most, exits 130.

Real processes and a real SIGINT sent, as a terminal sends it, to the command's whole
process group (workers included). Each command is caught where the issue saw it go wrong:
`run --once` in a collection, `probe l2` in its sweep, `inspect` in start-up (a plugin
still importing), `sim fleet` with one process and with worker processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

# A plugin that says where it is (a marker file), then takes its time there.
SLOW_COLLECTOR = """
import time
from pathlib import Path
import gpuagent

class Slow(gpuagent.Collector):
    name = "slow"
    requires_gpus = False
    def collect(self, acc):
        Path({marker!r}).touch()
        time.sleep(120)

@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(Slow)
"""

SLOW_IMPORT = """
import time
from pathlib import Path
Path({marker!r}).touch()
time.sleep(120)
"""


def _start(args, tmp_path, env=None):
    full_env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), **(env or {})}
    full_env.pop("GPUAGENT_CONFIG", None)
    # Under scripts/fast-lane.sh coverage.py would start in the child first (its .pth hook): a
    # Ctrl-C timed against the agent's start-up would land in coverage's instead.
    for name in [n for n in full_env if n.startswith("COVERAGE_PROCESS_")]:
        del full_env[name]
    return subprocess.Popen(
        [sys.executable, "-m", "gpuagent", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        start_new_session=True,
    )


def _wait_for(what, check, proc, limit=60.0):
    deadline = time.monotonic() + limit
    while not check():
        if proc.poll() is not None:
            pytest.fail(f"the command ended before {what}: rc {proc.returncode}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no sign of {what} after {limit:g}s")
        time.sleep(0.05)


def _interrupt(proc, twice: bool = False) -> tuple[int, str, list[psutil.Process]]:
    """Ctrl-C to the process group (``twice``: again while it stops); (exit status, stderr,
    the processes that were in it)."""
    family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    os.killpg(proc.pid, signal.SIGINT)
    if twice:
        time.sleep(0.1)
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass  # already gone
    try:
        proc.wait(60)  # not a timing goal: a hang is what this catches
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"still running 60 s after Ctrl-C: {proc.stderr.read()}")
    return proc.returncode, proc.stderr.read(), family


def _assert_stopped_in_one_line(rc, err, family):
    assert rc == 130, f"exit {rc}, stderr: {err}"
    assert "Traceback" not in err and "Aborted!" not in err, err
    assert len(err.strip().splitlines()) <= 1, err
    # The command's own children may take a moment after it to go (multiprocessing's resource
    # tracker leaves when its pipe closes): wait for them, with a bound far above that moment.
    _, alive = psutil.wait_procs(family[1:], timeout=15)
    left = [(p.pid, " ".join(p.cmdline()[-3:])) for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left behind: {left}"


def _plugin(tmp_path, source) -> tuple[Path, Path]:
    marker, folder = tmp_path / "reached", tmp_path / "plugins.d"
    folder.mkdir()
    (folder / "slow.py").write_text(textwrap.dedent(source.format(marker=str(marker))))
    return marker, folder


@pytest.mark.slow
def test_run_once_interrupted_in_a_collection(tmp_path):
    marker, folder = _plugin(tmp_path, SLOW_COLLECTOR)
    proc = _start(
        ["run", "--once", "--test", "--log-level", "warning", "--simulate", "l40s:1", "--plugins-dir", str(folder)],
        tmp_path,
    )
    _wait_for("the collection", marker.exists, proc)
    _assert_stopped_in_one_line(*_interrupt(proc))


@pytest.mark.slow
def test_inspect_interrupted_in_start_up(tmp_path):
    marker, folder = _plugin(tmp_path, SLOW_IMPORT)
    proc = _start(["inspect", "--simulate", "l40s:1", "--plugins-dir", str(folder)], tmp_path)
    _wait_for("the plugins loading", marker.exists, proc)
    _assert_stopped_in_one_line(*_interrupt(proc))


@pytest.mark.parametrize("delay", [0.1, 0.2, 0.3])
def test_interrupted_while_the_command_line_is_imported(tmp_path, delay):
    """Before any command runs, in the first imports (a traceback from importlib before)."""
    proc = _start(["inspect", "--simulate", "l40s:1"], tmp_path)
    time.sleep(delay)
    rc, err, family = _interrupt(proc)
    if rc == 0:
        pytest.skip("inspect finished before the Ctrl-C")
    if rc == -signal.SIGINT and not err:
        return  # before Python took SIGINT over: killed by it, silently (the shell says 130)
    _assert_stopped_in_one_line(rc, err, family)


@pytest.mark.slow
def test_probe_l2_interrupted_in_its_sweep(tmp_path):
    """The CPU probe: a sweep of this size takes many seconds, so the Ctrl-C lands in it."""
    proc = _start(["probe", "l2", "--cpu", "--steps", "200", "--rounds", "100"], tmp_path)
    _wait_for("the sweep", lambda: "numpy" in " ".join(m.path for m in psutil.Process(proc.pid).memory_maps()), proc)
    time.sleep(0.5)
    _assert_stopped_in_one_line(*_interrupt(proc))


@pytest.mark.servers
@pytest.mark.parametrize(("jobs", "twice"), [(1, False), (2, False), (2, True)])
def test_sim_fleet_interrupted_with_one_or_more_processes(tmp_path, influxdb_v1, jobs, twice):
    """With workers: they go with the command (issue 29: a hang, then, at a second Ctrl-C,
    a traceback and orphans)."""
    proc = _start(
        [
            "sim",
            "fleet",
            "--url",
            influxdb_v1.url,
            "--database",
            influxdb_v1.database,
            "--spec",
            "l40s:2",
            "--hosts",
            "4",
            "--duration",
            "2d",
            "--jobs",
            str(jobs),
            "--prefix",
            f"ctrlc{jobs}{twice:d}",
        ],
        tmp_path,
    )
    if jobs > 1:
        _wait_for("the workers", lambda: len(psutil.Process(proc.pid).children(recursive=True)) >= 3, proc)
    time.sleep(1.5)  # into the simulation (a 2-day history takes far longer)
    _assert_stopped_in_one_line(*_interrupt(proc, twice))
