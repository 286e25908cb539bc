"""The spool under hostile conditions (issue 28, items 6-8), with real `gpuagent run` processes.

A file sink beside the InfluxDB sink is the record of every line the agent
produced; during an outage (a port nobody listens on) each of them must be in
the spool at stop, whatever happened to the state directory meanwhile.
"""

from __future__ import annotations

import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]


def dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed again: nobody listens there


def agent_config(
    tmp_path: Path, state: Path, url: str | None = None, extra: str = "", database: str = "gpuagent"
) -> Path:
    path = tmp_path / "gpuagent.toml"
    path.write_text(
        f'[agent]\ninterval = "200ms"\nhostname = "spool-node"\nstate_dir = "{state}"\n'
        f'[sinks.file]\npath = "{tmp_path / "record.lp"}"\n'
        f'[sinks.influxdb]\napi = "v1"\nurl = "{url or dead_url()}"\ndatabase = "{database}"\n'
        'flush_interval = "200ms"\nretry_initial_backoff = "100ms"\nretry_max_backoff = "300ms"\ntimeout = "1s"\n'
        + extra
    )
    return path


def start_agent(config: Path, log: Path, spec: str = "h100-sxm:2") -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "gpuagent", "run", "--config", str(config), "--simulate", spec],
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


def record_lines(tmp_path: Path) -> int:
    return sum(1 for line in (tmp_path / "record.lp").read_text().splitlines() if line)


