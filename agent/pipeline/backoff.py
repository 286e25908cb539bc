"""When a sink tries a failed write again: capped doubling with jitter, Retry-After, fatal answers, outages."""

from __future__ import annotations

import email.utils
import logging
import random
import time
from collections.abc import Callable

# What the operator should check when the server refuses the writer, not the lines (HTTP status -> hint).
FATAL_HINTS = {
    401: "check the token / credentials",
    403: "the token lacks write permission",
    404: "the database / bucket / org does not exist",
}
RETRY_AFTER_CAP = 300.0  # the longest wait a Retry-After can ask for where max_backoff is shorter


def parse_retry_after(headers) -> float | None:
    """Seconds a Retry-After header (delay-seconds or an HTTP date, RFC 9110 10.2.3) asks to wait."""
    if not headers:
        return None
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if not value:
        return None
    value = str(value).strip()
    if value.isdigit():
        return float(value)
    if value.startswith("-") and value[1:].isdigit():  # not valid, but means "now"
        return 0.0
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class Backoff:
    """The wait before the next try. Each transient failure doubles it from `initial` up to `maximum`,
    drawn within ±20% so a fleet does not retry in lock-step; a Retry-After can lengthen a wait, never
    shorten it (a 0 or a date in the past must not turn the backoff into a busy loop). A fatal answer
    (one the operator must fix) waits `maximum` every time and leaves the doubling where it was."""

    def __init__(self, initial: float, maximum: float, uniform: Callable[[float, float], float] = random.uniform):
        self.initial = initial
        self.maximum = max(maximum, initial)
        self._uniform = uniform
        self._next = initial

    def after_failure(self, *, fatal: bool = False, retry_after: float | None = None) -> float:
        if fatal:
            return self.maximum
        delay = self._next * self._uniform(0.8, 1.2)
        self._next = min(self._next * 2, self.maximum)
        if retry_after is not None:
            delay = max(delay, min(retry_after, max(self.maximum, RETRY_AFTER_CAP)))
        return delay

    def reset(self) -> None:
        """After a success: the next failure waits `initial` again."""
        self._next = self.initial


class Outage:
    """Whether a sink's writes are failing, and when to try again: one log line when an outage starts
    (and per new reason of a fatal one), debug lines for the retries between."""

    def __init__(self, name: str, log: logging.Logger, initial: float, maximum: float, target: str = ""):
        self.name = name
        # Where the writes go (a URL, credentials masked), named in the lines about failed writes.
        self.target = f" to {target}" if target else ""
        self.log = log
        self.backoff = Backoff(initial, maximum)
        self.active = False
        self.retry_at = 0.0  # time.monotonic() of the next try
        self.last_error = ""
        self.errors_total = 0

    def failed(self, result, *, fatal: bool, keeping: int) -> None:
        """A write failed with `result` (status, message, hint, retry_after); `keeping` points wait."""
        self.errors_total += 1
        reason = f"HTTP {result.status}: {result.message[:300]}" if result.status else result.message[:300]
        delay = self.backoff.after_failure(fatal=fatal, retry_after=result.retry_after)
        if fatal and reason != self.last_error:
            self.log.error(
                "%s: write%s refused, %s (%s); keeping %d points and retrying every %gs",
                self.name,
                self.target,
                result.hint or FATAL_HINTS.get(result.status or 0, ""),
                reason,
                keeping,
                delay,
            )
        elif not fatal and not self.active:
            self.log.warning(
                "%s: write%s failed (%s); spooling and retrying in %.1fs", self.name, self.target, reason, delay
            )
        elif not fatal:
            self.log.debug("%s: retry failed (%s); next in %.1fs", self.name, reason, delay)
        self.last_error = reason
        self.active = True
        self.retry_at = time.monotonic() + delay

    def ended(self) -> bool:
        """A write succeeded; True when that ends an outage."""
        was, self.active, self.last_error = self.active, False, ""
        self.backoff.reset()
        return was
