"""Sending a sink's batches and settling the answers (gpuagent.pipeline.batch_sender): refusals split in halves.

The transport here is a small in-process server of the Transport protocol: it answers as InfluxDB
does (a 400 "unable to parse" naming the bad line, a 413 above a size) without a network."""

from __future__ import annotations

from gpuagent.pipeline.batch_sender import BAD_REQUEST_HINT, BatchSender, Outcome, Result, encode


class Notes:
    def __init__(self):
        self.notes = []

    def note(self, key, count, message):
        self.notes.append((key, count, message))


class Server:
    """Stores good lines; refuses a request holding a line with `bad` in it, or more than `max_lines`."""

    def __init__(self, max_lines: int = 10**6, refuse_all: str | None = None, fail: Exception | None = None):
        self.stored: list[str] = []
        self.requests = 0
        self.max_lines = max_lines
        self.refuse_all = refuse_all
        self.fail = fail

    def send(self, body: bytes, lines: int) -> Result:
        self.requests += 1
        if self.fail is not None:
            raise self.fail
        got = body.decode().splitlines()
        if self.refuse_all is not None:
            return Result(Outcome.REJECTED, 400, self.refuse_all)
        if len(got) > self.max_lines:
            return Result(Outcome.TOO_LARGE, 413, "Request Entity Too Large")
        bad = [line for line in got if "bad" in line]
        if bad:
            return Result(Outcome.REJECTED, 400, f'unable to parse "{bad[0]}": invalid field format')
        self.stored += got
        return Result(Outcome.ACCEPTED, 204)

    def close(self) -> None:
        pass


def sender(server: Server) -> BatchSender:
    return BatchSender("influxdb", server, Notes())


def lines(n: int, bad: tuple[int, ...] = ()) -> list[str]:
    return [f"m,i={i} v={'bad' if i in bad else i}" for i in range(n)]


def test_a_refused_request_is_split_until_the_bad_lines_are_alone_and_only_they_are_dropped():
    server = Server()
    s = sender(server)
    batch = lines(16, bad=(3, 11))
    sent = s.deliver(encode(batch), 16)
    assert sent.done == 1 and sent.answered and sent.failure is None
    assert sorted(server.stored) == sorted(line for line in batch if "bad" not in line)
    assert s.rejected_total == 2
    assert sent.stored == 14
    assert [key for key, _, _ in s.every_minute.notes] == ["refused:line", "refused:line"]
    assert "m,i=3 v=bad" in s.every_minute.notes[0][2]


def test_a_request_too_large_is_split_and_nothing_is_dropped():
    server = Server(max_lines=3)
    s = sender(server)
    sent = s.deliver(encode(lines(10)), 10)
    assert sent.done == 1 and sent.stored == 10
    assert server.stored == lines(10) and s.rejected_total == 0


def test_both_halves_refused_in_the_words_of_the_whole_keep_everything_as_a_server_problem():
    server = Server(refuse_all="unable to parse: everything (a gateway that says so for every request)")
    s = sender(server)
    sent = s.deliver(encode(lines(8)), 8)
    assert not sent.done and not sent.answered and sent.stored == 0
    assert server.requests == 3 and s.rejected_total == 0
    result = sent.failure
    assert sent.kept == 8 and result is not None and result.outcome is Outcome.FATAL and result.hint == BAD_REQUEST_HINT


def test_a_partial_write_drops_only_the_refused_lines_and_counts_them():
    class Partial(Server):
        def send(self, body, lines):
            return Result(Outcome.PARTIAL, 400, "partial write: dropped=2", rejected=2)

    s = sender(Partial())
    sent = s.deliver(encode(lines(5)), 5)
    assert (sent.done, sent.stored, sent.answered, sent.failure) == (1, 3, True, None) and s.rejected_total == 2
    assert s.every_minute.notes[0][:2] == ("refused:partial", 2)


def test_a_transport_that_raises_is_a_transient_failure_that_keeps_the_lines():
    s = sender(Server(fail=OSError("connection reset")))
    sent = s.deliver(encode(lines(2)), 2)
    assert not sent.done and not sent.answered
    result = sent.failure
    assert sent.kept == 2 and result is not None and result.outcome is Outcome.RETRY
    assert result.message == "OSError: connection reset"


def test_two_batches_at_once_stop_at_the_first_failure():
    server = Server()
    s = sender(server)
    good = (encode(lines(3)), 3)
    sent = s.deliver_two(good, good)
    assert (sent.done, sent.stored) == (2, 6) and len(server.stored) == 6

    class SecondFails(Server):
        def send(self, body, lines):
            return Result(Outcome.RETRY, 503, "busy") if b"i=9" in body else super().send(body, lines)

    s = sender(SecondFails())
    sent = s.deliver_two(good, (encode(lines(10)), 10))
    assert (sent.done, sent.stored, sent.kept) == (1, 3, 10) and sent.failure is not None
    sent = s.deliver_two((encode(lines(10)), 10), good)
    assert (sent.done, sent.stored, sent.answered) == (0, 0, False)  # what follows a failure is sent again later
    s.close()


def test_a_lone_refused_line_is_done_with_and_says_the_server_answered():
    s = sender(Server())
    sent = s.deliver(encode(lines(1, bad=(0,))), 1)
    # Nothing stored, yet the server is up: the owner ends an outage on `answered`, not on `stored`.
    assert (sent.done, sent.stored, sent.answered, sent.failure) == (1, 0, True, None) and s.rejected_total == 1
