"""The InfluxDB write API (gpuagent.pipeline.http_write): what each answer means, the request's target
and Authorization (the real servers' side is plugins/influxdb/tests)."""

from __future__ import annotations

import base64
import email.utils
import time

import pytest

from gpuagent.pipeline.backoff import parse_retry_after
from gpuagent.pipeline.batch_sender import Outcome
from gpuagent.pipeline.http_write import ANSWER_BYTES, answer_limit, authorization, classify_http, write_path


@pytest.mark.parametrize(
    "status, body, outcome, rejected",
    [
        (204, b"", Outcome.ACCEPTED, 0),
        (
            400,
            b'{"error":"partial write: unable to parse \'x y\': invalid field format dropped=0"}',
            Outcome.PARTIAL,
            1,
        ),
        (400, b'{"error":"partial write: field type conflict: input field \\"v\\" dropped=3"}', Outcome.PARTIAL, 3),
        (400, b'{"error":"field type conflict"}', Outcome.REJECTED, 0),
        (422, b'{"code":"unprocessable entity"}', Outcome.REJECTED, 0),
        (400, b'{"error":"unable to parse \'x y\': invalid field format"}', Outcome.REJECTED, 0),
        # Not InfluxDB's line error: a server problem, nothing dropped (issue 28).
        (400, b"<html><title>400 The plain HTTP request was sent to HTTPS port</title></html>", Outcome.FATAL, 0),
        (400, b"", Outcome.FATAL, 0),
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


def test_a_partial_write_is_counted_from_the_whole_message_and_a_redirect_names_its_location():
    refused = "\n".join(
        f"unable to parse 'gpu_power,gpu={i},host=node-1 {'x' * 300}': bad timestamp" for i in range(40)
    )
    result = classify_http(400, f'{{"error":"partial write: {refused} dropped=0"}}'.encode(), {})
    assert result.rejected == 40 and len(result.message) == 2000  # before: 6, counted after the cut
    moved = classify_http(307, b"", {"Location": "https://influx:8086/write"})
    assert moved.outcome is Outcome.RETRY and "redirected to https://influx:8086/write" in moved.message


def test_retry_after_seconds_and_http_date():
    assert classify_http(429, b"", {"Retry-After": "7"}).retry_after == 7.0
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= parse_retry_after({"Retry-After": when}) <= 31
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None


def test_the_write_target_of_each_api_keeps_the_urls_path_as_a_prefix():
    assert write_path("http://h:8086", "v2", "", "gpus", "", "") == "/api/v2/write?org=-&bucket=gpus&precision=ns"
    assert write_path("https://h/influx/", "v2", "ops", "db/rp", "", "") == (
        "/influx/api/v2/write?org=ops&bucket=db%2Frp&precision=ns"
    )
    assert write_path("http://h:8086", "v1", "", "", "gpus", "") == "/write?db=gpus&precision=ns"
    assert write_path("http://h:8086", "v1", "", "", "gpus", "week") == "/write?db=gpus&precision=ns&rp=week"


def basic(pair: str) -> str:
    return "Basic " + base64.b64encode(pair.encode()).decode()


def test_authorization_a_token_then_a_username_then_the_urls_credentials():
    assert authorization("http://u:p@h", "v2", "tok", "", "") == "Token tok"
    # InfluxDB 1.8's v2 compatibility takes "user:password" as its token; v1 takes Basic auth.
    assert authorization("http://h", "v2", None, "ann", "pw") == "Token ann:pw"
    assert authorization("http://h", "v1", None, "ann", "pw") == basic("ann:pw")
    assert authorization("http://ann%40lab:p%3Aw@h", "v1", None, "", "") == basic("ann@lab:p:w")
    assert authorization("http://h", "v2", None, "", "") is None


def test_a_refusal_may_be_read_as_long_as_what_was_sent_any_other_answer_is_cut_short():
    assert answer_limit(500, 10**6, 5000) == ANSWER_BYTES
    assert answer_limit(400, 10**6, 5000) > 10**6 and answer_limit(422, 10, 1) > ANSWER_BYTES
