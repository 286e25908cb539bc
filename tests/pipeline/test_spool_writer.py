"""Committing a sink's lines to its spool (gpuagent.pipeline.spool_writer), memory taking them while it cannot."""

from __future__ import annotations

import logging
import threading

from gpuagent.pipeline.memory_buffer import MemoryBuffer
from gpuagent.pipeline.spool import Spool
from gpuagent.pipeline.spool_writer import SpoolWriter


class Notes:
    def __init__(self):
        self.notes = []

    def note(self, key, count, message):
        self.notes.append((key, count, message))


def writer(spool: Spool, batch_size: int = 2, max_points: int = 100):
    notes = Notes()
    memory = MemoryBuffer(max_points, "s", notes)
    return SpoolWriter("s", spool, batch_size, memory, threading.Condition(), logging.getLogger("test.sw"), notes)


def lines(n: int) -> list[str]:
    return [f"m v={i}i {i}" for i in range(n)]


def test_lines_are_committed_in_batches_of_batch_size(tmp_path):
    spool = Spool(tmp_path, max_bytes=10**6)
    w = writer(spool, batch_size=2)
    assert w.ready and w.write(lines(5)) == []
    assert spool.points == 5 and len(spool) == 3  # batches of 2, 2 and 1
    assert spool.peek(100)[2].decode().splitlines() == lines(5)


def test_a_spool_that_cannot_be_written_leaves_the_lines_in_memory_and_says_so_once(tmp_path, caplog):
    spool = Spool(tmp_path, max_bytes=10**6)
    w = writer(spool)
    assert w.write(lines(2)) == []
    spool.close()  # gone under the running sink
    with caplog.at_level(logging.WARNING, logger="test.sw"):
        assert w.write(lines(3)) == lines(3)  # handed back, not lost
        w.keep(lines(4))
        w.keep(lines(2))
        w.note_state()
    assert not w.ready
    assert w.memory.take_all() == lines(2) + lines(4)  # each keep put its lines in front
    errors = [r.getMessage() for r in caplog.records]
    assert len(errors) == 1 and "cannot write the spool" in errors[0] and "at most 100" in errors[0]


def test_the_state_at_start_is_the_openers_to_report(tmp_path, caplog):
    (tmp_path / "a-file").write_text("")
    spool = Spool(tmp_path / "a-file" / "state", max_bytes=10**6)  # cannot even be created
    w = writer(spool)
    with caplog.at_level(logging.WARNING, logger="test.sw"):
        w.note_state()
        assert not w.ready and w.write(lines(1)) == lines(1)
    assert not caplog.records


def test_spill_moves_memory_to_the_spool_and_the_spool_being_writable_again_is_said(tmp_path, caplog):
    (tmp_path / "state").write_text("")  # a file where the spool's directory should be
    spool = Spool(tmp_path / "state", max_bytes=10**6)
    w = writer(spool)
    w.memory.add(lines(3))
    with caplog.at_level(logging.WARNING, logger="test.sw"):
        w.spill(at_stop=True)  # fails: back in memory
        assert len(w.memory) == 3
        (tmp_path / "state").unlink()
        spool.REOPEN_EVERY = 0.0
        spool.reopen_if_due()
        w.spill()  # not ready yet: paused after the failure
        assert len(w.memory) == 3
        w._retry_at = 0.0  # the pause is over
        w.spill()
    assert len(w.memory) == 0 and spool.points == 3
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "can be written again" in messages[0]  # its state at start was the opener's


def test_a_full_spool_notes_the_points_it_dropped(tmp_path):
    spool = Spool(tmp_path, max_bytes=300)
    w = writer(spool, batch_size=5)
    assert w.write(lines(50)) == []
    dropped = sum(count for key, count, _ in w.every_minute.notes if key == "spool-full")
    assert dropped == spool.dropped_total > 0
