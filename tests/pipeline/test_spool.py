"""The durable spool (gpuagent.pipeline.spool)."""

from __future__ import annotations

import pytest

from gpuagent.pipeline.spool import Spool
from gpuagent.units import parse_bytes


def batch(seq: int, points: int = 10) -> bytes:
    return "".join(f"m,b={seq} v={i}i {seq * 1000 + i}\n" for i in range(points)).encode()


def test_batches_come_back_oldest_first_joined_up_to_max_points(tmp_path):
    spool = Spool(tmp_path, max_bytes=10**6)
    for seq in range(5):
        spool.push(batch(seq), 10)
    last_id, points, data = spool.peek(25)  # whole batches only: two fit in 25
    assert points == 20 and data == batch(0) + batch(1)
    assert spool.remove_through(last_id) == 20
    assert spool.points == 30 and spool.bytes == 3 * len(batch(2))
    last_id, points, data = spool.peek(5)  # at least one batch, even when larger than max_points
    assert points == 10 and data == batch(2)


def test_contents_survive_reopening(tmp_path):
    spool = Spool(tmp_path, max_bytes=10**6)
    spool.push(batch(1), 10)
    spool.push(batch(2), 10)
    del spool  # no close(): as after kill -9
    again = Spool(tmp_path, max_bytes=10**6)
    assert again.points == 20 and again.bytes == 2 * len(batch(1))
    assert again.peek(100)[2] == batch(1) + batch(2)


