"""The retry timing of a sink (gpuagent.pipeline.backoff): doubling, jitter, Retry-After, fatal answers, outages."""

from __future__ import annotations

import logging

from gpuagent.pipeline.backoff import RETRY_AFTER_CAP, Backoff, Outage
from gpuagent.pipeline.batch_sender import Outcome, Result


def no_jitter(low: float, high: float) -> float:
    return 1.0


def test_transient_failures_double_the_wait_up_to_the_cap_and_a_success_starts_over():
    backoff = Backoff(1.0, 8.0, uniform=no_jitter)
    assert [backoff.after_failure() for _ in range(6)] == [1, 2, 4, 8, 8, 8]
    backoff.reset()
    assert backoff.after_failure() == 1.0


def test_each_wait_is_drawn_within_20_percent_so_a_fleet_does_not_retry_in_lock_step():
    waits = {Backoff(10.0, 60.0).after_failure() for _ in range(200)}
    assert all(8.0 <= w <= 12.0 for w in waits) and len(waits) > 100


def test_retry_after_lengthens_a_wait_never_shortens_it_and_is_capped():
    backoff = Backoff(4.0, 60.0, uniform=no_jitter)
    assert backoff.after_failure(retry_after=0.0) == 4.0  # "now" must not turn into a busy loop
    assert backoff.after_failure(retry_after=45.0) == 45.0
    assert backoff.after_failure(retry_after=10**6) == RETRY_AFTER_CAP  # beyond max_backoff, up to the cap
    assert Backoff(4.0, 900.0, uniform=no_jitter).after_failure(retry_after=10**6) == 900.0


def test_a_fatal_answer_waits_the_maximum_and_leaves_the_doubling_where_it_was():
    backoff = Backoff(1.0, 30.0, uniform=no_jitter)
    assert backoff.after_failure() == 1.0
    assert backoff.after_failure(fatal=True) == 30.0
    assert backoff.after_failure(fatal=True, retry_after=5.0) == 30.0
    assert backoff.after_failure() == 2.0


def test_the_maximum_is_never_below_the_initial_wait():
    assert Backoff(5.0, 1.0).maximum == 5.0


def test_an_outage_logs_once_when_it_starts_then_debug_lines_and_ends_once(caplog):
    outage = Outage("influxdb", logging.getLogger("test.outage"), 0.5, 2.0)
    down = Result(Outcome.RETRY, 503, "Service Unavailable")
    with caplog.at_level(logging.DEBUG, logger="test.outage"):
        for _ in range(3):
            outage.failed(down, fatal=False, keeping=10)
    levels = [r.levelno for r in caplog.records]
    assert levels == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert "HTTP 503: Service Unavailable" in caplog.records[0].getMessage()
    assert outage.active and outage.errors_total == 3 and outage.last_error == "HTTP 503: Service Unavailable"
    assert outage.ended() is True and not outage.active and outage.last_error == ""
    assert outage.ended() is False  # a success outside an outage ends nothing


def test_a_fatal_answer_says_what_to_check_once_per_reason(caplog):
    outage = Outage("influxdb", logging.getLogger("test.fatal"), 1.0, 60.0)
    with caplog.at_level(logging.DEBUG, logger="test.fatal"):
        outage.failed(Result(Outcome.FATAL, 401, "unauthorized"), fatal=True, keeping=1200)
        outage.failed(Result(Outcome.FATAL, 401, "unauthorized"), fatal=True, keeping=1300)
        outage.failed(Result(Outcome.FATAL, 404, "database not found"), fatal=True, keeping=1400)
        outage.failed(Result(Outcome.FATAL, 400, "bad", hint="look at the proxy"), fatal=True, keeping=1)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3 and all(r.levelno == logging.ERROR for r in caplog.records)
    assert "check the token" in messages[0] and "keeping 1200 points and retrying every 60s" in messages[0]
    assert "database / bucket / org does not exist" in messages[1]
    assert "look at the proxy" in messages[2]  # the answer's own hint replaces the status's
