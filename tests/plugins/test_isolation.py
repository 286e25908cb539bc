"""Isolation after loading: a collector that rejects its config stops the start with one line;
one that raises or hangs at run time is counted and never stops the others."""

from __future__ import annotations

import sys

import pytest

from gpuagent.errors import ConfigError
from gpuagent.service.runtime import Options, build

PICKY = """
import gpuagent

class Picky(gpuagent.Collector):
    name = "picky"

    class Config(gpuagent.CollectorConfig):
        threshold: int = 50

    def __init__(self, config, context):
        super().__init__(config, context)
        if config.threshold >= 100:
            raise ValueError(f"threshold: must be below 100, got {config.threshold}")

    def collect(self, acc):
        acc.add_fields("picky", {"threshold": self.config.threshold})

@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(Picky)
"""

# Raises a pydantic ValidationError (a multi-line ValueError) from __init__.
STRICT = """
import pydantic
import gpuagent

class Limits(pydantic.BaseModel):
    low: int
    high: int

class Strict(gpuagent.Collector):
    name = "strict"

    class Config(gpuagent.CollectorConfig):
        limits: dict = {}

    def __init__(self, config, context):
        super().__init__(config, context)
        self.limits = Limits.model_validate(config.limits)

    def collect(self, acc):
        pass

@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(Strict)
"""

MISBEHAVING = """
import threading
import gpuagent

RELEASE = threading.Event()
FINISHED = threading.Event()

class Boom(gpuagent.Collector):
    name = "boom"
    def collect(self, acc):
        acc.add_fields("boom", {"partial": 1})
        raise OSError("boom: /dev/thing went away")

class Stuck(gpuagent.Collector):
    name = "stuck"
    def collect(self, acc):
        RELEASE.wait(60)
        FINISHED.set()
        acc.add_fields("stuck", {"late": 1})

class Fine(gpuagent.Collector):
    name = "fine"
    def collect(self, acc):
        acc.add_fields("fine", {"ok": True})

@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(Boom)
    register(Stuck)
    register(Fine)
"""


def test_collector_rejecting_its_config_stops_the_start_naming_plugin_and_key(plugin_file, plugins_dir, write_config):
    plugin_file("picky_plugin", PICKY)
    cfg = write_config("[collectors.picky]\nthreshold = 150\n")
    with pytest.raises(ConfigError) as err:
        build(Options(config_path=cfg, plugins_dir=str(plugins_dir), test=True))
    assert str(err.value) == (
        f"{cfg}: collectors.picky: rejected by plugin picky_plugin: threshold: must be below 100, got 150"
    )


def test_pydantic_error_from_init_is_one_line(plugin_file, plugins_dir, write_config):
    plugin_file("strict_plugin", STRICT)
    cfg = write_config('[collectors.strict]\nlimits = { low = 1, high = "lots" }\n')
    with pytest.raises(ConfigError) as err:
        build(Options(config_path=cfg, plugins_dir=str(plugins_dir), test=True))
    assert str(err.value) == (
        f'{cfg}: collectors.strict: rejected by plugin strict_plugin: high: expected an integer, got "lots"'
    )


def test_rejected_config_from_the_command_line(plugin_file, plugins_dir, write_config, cli):
    plugin_file("picky_plugin", PICKY)
    cfg = write_config("[collectors.picky]\nthreshold = 100\n")
    out = cli("run", "--once", "--test", "--plugins-dir", str(plugins_dir), "--config", str(cfg))
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.strip().splitlines()[-1] == (
        f"gpuagent: error: {cfg}: collectors.picky: rejected by plugin picky_plugin: "
        "threshold: must be below 100, got 100"
    )
    assert "Traceback" not in out.stderr


def run_once_cli(cli, plugins_dir, cfg):
    """`gpuagent run --once --test` with the plugins of plugins_dir: (the process, its stdout lines)."""
    out = cli("run", "--once", "--test", "--plugins-dir", str(plugins_dir), "--config", str(cfg), timeout=30)
    assert out.returncode == 0, out.stderr
    return out, out.stdout.splitlines()


def own_point(points, collector):
    return next(p for p in points if p.measurement == "gpuagent" and p.tags.get("collector") == collector)


