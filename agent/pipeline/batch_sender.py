"""Sending one sink's batches through a Transport, and settling what each answer means for the lines."""

from __future__ import annotations

import enum
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol


class Outcome(enum.Enum):
    ACCEPTED = "accepted"  # 2xx: everything stored
    PARTIAL = "partial"  # stored except `rejected` lines; never resend
    REJECTED = "rejected"  # 400/422 for the whole request: split to find the bad lines
    TOO_LARGE = "too_large"  # 413: split, drop nothing
    RETRY = "retry"  # connection error, timeout, 5xx, 429, other 4xx: try again later
    FATAL = "fatal"  # 401/403/404: needs the operator; keep the data, retry slowly, log loudly


@dataclass
class Result:
    outcome: Outcome
    status: int | None = None
    message: str = ""
    retry_after: float | None = None
    rejected: int = 0
    hint: str = ""  # what the operator should check, for a FATAL answer (replaces the status's own hint)


class Transport(Protocol):
    """send() must return within its whole-request deadline (the sink's `timeout`), whatever the server
    does; abort() (optional) cuts requests in flight short, from another thread, at stop."""

    def send(self, body: bytes, lines: int) -> Result: ...

    def close(self) -> None: ...


BAD_REQUEST_HINT = (
    "the server refuses the request itself, not its lines (is the url right? http:// sent to an https "
    "port, a proxy or a firewall answers 400 like this)"
)


def encode(lines: list[str]) -> bytes:
    """Line-protocol lines (no newline) as one request body."""
    return ("\n".join(lines) + "\n").encode("utf-8")


@dataclass
class Sent:
    """What sending one or two batches came to, for the owner to act on: `done` batches (in order) are
    done with, `stored` of their lines stored by the server; `answered` when the server took any of
    them (stored or refused: it is up, an outage is over); `failure`, after those, the answer that
    keeps the `kept` lines of the first batch not done with (sent again later)."""

    done: int = 0
    stored: int = 0
    answered: bool = False
    failure: Result | None = None
    kept: int = 0


class BatchSender:
    """Sends batches and settles each answer. A refusal of the whole request (REJECTED) or a 413
    (TOO_LARGE) is split in halves until the offending lines are alone: those are dropped, counted in
    `rejected_total` and logged through `every_minute` (a note(key, count, message)) once per kind a
    minute. What came of it is returned (Sent), for the owner to count and to time its retries."""

    def __init__(self, name: str, transport: Transport, every_minute):
        self.name = name
        self.transport = transport
        self.every_minute = every_minute
        self.rejected_total = 0
        self._pool: ThreadPoolExecutor | None = None  # the second request of deliver_two

    def send(self, body: bytes, count: int) -> Result:
        try:
            return self.transport.send(body, count)
        except Exception as exc:  # a transport bug must not lose data: treat as transient
            return Result(Outcome.RETRY, None, f"{type(exc).__name__}: {exc}")

    def deliver(self, body: bytes, count: int) -> Sent:
        """Send `count` lines; done (1) when they are done with (stored, or refused by the server)."""
        sent = Sent()
        if self._settle(self.send(body, count), body, count, sent):
            sent.done = 1
        return sent

    def deliver_two(self, first: tuple[bytes, int], second: tuple[bytes, int]) -> Sent:
        """Send two batches at once, (body, count) each; done: how many of them, in order, are done with.
        The server parses one while it receives the other, which nearly doubles a replay's rate into a
        server with cores to spare."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"gpuagent-replay-{self.name}")
        later = self._pool.submit(self.send, *second)
        results = [self.send(*first), later.result()]
        sent = Sent()
        for (body, count), result in zip((first, second), results, strict=True):
            # Stop at the first failure: what follows is sent again (a duplicate the server
            # may already hold is harmless), counted then.
            if not self._settle(result, body, count, sent):
                break
            sent.done += 1
        return sent

    def _settle(self, result: Result, body: bytes, count: int, sent: Sent) -> bool:
        """What `result`, the answer to `body`, means for its lines, added to `sent`; True when they are
        done with."""
        if result.outcome in (Outcome.ACCEPTED, Outcome.PARTIAL):
            if result.outcome is Outcome.PARTIAL:
                self._refused(result.rejected, result)
            sent.stored += count - (result.rejected if result.outcome is Outcome.PARTIAL else 0)
            sent.answered = True
            return True
        if result.outcome in (Outcome.REJECTED, Outcome.TOO_LARGE):
            # split("\n"), not splitlines(): a CR or a form feed inside a line is not a line break.
            return self._split([line for line in body.decode("utf-8").split("\n") if line], result, sent)
        sent.failure, sent.kept = result, count
        return False

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        self.transport.close()

    def _split(self, lines: list[str], result: Result, sent: Sent) -> bool:
        if len(lines) <= 1:
            # Alone and still refused: this line is the bad one (or too large to ever fit).
            self._refused(len(lines), result, lines[0] if lines else "")
            sent.answered = True
            return True
        mid = len(lines) // 2
        # A transient failure of either half keeps the whole batch: resending a half
        # the server already took only writes the same points again.
        first, second = encode(lines[:mid]), encode(lines[mid:])
        got_first = self.send(first, mid)
        if result.outcome is Outcome.REJECTED and _alike(got_first, result):
            got_second = self.send(second, len(lines) - mid)
            if _alike(got_second, result):
                # Both halves refused in the words of the whole: the server refuses requests,
                # not lines (InfluxDB names each bad line). Keep everything, as for a 401.
                sent.failure = Result(Outcome.FATAL, result.status, result.message, hint=BAD_REQUEST_HINT)
                sent.kept = len(lines)
                return False
            return self._settle(got_first, first, mid, sent) and self._settle(
                got_second, second, len(lines) - mid, sent
            )
        if not self._settle(got_first, first, mid, sent):
            return False
        return self._settle(self.send(second, len(lines) - mid), second, len(lines) - mid, sent)

    def _refused(self, count: int, result: Result, line: str | None = None) -> None:
        self.rejected_total += count
        what = "lines of a partial write" if line is None else f"a line, e.g. {line[:300]!r}"
        self.every_minute.note(
            "refused:partial" if line is None else "refused:line",
            count,
            f"{self.name}: server refused {what} (HTTP {result.status}): {result.message[:500]}; dropped",
        )


def _alike(got: Result, whole: Result) -> bool:
    return got.outcome is Outcome.REJECTED and got.status == whole.status and got.message == whole.message
