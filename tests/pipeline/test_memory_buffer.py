"""Lines a sink keeps in memory (gpuagent.pipeline.memory_buffer): bounded, oldest dropped and counted."""

from __future__ import annotations

from gpuagent.pipeline.memory_buffer import MemoryBuffer


class Notes:
    def __init__(self):
        self.notes: list[tuple[str, int, str]] = []

    def note(self, key: str, count: int, message: str) -> None:
        self.notes.append((key, count, message))


def lines(*numbers: int) -> list[str]:
    return [f"m v={n}i" for n in numbers]


def test_more_than_max_points_drops_the_oldest_counts_and_notes_them():
    notes = Notes()
    buf = MemoryBuffer(3, "influxdb", notes)
    assert buf.add(lines(1, 2)) == 0 and not notes.notes
    assert buf.add(lines(3, 4, 5)) == 2
    assert buf.take_all() == lines(3, 4, 5) and len(buf) == 0
    assert buf.dropped_total == 2
    assert notes.notes == [("memory-full", 2, notes.notes[0][2])]
    assert "influxdb: memory buffer is full (3 points)" in notes.notes[0][2]


def test_requeued_lines_go_back_in_front_in_order_and_are_the_oldest_to_drop():
    buf = MemoryBuffer(4, "s", Notes())
    buf.add(lines(5, 6))
    assert buf.requeue(lines(1, 2, 3)) == 1  # 1 is the oldest of all
    assert buf.take_all() == lines(2, 3, 5, 6)


def test_the_in_flight_batch_counts_as_pending_and_is_spooled_once_at_stop():
    buf = MemoryBuffer(10, "s", Notes())
    buf.add(lines(1, 2, 3, 4))
    assert buf.take(3) == lines(1, 2, 3)
    assert len(buf) == 1 and buf.pending == 4 and buf.inflight == lines(1, 2, 3)
    assert buf.take_for_spool() == lines(1, 2, 3, 4)  # the request may still be waiting on the server
    buf.add(lines(5))
    assert buf.take_for_spool() == lines(5)  # its copy is kept once only
    assert buf.sent() is True and buf.inflight is None and buf.pending == 0
    buf.add(lines(6))
    buf.take(5)
    assert buf.sent() is False  # nothing kept a copy: the sender must spool it if it failed


def test_drop_all_counts_what_is_lost():
    buf = MemoryBuffer(10, "s", Notes())
    buf.add(lines(1, 2))
    assert buf.drop_all() == 2 and buf.dropped_total == 2 and len(buf) == 0