def test_raising_and_hanging_collectors_are_isolated_and_counted(plugin_file, plugins_dir, write_config, capsys):
    plugin_file("misbehaving", MISBEHAVING)
    cfg = write_config("""
    [collectors.stuck]
    timeout = "300ms"
    """)
    agent = build(Options(config_path=cfg, plugins_dir=str(plugins_dir), test=True))
    module = sys.modules["gpuagent_local_plugin_misbehaving"]
    try:
        points = agent.scheduler.run_once()
        # No clock: run_once came back while the stuck collector was still stuck.
        still_stuck = not module.FINISHED.is_set()
    finally:
        module.RELEASE.set()
        agent.close(flush_timeout=1)
    assert still_stuck, "a hung collector held run_once until it finished"
    measurements = [p.measurement for p in points]
    assert measurements.count("fine") == 1 and measurements.count("host") == 1
    assert "stuck" not in measurements
    # What a collector added before it raised is kept (the GPUs it read before the one that failed).
    assert measurements.count("boom") == 1
    boom, stuck, fine = (own_point(points, n).fields for n in ("boom", "stuck", "fine"))
    assert (boom["errors_total"], boom["timeouts_total"]) == (1, 0)
    assert boom["last_error"] == "OSError: boom: /dev/thing went away"
    assert (stuck["errors_total"], stuck["timeouts_total"]) == (0, 1)
    assert stuck["last_error"] == "timed out after 0.3s"
    assert (fine["errors_total"], fine["timeouts_total"], fine["points_total"]) == (0, 0, 1)
    capsys.readouterr()


@pytest.mark.slow
def test_raising_and_hanging_collectors_from_the_command_line(plugin_file, plugins_dir, write_config, cli):
    plugin_file("misbehaving", MISBEHAVING)
    out, lines = run_once_cli(cli, plugins_dir, write_config('[collectors.stuck]\ntimeout = "300ms"\n'))
    assert any(line.startswith("fine,") for line in lines)
    assert any(line.startswith("host,") for line in lines)
    boom = next(line for line in lines if line.startswith("gpuagent,collector=boom,"))
    assert "errors_total=1i" in boom and 'last_error="OSError: boom: /dev/thing went away"' in boom
    stuck = next(line for line in lines if line.startswith("gpuagent,collector=stuck,"))
    assert "timeouts_total=1i" in stuck
    assert "collector boom: OSError: boom: /dev/thing went away" in out.stderr
    assert "collector stuck: timed out after 0.3s" in out.stderr


CANNOT_START = """
import gpuagent

class NoDevice(gpuagent.Collector):
    name = "nodevice"
    def __init__(self, config, context):
        super().__init__(config, context)
        raise OSError("/dev/widget0: No such device")
    def collect(self, acc):
        acc.add_fields("nodevice", {"never": 1})

@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(NoDevice)
"""


def test_a_collector_that_cannot_start_costs_itself_alone(plugin_file, plugins_dir, write_config, cli):
    # Not a config rejection (that stops the start, above): the agent runs without it and says so.
    plugin_file("cannot_start", CANNOT_START)
    out, lines = run_once_cli(cli, plugins_dir, write_config(""))
    assert any(line.startswith("host,") for line in lines)  # the others run
    assert not any(line.startswith("nodevice,") for line in lines)
    own = next(line for line in lines if line.startswith("gpuagent,collector=nodevice,"))
    assert 'last_error="failed to start: OSError: /dev/widget0: No such device"' in own and "started=false" in own
    assert (
        "collector nodevice (plugin cannot_start) failed to start: OSError: /dev/widget0: No such device; "
        "running without it"
    ) in out.stderr
    assert "Traceback" not in out.stderr


STUCK_SINK = """
import threading
import gpuagent

class Stuck(gpuagent.Sink):
    name = "stuck"
    def write(self, points):
        threading.Event().wait()  # a server that never answers, with no timeout

@gpuagent.hookimpl
def gpuagent_register_sinks(register):
    register(Stuck)
"""


@pytest.mark.slow
def test_a_sink_whose_write_never_returns_holds_back_nothing_else(plugin_file, plugins_dir, write_config, tmp_path):
    import os
    import signal
    import subprocess
    import time

    plugin_file("stuck_sink", STUCK_SINK)
    out = tmp_path / "out.lp"
    state = tmp_path / "state"
    cfg = write_config(
        f'interval = "200ms"\nshutdown_timeout = "2s"\nstate_dir = "{state}"\n'
        f'[sinks.stuck]\n[sinks.file]\npath = "{out}"\n'
    )
    env = {**os.environ, "GPUAGENT_CONFIG": ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "run", "--config", str(cfg), "--plugins-dir", str(plugins_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the file sink keeps receiving, cycle after cycle
            lines = out.read_text().splitlines() if out.exists() else []
            if sum(line.startswith("host,") for line in lines) >= 5:
                break
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.1)
        else:
            raise AssertionError("the file sink stopped receiving behind the stuck one")
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert time.monotonic() - stopped < 10  # shutdown_timeout, not forever
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert "sink stuck: a write has not returned within" in err, err
    assert "Traceback" not in err
