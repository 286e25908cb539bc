"""One bounded HTTP GET: a deadline on the request as a whole, and a cap on the body."""

from __future__ import annotations

import json
from dataclasses import dataclass

from gpuagent.pipeline import http_client

MAX_BODY = 16 << 20  # a vLLM /metrics with every histogram is well under 1 MiB
ACCEPT = "text/plain;version=0.0.4"  # the Prometheus text format, not OpenMetrics


@dataclass
class Answer:
    status: int | None  # None: no HTTP answer at all (refused, timed out, not HTTP)
    body: str = ""
    error: str = ""


def get(url: str, timeout: float, accept: str = ACCEPT) -> Answer:
    """GET url within `timeout` seconds in all (gpuagent.pipeline.http_client's deadline), at most MAX_BODY."""
    try:
        answer = http_client.request(
            "GET", url, timeout=timeout, limit=MAX_BODY, headers={"Accept": accept, "User-Agent": "gpuagent-work"}
        )
    except http_client.RequestFailed as exc:
        return Answer(0 if exc.not_http else None, "", exc.reason)
    if not answer.complete:
        return Answer(answer.status, "", f"answer over {MAX_BODY >> 20} MiB")
    return Answer(answer.status, answer.body.decode("utf-8", errors="replace"))


def url_for(host: str, port: int, path: str) -> str:
    """http://HOST:PORT/PATH for a listening address; a wildcard listener is asked on loopback."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"


def tgi_model(base: str, timeout: float) -> str | None:
    """TGI's served model (GET /info: model_id); None when it does not say."""
    answer = get(base + "/info", timeout, accept="application/json")
    if answer.status != 200:
        return None
    try:
        model = json.loads(answer.body).get("model_id")
    except (ValueError, AttributeError):
        return None
    return model if isinstance(model, str) and model else None
