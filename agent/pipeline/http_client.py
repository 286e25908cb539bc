"""Every HTTP request of the project: one deadline for the whole request and a bounded answer.

A socket timeout is per read: a server that answers one byte at a time, or never ends a
chunked answer, keeps such a request alive for ever. Here a timer shuts the socket down once
the request as a whole (connect to last byte) has taken `timeout`, so it fails by then in the
calling thread and leaves no thread behind (the socket is kept here: on `Connection: close`
http.client lets go of it while the answer is still read from it); and no more than `limit` bytes of an answer are
read (a 500 with a 1 GiB body must not cost 1 GiB). The influxdb sink's writes (http_write: keep-alive
connections, through `exchange`), `compare`'s InfluxQL and PromQL clients (and `top --fleet`
through them) and the work collector's scrapes all go through here.

http.client is imported on the first request, not with this module: it brings ssl (4 MB) to
agents that never send over HTTP.
"""

from __future__ import annotations

import functools
import socket
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import http.client
    import ssl

MAX_BODY = 16 << 20  # what a caller that names no limit reads of an answer


@dataclass
class Answer:
    status: int
    body: bytes
    headers: Mapping[str, str] | http.client.HTTPMessage = field(default_factory=dict)  # both: .get(name)
    complete: bool = True  # the whole body was read (not cut at the limit)
    reusable: bool = False  # the connection may carry another request (keep-alive, nothing left unread)


class RequestFailed(Exception):
    """No complete HTTP answer. `reason` reads in a line: "connection refused", "no complete
    answer within 2s", "not HTTP: BadStatusLine", or the system's words."""

    def __init__(
        self,
        reason: str,
        *,
        timed_out: bool = False,
        connected: bool = False,
        answered: bool = False,
        not_http: bool = False,
    ):
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out  # the deadline (or the connect timeout) passed
        self.connected = connected  # the server took the connection: slow, not unreachable
        self.answered = answered  # a status line and headers came (the body did not, or not all)
        self.not_http = not_http  # something answered, but not in HTTP (an SSH banner, a DB port)


@functools.lru_cache(maxsize=2)
def tls_context(verify: bool = True) -> ssl.SSLContext:
    """The system's trust store; `verify=False` checks neither the certificate nor the name."""
    import ssl

    context = ssl.create_default_context()
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def connection(url: str, timeout: float, verify_tls: bool = True) -> http.client.HTTPConnection:
    """A connection (not yet open) to URL's host; http or https."""
    import http.client

    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    if parts.scheme == "https":
        return http.client.HTTPSConnection(host, parts.port, timeout=timeout, context=tls_context(verify_tls))
    return http.client.HTTPConnection(host, parts.port, timeout=timeout)


def target(url: str) -> str:
    """The request target of URL: path and query."""
    parts = urllib.parse.urlsplit(url)
    return (parts.path or "/") + ("?" + parts.query if parts.query else "")


def shutdown(conn: http.client.HTTPConnection) -> None:
    """Cut a request in flight on conn short, from any thread (its call fails at once).

    Shuts the socket `exchange` kept as well as conn.sock: on an answer that says
    `Connection: close`, getresponse() drops conn.sock while the response reads on from the
    same socket, so shutting conn.sock alone would cut nothing (issue 46). A body cut so reads
    as its end (no length was said): the mark makes exchange fail instead of answering part."""
    conn.gpuagent_cut = True  # type: ignore[attr-defined]  # this layer's marks on the connection
    for sock in {id(s): s for s in (conn.sock, getattr(conn, "gpuagent_sock", None)) if s is not None}.values():
        _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError):  # already closed for good
        pass


def exchange(
    conn: http.client.HTTPConnection,
    method: str,
    path: str,
    *,
    timeout: float,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    limit: int | Callable[[int], int] = MAX_BODY,
) -> Answer:
    """One request on conn, done or failed (RequestFailed) within `timeout` seconds in all.
    `limit`: the most bytes of the answer's body to read, or a function of its status."""
    import http.client

    fired = threading.Event()

    def cut() -> None:
        fired.set()
        shutdown(conn)

    timer = threading.Timer(timeout, cut)
    timer.daemon = True
    timer.start()
    connected = conn.sock is not None
    answered = False
    try:
        if not connected:
            conn.connect()
            connected = True
        conn.gpuagent_sock, conn.gpuagent_cut = conn.sock, False  # type: ignore[attr-defined]  # see shutdown
        if fired.is_set():  # the connect took the whole deadline, or the timer fired before the socket was kept
            raise TimeoutError("timed out")
        conn.request(method, path, body=body, headers=dict(headers or {}))
        resp = conn.getresponse()
        answered = True
        most = limit(resp.status) if callable(limit) else limit
        payload = resp.read(most)
        # One byte more says whether the body goes on: never a copy of a body cut at the limit.
        complete = len(payload) < most or not resp.read(1)
        if fired.is_set():
            raise TimeoutError("timed out")
        if conn.gpuagent_cut:  # type: ignore[attr-defined]
            raise ConnectionAbortedError("cut short by the caller")
        reusable = complete and resp.isclosed() and not resp.will_close and not fired.is_set()
        return Answer(resp.status, payload, resp.headers, complete, reusable)
    except (OSError, ValueError, http.client.HTTPException) as exc:
        conn.close()
        if fired.is_set() or isinstance(exc, TimeoutError):
            raise RequestFailed(
                f"no complete answer within {timeout:g}s" if connected else "timed out",
                timed_out=True,
                connected=connected,
                answered=answered,
            ) from None
        not_http = isinstance(exc, http.client.HTTPException) and not answered
        reason = f"not HTTP: {type(exc).__name__}" if not_http else describe(exc)
        raise RequestFailed(reason, connected=connected, answered=answered, not_http=not_http) from None
    finally:
        timer.cancel()


def request(
    method: str,
    url: str,
    *,
    timeout: float,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    limit: int | Callable[[int], int] = MAX_BODY,
    verify_tls: bool = True,
) -> Answer:
    """One request on a connection of its own, closed after: see `exchange`."""
    try:
        conn = connection(url, timeout, verify_tls)
    except ValueError as exc:  # a port that is not a number
        raise RequestFailed(str(exc) or type(exc).__name__) from None
    try:
        return exchange(conn, method, target(url), timeout=timeout, body=body, headers=headers, limit=limit)
    finally:
        conn.close()


def describe(exc: BaseException) -> str:
    """A failed connection in a few words: "connection refused", "timed out", or the system's."""
    reason = getattr(exc, "reason", None) or exc
    text = str(reason)
    if "Connection refused" in text or isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if "timed out" in text.lower():
        return "timed out"
    return f"{type(reason).__name__}: {text}"[:300]
