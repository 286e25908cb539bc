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


def sender(server: Server):
    heard = []
    s = BatchSender(
        "influxdb",
        server,
        Notes(),
        lambda n, replay: heard.append(("stored", n, replay)),
        lambda result, n: heard.append(("failed", n, result)),
    )
    return s, heard


def lines(n: int, bad: tuple[int, ...] = ()) -> list[str]:
    return [f"m,i={i} v={'bad' if i in bad else i}" for i in range(n)]


def test_a_refused_request_is_split_until_the_bad_lines_are_alone_and_only_they_are_dropped():
    server = Server()
    s, heard = sender(server)
    batch = lines(16, bad=(3, 11))
    assert s.deliver(encode(batch), 16, replay=True)
    assert sorted(server.stored) == sorted(line for line in batch if "bad" not in line)
    assert s.rejected_total == 2
    assert sum(n for kind, n, _ in heard if kind == "stored") == 14
    assert all(kind == "stored" and replay for kind, _, replay in heard)
    assert [key for key, _, _ in s.every_minute.notes] == ["refused:line", "refused:line"]
    assert "m,i=3 v=bad" in s.every_minute.notes[0][2]


def test_a_request_too_large_is_split_and_nothing_is_dropped():
    server = Server(max_lines=3)
    s, heard = sender(server)
    assert s.deliver(encode(lines(10)), 10)
    assert server.stored == lines(10) and s.rejected_total == 0


def test_both_halves_refused_in_the_words_of_the_whole_keep_everything_as_a_server_problem():
    server = Server(refuse_all="unable to parse: everything (a gateway that says so for every request)")
    s, heard = sender(server)
    assert not s.deliver(encode(lines(8)), 8)
    assert server.requests == 3 and s.rejected_total == 0
    ((kind, n, result),) = heard
    assert kind == "failed" and n == 8 and result.outcome is Outcome.FATAL and result.hint == BAD_REQUEST_HINT


def test_a_partial_write_drops_only_the_refused_lines_and_counts_them():
    class Partial(Server):
        def send(self, body, lines):
            return Result(Outcome.PARTIAL, 400, "partial write: dropped=2", rejected=2)

    s, heard = sender(Partial())
    assert s.deliver(encode(lines(5)), 5)
    assert heard == [("stored", 3, False)] and s.rejected_total == 2
    assert s.every_minute.notes[0][:2] == ("refused:partial", 2)


def test_a_transport_that_raises_is_a_transient_failure_that_keeps_the_lines():
    s, heard = sender(Server(fail=OSError("connection reset")))
    assert not s.deliver(encode(lines(2)), 2)
    ((kind, n, result),) = heard
    assert kind == "failed" and n == 2 and result.outcome is Outcome.RETRY
    assert result.message == "OSError: connection reset"


def test_two_batches_at_once_stop_at_the_first_failure():
    server = Server()
    s, heard = sender(server)
    good = (encode(lines(3)), 3)
    assert s.deliver_two(good, good) == 2 and len(server.stored) == 6

    class SecondFails(Server):
        def send(self, body, lines):
            return Result(Outcome.RETRY, 503, "busy") if b"i=9" in body else super().send(body, lines)

    s, heard = sender(SecondFails())
    assert s.deliver_two(good, (encode(lines(10)), 10)) == 1
    assert s.deliver_two((encode(lines(10)), 10), good) == 0  # what follows a failure is sent again later
    s.close()
