"""`gpuagent run` on a simulated 8-GPU H100 machine, delivering to real servers.

A file sink beside the InfluxDB sink is the record of truth: every line the
agent produced. To check that each line reached InfluxDB (tags, time, values
and field types), the file is written to a second database of the same
influxd and the two are compared row for row.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.servers, pytest.mark.slow]

TOKEN = "agent-T0KEN-never-printed-9931"
SPEC = "h100-sxm:8"


def agent_config(tmp_path: Path, sink_table: str, interval: str = "500ms", hostname: str = "sim-node") -> Path:
    path = tmp_path / "gpuagent.toml"
    path.write_text(
        f"""[agent]
interval = "{interval}"
hostname = "{hostname}"
state_dir = "{tmp_path / "state"}"

[sinks.file]
path = "{tmp_path / "record.lp"}"

{sink_table}
"""
    )
    path.chmod(0o600)
    return path


def v1_table(server, database: str | None = None, **extra) -> str:
    options = {
        "api": "v1",
        "url": server.url,
        "database": database or server.database,
        "flush_interval": "200ms",
        "flush_jitter": 0,
        "retry_initial_backoff": "100ms",
        "retry_max_backoff": "500ms",
        "timeout": "2s",
        **extra,
    }
    return "[sinks.influxdb]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in options.items())


def _toml(value) -> str:
    return str(value).lower() if isinstance(value, bool) else (str(value) if isinstance(value, int) else f'"{value}"')


def gpuagent(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuagent", *args], capture_output=True, text=True, timeout=120, **kwargs
    )


def start_agent(config: Path, log: Path) -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "gpuagent", "run", "--config", str(config), "--simulate", SPEC],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )


def stop_agent(proc: subprocess.Popen, log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, log.read_text()[-3000:]


def wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def file_lines(path: Path, upto: int | None = None) -> list[str]:
    data = path.read_bytes()[:upto]
    return [line for line in data.decode().splitlines() if line]


def rows(server, db: str) -> dict[tuple, dict]:
    out = {}
    for s in server.query("SELECT * FROM /.*/ GROUP BY *", db):
        tags = tuple(sorted((k, v) for k, v in s.get("tags", {}).items() if v != ""))
        for values in s["values"]:
            row = dict(zip(s["columns"], values, strict=True))
            t = row.pop("time")
            out[(s["name"], tags, t)] = {k: v for k, v in row.items() if v is not None}
    return out


def field_types(server, db: str) -> dict[tuple, str]:
    return {(s["name"], k): t for s in server.query("SHOW FIELD KEYS", db) for k, t in s["values"]}


_truth_dbs = iter(range(10**6))


def assert_lost_at_most_the_interval_in_flight(server, before_kill, interval_ns):
    """Every row the file sink recorded before a kill -9 is stored, but those of the last interval."""
    missing = missing_from_influx(server, before_kill)
    last = max(int(line.rsplit(" ", 1)[1]) for line in before_kill)
    late = [key for key in missing if key[2] < last - interval_ns]
    assert late == [], f"{len(late)} rows collected before the kill were lost, e.g. {late[:3]}"


def missing_from_influx(server, lines: list[str], db: str | None = None) -> list[tuple]:
    """The rows of `lines` that the database lacks or holds differently (values or field types)."""
    truth = f"truth_{next(_truth_dbs)}_{os.getpid()}"
    server.create_database(truth)
    for i in range(0, len(lines), 5000):
        server.write(lines[i : i + 5000], truth)
    want, have = rows(server, truth), rows(server, db or server.database)
    assert len(want) > 0
    types_want, types_have = field_types(server, truth), field_types(server, db or server.database)
    assert all(types_have.get(k) == t for k, t in types_want.items()), "field types differ"
    return sorted(k for k, fields in want.items() if have.get(k) != fields)


# -- the two paths, every point of an 8-GPU run ---------------------------------------------


def test_run_once_v1_every_line_reaches_influxdb_1x(tmp_path, influxdb_v1):
    db = f"agent_once_{os.getpid()}"
    influxdb_v1.create_database(db)
    config = agent_config(tmp_path, v1_table(influxdb_v1, db))
    result = gpuagent("run", "--config", str(config), "--simulate", SPEC, "--once")
    assert result.returncode == 0, result.stderr
    lines = file_lines(tmp_path / "record.lp")
    assert len(lines) > 8 * 10
    gpu_lines = [line for line in lines if line.startswith("gpu_")]
    assert {line.split("gpu=")[1].split(",")[0] for line in gpu_lines} == {str(i) for i in range(8)}
    assert missing_from_influx(influxdb_v1, lines, db) == []


def test_run_once_v2_every_line_reaches_victoria_metrics(tmp_path, victoria_metrics):
    host = f"sim-v2-{os.getpid()}"
    table = (
        f'[sinks.influxdb]\nurl = "{victoria_metrics.url}"\norg = "fleet"\nbucket = "gpus"\n'
        f'token = "{TOKEN}"\nflush_interval = "200ms"\n'
    )
    config = agent_config(tmp_path, table, hostname=host)
    result = gpuagent("run", "--config", str(config), "--simulate", SPEC, "--once")
    assert result.returncode == 0, result.stderr
    assert TOKEN not in result.stderr + result.stdout
    lines = file_lines(tmp_path / "record.lp")
    # The same lines through VictoriaMetrics' own /write (label db="truth") are the reference.
    import urllib.request

    urllib.request.urlopen(
        urllib.request.Request(
            f"{victoria_metrics.url}/write?db=truth", data=("\n".join(lines) + "\n").encode(), method="POST"
        ),
        timeout=10,
    )
    expected = victoria_metrics.export(f'{{host="{host}",db="truth"}}', min_samples=1)
    n = sum(len(s["timestamps"]) for s in expected)
    want = {
        (tuple(sorted((k, v) for k, v in s["metric"].items() if k != "db")), t, v)
        for s in expected
        for t, v in zip(s["timestamps"], s["values"], strict=True)
    }
    got_series = victoria_metrics.export(f'{{host="{host}",db=""}}', min_samples=n)
    got = {
        (tuple(sorted(s["metric"].items())), t, v)
        for s in got_series
        for t, v in zip(s["timestamps"], s["values"], strict=True)
    }
    assert n > 8 * 20
    assert want - got == set()


# -- outage and crash -----------------------------------------------------------------------


def test_outage_every_line_of_the_file_reaches_influxdb(tmp_path, influxdb_v1_factory):
    server = influxdb_v1_factory()
    config = agent_config(tmp_path, v1_table(server))
    log = tmp_path / "agent.log"
    record = tmp_path / "record.lp"
    agent = start_agent(config, log)
    try:
        wait_for(lambda: record.exists() and record.stat().st_size > 0, what="first collection")
        time.sleep(1.5)
        server.stop()
        size_at_stop = record.stat().st_size
        wait_for(lambda: record.stat().st_size > size_at_stop + 20_000, what="collections during the outage")
        time.sleep(2)
        spool = tmp_path / "state" / "spool" / "influxdb" / "spool.sqlite"
        assert spool.exists()
        server.start()
        time.sleep(2.5)
    finally:
        stop_agent(agent, log)
    lines = file_lines(record)
    assert len(lines) > 1000
    assert missing_from_influx(server, lines) == []
    text = log.read_text()
    assert "spooling" in text and "accepting writes again" in text


def test_kill_9_during_an_outage_then_restart_delivers_all_but_the_interval_in_flight(tmp_path, influxdb_v1_factory):
    server = influxdb_v1_factory()
    interval_ns = 500_000_000
    config = agent_config(tmp_path, v1_table(server))
    log = tmp_path / "agent.log"
    record = tmp_path / "record.lp"
    agent = start_agent(config, log)
    try:
        wait_for(lambda: record.exists() and record.stat().st_size > 0, what="first collection")
        time.sleep(1)
        server.stop()
        size_at_stop = record.stat().st_size
        wait_for(lambda: record.stat().st_size > size_at_stop + 30_000, what="collections during the outage")
        time.sleep(2.5)  # several intervals collected while the server is away
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
    before_kill = file_lines(record)
    killed_at = record.stat().st_size
    # Started again while the server is still down, then the server comes back.
    agent = start_agent(config, log)
    try:
        wait_for(lambda: record.stat().st_size > killed_at, what="restarted agent collecting")
        time.sleep(1)
        server.start()
        wait_for(lambda: "accepting writes again" in log.read_text(), what="replay")
        time.sleep(2)
    finally:
        stop_agent(agent, log)
    assert_lost_at_most_the_interval_in_flight(server, before_kill, interval_ns)
    # And what the second run collected arrived too.
    assert missing_from_influx(server, file_lines(record)[len(before_kill) :]) == []


# -- secrets --------------------------------------------------------------------------------


def test_token_is_in_no_log_line_error_or_config_show(tmp_path):
    table = (
        f'[sinks.influxdb]\nurl = "http://127.0.0.1:9"\nbucket = "b"\ntoken = "{TOKEN}"\n'
        'flush_interval = "100ms"\nretry_initial_backoff = "100ms"\n'
    )
    config = agent_config(tmp_path, table)
    shown = gpuagent("config", "show", str(config))
    assert shown.returncode == 0, shown.stderr
    assert "token" in shown.stdout and TOKEN not in shown.stdout + shown.stderr
    # A run that fails to deliver (nothing listens on port 9) and logs at debug level.
    run = gpuagent("run", "--config", str(config), "--simulate", "h100-sxm:1", "--once", "--log-level", "debug")
    assert run.returncode == 0, run.stderr
    assert "spool" in run.stderr and TOKEN not in run.stdout + run.stderr
    # A config error in the same table.
    config.write_text(config.read_text().replace('bucket = "b"', 'bucket = "b"\ntoken_file = "/nonexistent"'))
    bad = gpuagent("config", "check", str(config))
    assert bad.returncode != 0 and "token" in bad.stderr and TOKEN not in bad.stdout + bad.stderr
    # ${VAR} from the environment is masked the same way.
    config.write_text(
        config.read_text()
        .replace(f'token = "{TOKEN}"', 'token = "${GPUAGENT_TEST_TOKEN}"')
        .replace('token_file = "/nonexistent"\n', "")
    )
    env = {**os.environ, "GPUAGENT_TEST_TOKEN": TOKEN}
    shown = gpuagent("config", "show", str(config), env=env)
    assert shown.returncode == 0, shown.stderr
    assert TOKEN not in shown.stdout + shown.stderr


# -- faults: a damaged spool, kill -9 with the server up, secrets on reload ------------------------


def influx_rows_after(server, t_ns: int) -> int:
    got = server.points(f'SELECT count("power_w") FROM "gpu_power" WHERE time > {t_ns}')
    return got[0]["count"] if got else 0


@pytest.mark.parametrize("how", ["middle", "half"])
def test_a_damaged_spool_heals_the_agent_starts_and_new_points_arrive_within_seconds(
    tmp_path, influxdb_v1_factory, how
):
    server = influxdb_v1_factory()
    server.stop()
    config = agent_config(tmp_path, v1_table(server))
    log = tmp_path / "agent.log"
    record = tmp_path / "record.lp"
    agent = start_agent(config, log)
    spool = tmp_path / "state" / "spool" / "influxdb" / "spool.sqlite"
    try:
        wait_for(lambda: record.exists() and record.stat().st_size > 150_000, what="an outage's worth of spool")
    finally:
        stop_agent(agent, log)
    size = spool.stat().st_size
    assert size > 100_000
    with open(spool, "r+b") as fh:  # 20 KB of garbage in the middle, or the second half gone
        if how == "middle":
            fh.seek(size // 2 - 10_000)
            fh.write(os.urandom(20_000))
        else:
            fh.truncate(size // 2)
    server.start()
    restarted = time.time_ns()
    agent = start_agent(config, log)
    try:
        wait_for(lambda: influx_rows_after(server, restarted) >= 8, timeout=20, what="new points in InfluxDB")
    finally:
        stop_agent(agent, log)
    text = log.read_text()
    damaged = [line for line in text.splitlines() if "was damaged" in line]
    assert len(damaged) == 1 and "spool.damaged-" in damaged[0] and "could be read out of it" in damaged[0]
    assert "worker error" not in text and "Traceback" not in text
    assert list(spool.parent.glob("spool.damaged-*.sqlite"))
    # Everything the second run collected reached InfluxDB.
    second_run = [line for line in file_lines(record) if int(line.rsplit(" ", 1)[1]) > restarted]
    assert second_run and missing_from_influx(server, second_run) == []


def test_kill_9_with_the_server_up_loses_at_most_the_interval_in_flight(tmp_path, influxdb_v1_factory):
    import random

    server = influxdb_v1_factory()
    interval_ns = 500_000_000
    # flush_interval 10s: without write-ahead a kill -9 lost up to 10 s of points.
    config = agent_config(tmp_path, v1_table(server, flush_interval="10s", flush_jitter="0s"))
    log = tmp_path / "agent.log"
    record = tmp_path / "record.lp"
    agent = start_agent(config, log)
    try:
        wait_for(lambda: record.exists() and record.stat().st_size > 0, what="first collection")
        time.sleep(random.uniform(2.0, 6.0))
    finally:
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
    before_kill = file_lines(record)
    agent = start_agent(config, log)  # the restart replays what the spool held
    try:
        wait_for(lambda: "from an earlier run" in log.read_text(), what="replay at start")
        time.sleep(2)
    finally:
        stop_agent(agent, log)
    assert_lost_at_most_the_interval_in_flight(server, before_kill, interval_ns)


def test_a_numeric_password_is_never_echoed_at_start_or_on_reload(tmp_path, influxdb_v1):
    secret = "31415926535"
    config = agent_config(tmp_path, v1_table(influxdb_v1))
    bad = config.read_text().replace("database = ", f'username = "u"\npassword = {secret}\ndatabase = ')
    log = tmp_path / "agent.log"
    agent = start_agent(config, log)
    try:
        wait_for(lambda: "first collection" in log.read_text(), what="start")
        config.write_text(bad)
        agent.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload failed" in log.read_text(), what="the failed reload")
    finally:
        stop_agent(agent, log)
    text = log.read_text()
    assert "sinks.influxdb.password" in text and secret not in text
    check = gpuagent("config", "check", str(config))
    assert check.returncode == 1 and secret not in check.stdout + check.stderr


def test_credentials_inside_the_url_are_in_no_log_line(tmp_path):
    table = (
        '[sinks.influxdb]\nurl = "http://admin:URL-S3CRET@127.0.0.1:9"\napi = "v1"\ndatabase = "d"\n'
        'flush_interval = "100ms"\nretry_initial_backoff = "100ms"\n'
    )
    config = agent_config(tmp_path, table)
    run = gpuagent("run", "--config", str(config), "--simulate", "h100-sxm:1", "--once", "--log-level", "debug")
    assert run.returncode == 0, run.stderr
    assert "spool" in run.stderr and "URL-S3CRET" not in run.stdout + run.stderr
    shown = gpuagent("config", "show", str(config))
    assert "URL-S3CRET" not in shown.stdout and "admin:***@" in shown.stdout


def test_a_full_state_disk_at_start_does_not_stop_the_agent(tmp_path, influxdb_v1):
    import shutil
    import subprocess as sp

    state = tmp_path / "state"
    state.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small file system needs root")
    mounted = sp.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(state)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount here: {mounted.stderr.strip()}")
    try:
        fd = os.open(state / "filler", os.O_WRONLY | os.O_CREAT)  # the disk is full before the agent starts
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"x" * 4096)
        os.close(fd)
        db = f"full_disk_{os.getpid()}"
        influxdb_v1.create_database(db)
        config = agent_config(tmp_path, v1_table(influxdb_v1, db))
        run = gpuagent("run", "--config", str(config), "--simulate", "h100-sxm:2", "--once")
    finally:
        sp.run(["umount", "-l", str(state)], capture_output=True)
    assert run.returncode == 0, run.stderr
    assert "memory" in run.stderr and "Traceback" not in run.stderr
    assert missing_from_influx(influxdb_v1, file_lines(tmp_path / "record.lp"), db) == []
