"""One bounded HTTP GET: a timeout on connect and on each read, and a cap on the body."""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_BODY = 16 << 20  # a vLLM /metrics with every histogram is well under 1 MiB
ACCEPT = "text/plain;version=0.0.4"  # the Prometheus text format, not OpenMetrics


@dataclass
class Answer:
    status: int | None  # None: no HTTP answer at all (refused, timed out, not HTTP)
    body: str = ""
    error: str = ""


def get(url: str, timeout: float, accept: str = ACCEPT) -> Answer:
    import http.client  # here, not at load: it brings ssl (4 MB) to agents that never scrape

    parts = urlsplit(url)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    conn = conn_cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Accept": accept, "User-Agent": "gpuagent-work"})
        resp = conn.getresponse()
        body = resp.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            return Answer(resp.status, "", f"answer over {MAX_BODY >> 20} MiB")
        return Answer(resp.status, body.decode("utf-8", errors="replace"))
    except http.client.HTTPException as exc:  # answered, but not HTTP (an SSH banner, a DB port)
        return Answer(0, "", f"not HTTP: {type(exc).__name__}")
    except (OSError, ValueError) as exc:
        return Answer(None, "", str(exc) or type(exc).__name__)
    finally:
        conn.close()


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
