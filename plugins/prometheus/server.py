"""A small HTTP server for /metrics that stays bounded under load.

A fixed pool of worker threads (`max_connections`) serves connections from a
bounded queue (`queue_size`); a connection that finds the queue full gets an
immediate 503 and is closed, so 1,500 slow clients cost neither 1,500
threads nor memory. Each connection has one deadline (`request_timeout`)
for reading the request and writing the answer together, so a client that
drips or never reads is cut off. The body is the renderer's cached bytes:
scrapes never wait for a collection and a collection never waits for them.
The listen backlog is 128 (the kernel's usual somaxconn floor), not 5.
With TLS the handshake happens in the worker, under the same deadline, never
in the accept thread. /healthz and /readyz answer before basic auth (a
kubelet's probe carries no password); everything else needs it when it is on.
close() is quick whatever the clients do (a reload builds a new server on the
same port at once): it shuts the listening socket down, which wakes the
thread blocked in accept() (a plain close() does not, on Linux), and cuts the
connections being served.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

BACKLOG = 128
MAX_REQUEST_HEAD = 16 * 1024
_CHUNK = 64 * 1024
CLOSE_TIMEOUT = 2.0  # seconds close() waits for its threads

log = logging.getLogger("gpuagent.sink.prometheus")


class DeadlineExceeded(Exception):
    pass


class MetricsServer:
    def __init__(
        self,
        host: str,
        port: int,
        render: Callable[[], bytes],
        render_gzip: Callable[[], bytes],
        content_type: str,
        max_connections: int = 8,
        queue_size: int = 64,
        request_timeout: float = 10.0,
        tls: Callable[[], ssl.SSLContext] | None = None,
        auth: Callable[[str | None], bool] | None = None,
        probes: dict[str, Callable[[], tuple[bool, str]]] | None = None,
    ):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._key = (host, port)
        try:
            self.socket = socket.create_server((host, port), family=family, backlog=BACKLOG)
        except OSError:
            # A reload builds the new agent beside the running one: take over the listening socket
            # of this process's server on the same address, so /metrics, /healthz and /readyz
            # never stop answering (the old one hands over what it accepts as it closes).
            running = _running(self._key)
            if running is None:
                raise
            self.socket = running.socket.dup()
        self.address = self.socket.getsockname()[:2]
        self.render, self.render_gzip, self.content_type = render, render_gzip, content_type
        self.request_timeout = request_timeout
        self.tls, self.auth, self.probes = tls, auth, dict(probes or {})
        # Room for the workers' stop sentinels beyond the bound the accept thread keeps (it alone puts).
        self._queue_size = queue_size
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size + max_connections)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._serving: set[socket.socket] = set()  # connections a worker holds, cut at close()
        self.requests_total = 0
        self.refused_total = 0
        self.timeouts_total = 0
        self.unauthorized_total = 0
        self.handshake_failures_total = 0
        self._threads = [threading.Thread(target=self._accept, name="prometheus-accept", daemon=True)]
        self._threads += [
            threading.Thread(target=self._work, name=f"prometheus-http-{n}", daemon=True)
            for n in range(max_connections)
        ]

    def start(self) -> None:
        if self._key[1]:
            with _SERVERS_LOCK:
                _SERVERS.setdefault(self._key, []).append(self)
        for t in self._threads:
            t.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.socket.accept()
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.01)  # EMFILE and the like: do not spin
                continue
            if self._stop.is_set():  # closing, the socket shared with a successor: it serves this one
                successor = _running(self._key)
                if successor is None or not successor._take(conn):
                    conn.close()
                return
            if self._queue.qsize() >= self._queue_size:
                self.refused_total += 1
                _refuse(conn)
            else:
                self._queue.put_nowait((conn, time.monotonic()))

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            conn, accepted = item
            with self._lock:
                if self._stop.is_set():  # a successor on the shared socket serves it, if there is one
                    successor = _running(self._key)
                    if successor is None or not successor._take(conn):
                        conn.close()
                    continue
                self._serving.add(conn)
            held = [conn]  # the TLS socket replaces it once wrapped: the one to close
            deadline = accepted + self.request_timeout
            try:
                if self.tls is not None:
                    self._handshake(self.tls, held, deadline)
                self._serve(held[0], deadline)
            except DeadlineExceeded:
                self.timeouts_total += 1
            except OSError:
                pass
            except Exception as exc:  # never lose a worker
                log.error("/metrics: %s", exc)
            finally:
                with self._lock:
                    self._serving.discard(held[0])
                held[0].close()

    def _handshake(self, tls: Callable[[], ssl.SSLContext], held: list, deadline: float) -> None:
        with self._lock:  # close() must find the socket that now owns the descriptor
            raw = held[0]
            conn = tls().wrap_socket(raw, server_side=True, do_handshake_on_connect=False)
            self._serving.discard(raw)
            self._serving.add(conn)
            held[0] = conn
            if self._stop.is_set():
                raise OSError("closing")
        _settimeout(conn, deadline)
        try:
            conn.do_handshake()
        except TimeoutError:
            raise DeadlineExceeded from None
        except (_ssl_error(), ConnectionError):
            self.handshake_failures_total += 1  # plain HTTP, an unknown CA, no client certificate
            raise OSError("handshake failed") from None

    def _serve(self, conn: socket.socket, deadline: float) -> None:
        head = b""
        while b"\r\n\r\n" not in head and b"\n\n" not in head:
            _settimeout(conn, deadline)
            try:
                chunk = conn.recv(4096)
            except TimeoutError:
                raise DeadlineExceeded from None
            if not chunk:
                return
            head += chunk
            if len(head) > MAX_REQUEST_HEAD:
                _send(conn, _response(431, b"request head too large\n"), deadline)
                return
        self.requests_total += 1
        request_line, _, rest = head.decode("latin-1").partition("\n")
        parts = request_line.split()
        method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
        headers = _headers(rest)
        if method not in ("GET", "HEAD"):
            _send(conn, _response(405, b"only GET and HEAD\n", extra="Allow: GET, HEAD\r\n"), deadline)
            return
        route = path.split("?", 1)[0]
        head_only = method == "HEAD"
        probe = self.probes.get(route)
        if probe is not None:
            ok, text = probe()
            _send(conn, _response(200 if ok else 503, text.encode(), head_only=head_only), deadline)
            return
        if self.auth is not None and not self.auth(headers.get("authorization")):
            self.unauthorized_total += 1
            _send(
                conn,
                _response(
                    401, b"unauthorized\n", extra='WWW-Authenticate: Basic realm="gpuagent"\r\n', head_only=head_only
                ),
                deadline,
            )
            return
        if route == "/":
            body = b'<html><body><a href="/metrics">/metrics</a></body></html>\n'
            _send(conn, _response(200, body, "text/html; charset=utf-8", head_only=method == "HEAD"), deadline)
            return
        if route != "/metrics":
            _send(conn, _response(404, b"not found: try /metrics\n"), deadline)
            return
        gz = "gzip" in headers.get("accept-encoding", "").lower()
        body = self.render_gzip() if gz else self.render()
        extra = "Content-Encoding: gzip\r\n" if gz else ""
        _send(conn, _response(200, body, self.content_type, extra, method == "HEAD"), deadline)

    def _wake_accept(self, timeout: float) -> None:
        """Connect to the shared socket until this server's accept thread has returned (a
        connection the successor accepts instead is an empty request: it reads EOF, closes)."""
        accept = self._threads[0]
        host, port = self.address[:2]
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
        deadline = time.monotonic() + timeout
        while accept.is_alive() and time.monotonic() < deadline:
            try:  # a bare connect, no request: nothing here talks HTTP (see gpuagent.pipeline.http_client)
                with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as knock:
                    knock.settimeout(0.5)
                    knock.connect((host, port))
            except OSError:
                pass
            accept.join(0.05)

    def _take(self, conn: socket.socket) -> bool:
        if self._stop.is_set() or self._queue.qsize() >= self._queue_size:
            return False
        self._queue.put_nowait((conn, time.monotonic()))
        return True

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Stop serving and free the port within `timeout` (the threads are daemons: one that a
        stuck send still holds past it cannot keep the port, nor the agent, from going on).
        A successor sharing the listening socket keeps it open: this one's accept() is woken by
        a connection of its own instead of a shutdown, which would stop the successor's too."""
        with _SERVERS_LOCK:
            mine = _SERVERS.get(self._key, [])
            if self in mine:
                mine.remove(self)
            shared = bool(mine)
        with self._lock:
            self._stop.set()
            serving = list(self._serving)
        if shared:  # requests in flight finish (the workers stop after them); none is cut
            self._wake_accept(timeout)
            serving = []
        for sock in ([] if shared else [self.socket]) + serving:
            try:
                # The plain socket's shutdown, also for a TLS one: SSLSocket.shutdown would drop its
                # TLS state under the thread still reading it.
                socket.socket.shutdown(sock, socket.SHUT_RDWR)  # wakes accept() / recv() / send()
            except OSError:
                pass
        try:
            self.socket.close()
        except OSError:
            pass
        while True:  # connections still queued: nobody will serve them
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                successor = _running(self._key) if shared else None
                if successor is None or not successor._take(item[0]):
                    item[0].close()
        for _ in self._threads[1:]:
            self._queue.put_nowait(None)  # the queue is empty and holds more than the workers
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))


