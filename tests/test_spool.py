"""The durable spool (gpuagent.spool) and the HTTP answer classification (gpuagent.delivery)."""

from __future__ import annotations

import email.utils
import time

import pytest

from gpuagent.delivery import Outcome, classify_http, parse_retry_after
from gpuagent.spool import Spool, parse_bytes


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


@pytest.mark.parametrize(
    "status, body, outcome, rejected",
    [
        (204, b"", Outcome.ACCEPTED, 0),
        (400, b'{"error":"partial write: unable to parse \'x y\': invalid field format dropped=0"}', Outcome.PARTIAL, 1),
        (400, b'{"error":"partial write: field type conflict: input field \\"v\\" dropped=3"}', Outcome.PARTIAL, 3),
        (400, b'{"error":"field type conflict"}', Outcome.REJECTED, 0),
        (422, b'{"code":"unprocessable entity"}', Outcome.REJECTED, 0),
        (413, b"", Outcome.TOO_LARGE, 0),
        (401, b"", Outcome.FATAL, 0),
        (403, b"", Outcome.FATAL, 0),
        (404, b'{"error":"database not found"}', Outcome.FATAL, 0),
        (429, b"", Outcome.RETRY, 0),
        (500, b"", Outcome.RETRY, 0),
        (503, b"", Outcome.RETRY, 0),
    ],
)
def test_http_answers(status, body, outcome, rejected):
    result = classify_http(status, body, {})
    assert result.outcome is outcome and result.rejected == rejected


def test_retry_after_seconds_and_http_date():
    assert classify_http(429, b"", {"Retry-After": "7"}).retry_after == 7.0
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= parse_retry_after({"Retry-After": when}) <= 31
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None