def test_full_spool_drops_the_oldest_first_and_counts_exactly(tmp_path):
    size = len(batch(1))  # batches 1..8 have the same size
    spool = Spool(tmp_path, max_bytes=size * 3 + size // 2)  # room for 3 batches
    dropped = [spool.push(batch(seq, 10), 10) for seq in (1, 2, 3)]
    assert dropped == [0, 0, 0]
    assert spool.push(batch(4), 10) == 10  # batch 1 goes
    assert spool.push(batch(5), 10) == 10  # then batch 2
    assert spool.dropped_total == 20
    assert spool.points == 30 and spool.bytes <= spool.max_bytes
    assert spool.peek(1000)[2] == batch(3) + batch(4) + batch(5)
    # A batch larger than the whole spool cannot be kept: it is the one dropped.
    assert spool.push(batch(9, 100), 100) == 100
    assert spool.dropped_total == 120 and spool.points == 30


@pytest.mark.parametrize(
    "text, size", [(1024, 1024), ("512MiB", 512 * 2**20), ("1GB", 10**9), ("100 kB", 100_000), ("1.5KiB", 1536)]
)
def test_sizes(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("text", ["big", "-1", 0, True, "1 parsec"])
def test_bad_sizes(text):
    with pytest.raises(ValueError):
        parse_bytes(text)


# -- a spool that heals, a spool that cannot be written ------------------------------------------

import contextlib  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402

from gpuagent.pipeline.spool import SpoolError  # noqa: E402


def filled(directory, batches: int = 60, points: int = 40) -> int:
    spool = Spool(directory, max_bytes=10**8)
    for seq in range(batches):
        spool.push(batch(seq, points), points)
    total = spool.points
    spool.close()
    return total


def damage(path, how: str) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        if how == "middle":
            fh.seek(size // 2 - 10_000)
            fh.write(os.urandom(20_000))
        elif how == "half":
            fh.truncate(size // 2)
        elif how == "header":
            fh.write(os.urandom(100))


@pytest.mark.parametrize("how", ["middle", "half", "header"])
def test_a_damaged_spool_is_moved_aside_salvaged_and_replaced(tmp_path, caplog, how):
    total = filled(tmp_path)
    damage(tmp_path / Spool.FILENAME, how)
    with caplog.at_level(logging.ERROR, logger="gpuagent.pipeline.spool"):
        spool = Spool(tmp_path, max_bytes=10**8)
    assert spool.available and spool.writable and spool.damaged_total == 1
    aside = list(tmp_path.glob("spool.damaged-*.sqlite"))
    assert len(aside) == 1
    errors = [r.getMessage() for r in caplog.records]
    assert len(errors) == 1 and aside[0].name in errors[0] and "batches" in errors[0], errors
    # What could be read is there, each batch intact; the rest is gone, not garbled.
    salvaged = spool.points
    if how == "header":  # a rebuilt header reads every batch back
        assert salvaged == total
    else:
        assert 0 < salvaged < total, "a file damaged in one place still has readable batches"
    peeked = spool.peek(10**6)
    if salvaged:
        lines = peeked[2].decode().splitlines()
        assert len(lines) == salvaged and all(line.startswith("m,b=") for line in lines)
    # And the fresh spool takes new batches.
    spool.push(batch(999), 10)
    assert spool.points == salvaged + 10
    spool.close()
    assert Spool(tmp_path, max_bytes=10**8).points == salvaged + 10  # and keeps them


@contextlib.contextmanager
def mounted(path, options: str):
    """A tmpfs (or a read-only bind mount) at path; skips where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a small file system needs root")
    done = subprocess.run(["mount", *options.split(), str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_disk_full_refuses_the_batch_and_moves_no_counter(tmp_path):
    with mounted(tmp_path / "small", "-t tmpfs -o size=1m tmpfs") as small:
        spool = Spool(small, max_bytes=10**8)
        kept = 0
        with pytest.raises(SpoolError, match="disk full"):
            for seq in range(10_000):
                spool.push(batch(seq, 100), 100)
                kept += 100
        assert kept > 0 and spool.points == kept  # the failed batch counted nowhere
        assert spool.problem == "disk full" and not spool.writable
        # Delivered batches whose delete may not fit either: never handed out again.
        last_id, points, _ = spool.peek(1000)
        spool.remove_through(last_id)
        assert spool.points == kept - points
        nxt = spool.peek(1000)
        assert nxt is None or nxt[0] > last_id
        spool.close()


def test_a_read_only_spool_is_replayed_once_and_refuses_new_batches(tmp_path):
    state = tmp_path / "state"
    total = filled(state, batches=5, points=10)
    with mounted(tmp_path / "ro", f"--bind -o ro {state}") as ro:
        # A plain ro bind needs a remount to take effect on some kernels.
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True)
        spool = Spool(ro, max_bytes=10**8)
        assert spool.available and not spool.writable and spool.points == total
        with pytest.raises(SpoolError):
            spool.push(batch(100), 10)
        seen = 0
        while (got := spool.peek(20)) is not None:
            spool.remove_through(got[0])  # cannot be deleted: remembered as delivered
            seen += got[1]
        assert seen == total and spool.points == 0
        spool.close()


def test_damage_found_while_running_heals_without_stopping_delivery(tmp_path, caplog):
    total = filled(tmp_path)
    spool = Spool(tmp_path, max_bytes=10**8)
    spool._db.execute("PRAGMA cache_size=1")  # read pages from the file again, as after cache pressure
    damage(tmp_path / Spool.FILENAME, "middle")
    with caplog.at_level(logging.ERROR, logger="gpuagent.pipeline.spool"):
        delivered = 0
        while (got := spool.peek(40)) is not None:
            spool.remove_through(got[0])
            delivered += got[1]
    assert spool.damaged_total == 1 and 0 < delivered < total
    assert sum("was damaged" in r.getMessage() for r in caplog.records) == 1
    spool.push(batch(1), 10)  # the fresh spool takes over
    assert spool.points == 10


def test_a_spool_file_replaced_under_the_agent_is_followed_with_every_batch(tmp_path, caplog):
    """Issue 28, item 6: the path no longer being the open file (device and inode) is noticed at the
    next operation, said once, and the batches the old file held move into the file at the path."""
    spool = Spool(tmp_path / "s", max_bytes=10**8)
    for seq in range(5):
        spool.push(batch(seq), 10)
    other = tmp_path / "other.sqlite"
    Spool(tmp_path / "o", max_bytes=10**8).close()
    os.replace(tmp_path / "o" / Spool.FILENAME, spool.path)
    with caplog.at_level(logging.ERROR, logger="gpuagent.pipeline.spool"):
        spool.push(batch(5), 10)
        spool.push(batch(6), 10)
    errors = [r.getMessage() for r in caplog.records]
    assert len(errors) == 1 and "the file was replaced" in errors[0] and "5 batches (50 points)" in errors[0], errors
    assert spool.points == 70 and spool.writable
    spool.close()
    again = Spool(tmp_path / "s", max_bytes=10**8)
    lines = again.peek(10**6)[2].decode().splitlines()
    assert len(lines) == 70 and lines[0].startswith("m,b=0")
    again.close()
    assert not other.exists()


def test_a_deleted_spool_dir_that_cannot_be_made_again_keeps_the_batches_and_says_so_once(tmp_path, caplog):
    import shutil

    directory = tmp_path / "state" / "spool"
    spool = Spool(directory, max_bytes=10**8)
    spool.push(batch(0), 10)
    shutil.rmtree(tmp_path / "state")
    (tmp_path / "state").write_text("a file where the state dir was")  # mkdir cannot succeed
    with caplog.at_level(logging.ERROR, logger="gpuagent.pipeline.spool"):
        for seq in (1, 2, 3):
            spool.push(batch(seq), 10)  # into the old, deleted file: readable until stop
        assert not spool.writable and "no new spool can be made" in spool.problem
        assert len(caplog.records) == 1, [r.getMessage() for r in caplog.records]
        (tmp_path / "state").unlink()
        spool.REOPEN_EVERY = 0  # the next operation tries again
        spool.push(batch(4), 10)
    assert spool.writable and spool.points == 50
    assert "4 batches (40 points) it held were moved into it" in caplog.records[-1].getMessage()
    spool.close()
    assert Spool(directory, max_bytes=10**8).points == 50


def test_an_unreadable_batch_is_quarantined_and_the_ones_after_it_go_on(tmp_path, caplog):
    import sqlite3

    spool = Spool(tmp_path, max_bytes=10**6)
    for i in range(5):
        spool.push(batch(i, points=2), 2)
    spool.close()
    db = sqlite3.connect(tmp_path / Spool.FILENAME, isolation_level=None)
    db.execute("PRAGMA writable_schema=ON")  # a file edited by hand: the schema lost its NOT NULL
    db.execute("UPDATE sqlite_master SET sql = replace(sql, ' NOT NULL', '') WHERE name = 'batches'")
    db.close()
    db = sqlite3.connect(tmp_path / Spool.FILENAME, isolation_level=None)
    db.execute("UPDATE batches SET data = NULL WHERE id = 2")
    db.execute("UPDATE batches SET points = NULL WHERE id = 4")
    db.close()
    spool = Spool(tmp_path, max_bytes=10**6)
    with caplog.at_level(logging.ERROR):
        last, points, data = spool.peek(100)
    assert (last, points) == (5, 6) and data == batch(0, 2) + batch(2, 2) + batch(4, 2)
    assert spool.quarantined_total == 2 and spool.points == 6
    assert "moved to its quarantine table" in caplog.text and "its data is NULL" in caplog.text
    assert spool.remove_through(last) == 6 and spool.peek(100) is None
    spool.push(batch(9, 1), 1)  # the drop loop and the totals take a NULL in their stride
    assert spool.peek(100)[1] == 1


def test_an_unreadable_batch_in_a_read_only_spool_is_skipped_and_not_counted(tmp_path, monkeypatch):
    import sqlite3

    spool = Spool(tmp_path, max_bytes=10**6)
    for i in range(3):
        spool.push(batch(i, points=2), 2)
    spool.close()
    db = sqlite3.connect(tmp_path / Spool.FILENAME, isolation_level=None)
    db.execute("PRAGMA writable_schema=ON")
    db.execute("UPDATE sqlite_master SET sql = replace(sql, ' NOT NULL', '') WHERE name = 'batches'")
    db.close()
    db = sqlite3.connect(tmp_path / Spool.FILENAME, isolation_level=None)
    db.execute("UPDATE batches SET data = NULL WHERE id = 3")  # the tail: nothing readable after it
    db.close()
    spool = Spool(tmp_path, max_bytes=10**6)
    monkeypatch.setattr(spool, "_quarantine", lambda db, bad: False)  # as on a read-only file system
    last, points, _ = spool.peek(100)
    assert (last, points) == (2, 4) and spool.points == 4  # the bad batch is not counted as spooled
    assert spool.remove_through(last) == 4 and spool.points == 0
    assert spool.peek(100) is None  # and is not found again: no busy replay loop