_SERVERS: dict[tuple[str, int], list[MetricsServer]] = {}  # started and not closed, by (host, port) asked
_SERVERS_LOCK = threading.Lock()


def _running(key: tuple[str, int]) -> MetricsServer | None:
    with _SERVERS_LOCK:
        live = _SERVERS.get(key) or []
        return live[-1] if live else None


def _settimeout(conn: socket.socket, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded
    conn.settimeout(left)


def _send(conn: socket.socket, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        _settimeout(conn, deadline)
        try:
            sent = conn.send(view[:_CHUNK])
        except TimeoutError:
            raise DeadlineExceeded from None
        view = view[sent:]


def _headers(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


_REASONS = {
    200: "OK",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}


def _response(
    status: int, body: bytes, content_type: str = "text/plain; charset=utf-8", extra: str = "", head_only: bool = False
) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
    ).encode()
    return head if head_only else head + body


def _refuse(conn: socket.socket) -> None:
    """503 without waiting: the accept thread must never block on one client."""
    try:
        conn.setblocking(False)
        conn.send(_response(503, b"too many scrapes at once\n", extra="Retry-After: 1\r\n"))
    except OSError:
        pass
    finally:
        conn.close()


def _ssl_error() -> type[Exception]:
    """ssl.SSLError, imported where a TLS handshake happens (ssl is loaded by then): the module is
    not imported by an agent that serves plain HTTP."""
    import ssl

    return ssl.SSLError