def spooled_points(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT COALESCE(SUM(points), 0) FROM batches").fetchone()[0]
    finally:
        db.close()


def test_a_state_dir_deleted_during_an_outage_loses_nothing_spooled(tmp_path):
    state = tmp_path / "state"
    log = tmp_path / "agent.log"
    agent = start_agent(agent_config(tmp_path, state), log)
    spool = state / "spool" / "influxdb" / "spool.sqlite"
    try:
        wait_for(lambda: spool.exists() and record_lines(tmp_path) > 200, what="points spooled")
        for _ in range(50):  # as `rm -rf` run again: the agent may write its state file meanwhile
            try:
                shutil.rmtree(state)
                break
            except OSError:
                continue
        before = record_lines(tmp_path)
        wait_for(lambda: record_lines(tmp_path) > before + 200, what="collections after the deletion")
        wait_for(lambda: "no longer the file" in log.read_text(), what="the agent to say so")
    finally:
        stop_agent(agent, log)
    text = log.read_text()
    assert text.count("no longer the file this agent had open") == 1, text[-3000:]
    assert "it or its directory was deleted" in text
    assert spool.exists(), "a new spool is at the path"
    assert spooled_points(spool) == record_lines(tmp_path)  # every line produced is spooled: none lost


def damaged_spool(path: Path, batches: int) -> None:
    """A spool as gpuagent.pipeline.spool writes it (same schema), then 20 KB of garbage in its middle."""
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE batches (id INTEGER PRIMARY KEY AUTOINCREMENT, points INTEGER NOT NULL,"
        " bytes INTEGER NOT NULL, data BLOB NOT NULL)"
    )
    rows = ((1, len(line), line) for line in (f"old,b={i} v={i}i {i + 1}\n".encode() for i in range(batches)))
    with db:
        db.executemany("INSERT INTO batches (points, bytes, data) VALUES (?, ?, ?)", rows)
    db.close()
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size // 2)
        fh.write(b"\xa5" * 20_000)


def salvageable(path: Path, tmp_path: Path) -> set[str]:
    from gpuagent.pipeline.spool import Spool, _salvage

    copy = tmp_path / "copy.sqlite"
    shutil.copyfile(path, copy)
    lines = {
        line for item in _salvage(copy, Spool.MAX_SALVAGE_PROBES) if item for line in item[1].decode().splitlines()
    }
    copy.unlink()
    return lines


def spooled_lines(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [
            line
            for (data,) in db.execute("SELECT data FROM batches ORDER BY id")
            for line in bytes(data).decode().splitlines()
        ]
    finally:
        db.close()


def copied(path: Path) -> int:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.1)
        try:
            return db.execute("SELECT COUNT(*) FROM batches").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def test_kill_9_in_the_middle_of_a_heal_resumes_it_and_loses_no_salvageable_batch(tmp_path):
    state = tmp_path / "state"
    spool = state / "spool" / "influxdb" / "spool.sqlite"
    damaged_spool(spool, 300_000)
    want = salvageable(spool, tmp_path)
    assert 250_000 < len(want) < 300_000, len(want)  # the garbage costs some batches, not most
    config = agent_config(tmp_path, state, extra='max_spool_bytes = "1GiB"\n')
    log = tmp_path / "agent.log"
    agent = start_agent(config, log)
    try:
        aside = lambda: [p for p in spool.parent.glob("spool.*-*.sqlite")]  # noqa: E731
        wait_for(lambda: aside() and copied(spool) >= 2000, timeout=60, what="the heal to be under way")
        agent.kill()  # SIGKILL, mid-copy
        agent.wait(10)
        assert 0 < copied(spool) < len(want), "killed in the middle of the copy"
    finally:
        if agent.poll() is None:
            agent.kill()
    agent = start_agent(config, log)
    try:
        wait_for(
            lambda: list(spool.parent.glob("spool.damaged-*.sqlite")) and record_lines(tmp_path) > 50,
            timeout=120,
            what="the heal to be resumed and finished",
        )
    finally:
        stop_agent(agent, log)
    text = log.read_text()
    assert "was being healed when the agent stopped" in text, text[-3000:]
    assert not list(spool.parent.glob("spool.healing-*"))
    got = [line for line in spooled_lines(spool) if line.startswith("old,")]
    assert len(got) == len(set(got)), "no batch copied twice"
    assert set(got) == want  # every salvageable batch, once


# -- a poisoned row (issue 46, item 2) ----------------------------------------------------------


def poisoned_spool(path: Path, batches: int, not_null: bool) -> None:
    """A spool of `batches` one-point batches whose rows 20, 25 and 30 are unreadable: data NULL,
    TEXT, not UTF-8. `not_null`: the schema still says NOT NULL (PRAGMA quick_check then calls the
    file damaged); otherwise it was edited without it, and the rows are found at replay."""
    path.parent.mkdir(parents=True)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(
        "CREATE TABLE batches (id INTEGER PRIMARY KEY AUTOINCREMENT, points INTEGER NOT NULL,"
        " bytes INTEGER NOT NULL, data BLOB)"
    )
    rows = ((1, len(line), line) for line in (f"old,b={i} v={i}i {i + 1}\n".encode() for i in range(batches)))
    db.executemany("INSERT INTO batches (points, bytes, data) VALUES (?, ?, ?)", rows)
    db.execute("UPDATE batches SET data = NULL WHERE id = 20")
    db.execute("UPDATE batches SET data = 'old,b=x v=1i 1' WHERE id = 25")
    db.execute("UPDATE batches SET data = x'ff00fe' WHERE id = 30")
    if not_null:
        db.execute("PRAGMA writable_schema=ON")
        db.execute(
            "UPDATE sqlite_master SET sql = replace(sql, 'data BLOB', 'data BLOB NOT NULL') WHERE name = 'batches'"
        )
    db.close()


def last_gpuagent_field(tmp_path: Path, sink: str, field: str) -> int | None:
    found = None
    for line in (tmp_path / "record.lp").read_text().splitlines():
        if line.startswith("gpuagent,") and f"sink={sink}" in line.split(" ")[0]:
            for part in line.split(" ")[1].split(","):
                if part.startswith(f"{field}="):
                    found = int(part.split("=")[1].rstrip("i"))
    return found


@pytest.mark.servers
@pytest.mark.parametrize("not_null", [False, True], ids=["found-at-replay", "found-by-quick-check"])
def test_a_spool_row_with_null_data_is_moved_aside_and_later_batches_reach_influxd(tmp_path, influxdb_v1, not_null):
    import os

    state = tmp_path / "state"
    spool = state / "spool" / "influxdb" / "spool.sqlite"
    poisoned_spool(spool, 60, not_null)
    db = f"poisoned_{os.getpid()}_{int(not_null)}"
    influxdb_v1.create_database(db)
    log = tmp_path / "agent.log"
    agent = start_agent(agent_config(tmp_path, state, influxdb_v1.url, database=db), log)
    count = lambda q: sum(v[1] for s in influxdb_v1.query(q, db) for v in s.get("values", []))  # noqa: E731
    try:
        wait_for(lambda: count('SELECT COUNT("v") FROM "old"') >= 57, what="the batches after the bad ones")
        wait_for(lambda: count('SELECT COUNT("power_w") FROM "gpu_power"') > 0, what="new points delivered")
        wait_for(
            lambda: (last_gpuagent_field(tmp_path, "influxdb", "spool_quarantined_total") or 0) >= 3,
            what="the bad batches counted in the gpuagent measurement",
        )
    finally:
        stop_agent(agent, log)
    assert count('SELECT COUNT("v") FROM "old"') == 57  # every readable batch, the bad ones not
    text = log.read_text()
    assert "configuration" not in text and "delivery worker error" not in text, text[-3000:]
    if not_null:  # moved aside with the damaged copy, which keeps them
        assert list(spool.parent.glob("spool.damaged-*.sqlite")), text[-3000:]
    else:
        kept = sqlite3.connect(spool).execute("SELECT id, reason FROM quarantine ORDER BY id").fetchall()
        assert [i for i, _ in kept] == [20, 25, 30] and "NULL" in kept[0][1], kept
        assert "moved to its quarantine table" in text


# -- ownership (issue 28, item 7) ---------------------------------------------------------------


def nobody() -> int:
    import os
    import pwd

    if os.geteuid() != 0:
        pytest.skip("needs root to make files of another user (os.chown)")
    return pwd.getpwnam("nobody").pw_uid


@pytest.mark.servers
def test_a_spool_planted_by_another_user_is_not_replayed(tmp_path, influxdb_v1):
    """With a 0777 state dir, user nobody planted a spool whose points a root agent replayed into
    InfluxDB with its credentials. Now one line names the path, owner and mode, and it is not read."""
    import os

    uid = nobody()
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    planted = state / "spool" / "influxdb"
    from gpuagent.pipeline.spool import Spool

    spool = Spool(planted, max_bytes=10**6)
    spool.push(b"planted,by=nobody v=1i 1\n", 1)
    spool.close()
    for path in (state / "spool", planted, *planted.iterdir()):
        os.chown(path, uid, uid)
    db = f"planted_{os.getpid()}"
    influxdb_v1.create_database(db)
    log = tmp_path / "agent.log"
    agent = start_agent(agent_config(tmp_path, state, influxdb_v1.url, database=db), log)
    try:
        wait_for(lambda: influxdb_v1.query("SELECT count(power_w) FROM gpu_power", db), what="points delivered")
    finally:
        stop_agent(agent, log)
    assert influxdb_v1.query('SELECT * FROM "planted"', db) == []
    text = log.read_text()
    assert f"{planted} (owner nobody (uid {uid}), mode 0700) is owned by another user" in text, text[-3000:]
    assert_kept_where_it_must_work(tmp_path / "work")


def assert_kept_where_it_must_work(tmp_path: Path) -> None:
    """DynamicUser's /var/lib/gpuagent is a symlink into /var/lib/private (0700); a state dir
    under /tmp has a 1777 parent; a Kubernetes emptyDir is 0777. Each keeps a writable spool
    (the agent's own 0700 directories inside)."""
    from gpuagent.pipeline.spool import Spool

    private = tmp_path / "private" / "gpuagent"
    private.mkdir(parents=True, mode=0o700)
    (tmp_path / "private").chmod(0o700)
    link = tmp_path / "gpuagent"
    link.symlink_to(private)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    empty_dir = tmp_path / "emptydir"
    empty_dir.mkdir()
    empty_dir.chmod(0o777)
    for state in (link, tmp / "gpuagent-state", empty_dir):
        spool = Spool(state / "spool" / "influxdb", max_bytes=10**6)
        assert spool.writable, spool.problem
        spool.push(b"m v=1i 1\n", 1)
        spool.close()
        assert Spool(state / "spool" / "influxdb", max_bytes=10**6).points == 1
