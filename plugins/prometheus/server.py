"""A small HTTP server for /metrics that stays bounded under load.

A fixed pool of worker threads (`max_connections`) serves connections from a
bounded queue (`queue_size`); a connection that finds the queue full gets an
immediate 503 and is closed, so 1,500 slow clients cost neither 1,500
threads nor memory. Each connection has one deadline (`request_timeout`)
for reading the request and writing the answer together, so a client that
drips or never reads is cut off. The body is the renderer's cached bytes:
scrapes never wait for a collection and a collection never waits for them.
The listen backlog is 128 (the kernel's usual somaxconn floor), not 5.
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
    ):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=BACKLOG)
        self.address = self.socket.getsockname()[:2]
        self.render, self.render_gzip, self.content_type = render, render_gzip, content_type
        self.request_timeout = request_timeout
        # Room for the workers' stop sentinels beyond the bound the accept thread keeps (it alone puts).
        self._queue_size = queue_size
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size + max_connections)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._serving: set[socket.socket] = set()  # connections a worker holds, cut at close()
        self.requests_total = 0
        self.refused_total = 0
        self.timeouts_total = 0
        self._threads = [threading.Thread(target=self._accept, name="prometheus-accept", daemon=True)]
        self._threads += [
            threading.Thread(target=self._work, name=f"prometheus-http-{n}", daemon=True)
            for n in range(max_connections)
        ]

    def start(self) -> None:
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
                if self._stop.is_set():
                    conn.close()
                    continue
                self._serving.add(conn)
            try:
                self._serve(conn, accepted + self.request_timeout)
            except DeadlineExceeded:
                self.timeouts_total += 1
            except OSError:
                pass
            except Exception as exc:  # never lose a worker
                log.error("/metrics: %s", exc)
            finally:
                with self._lock:
                    self._serving.discard(conn)
                conn.close()

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
        headers = rest.lower()
        if method not in ("GET", "HEAD"):
            _send(conn, _response(405, b"only GET and HEAD\n", extra="Allow: GET, HEAD\r\n"), deadline)
            return
        route = path.split("?", 1)[0]
        if route == "/":
            body = b'<html><body><a href="/metrics">/metrics</a></body></html>\n'
            _send(conn, _response(200, body, "text/html; charset=utf-8", head_only=method == "HEAD"), deadline)
            return
        if route != "/metrics":
            _send(conn, _response(404, b"not found: try /metrics\n"), deadline)
            return
        gz = "accept-encoding:" in headers and "gzip" in headers.split("accept-encoding:", 1)[1].split("\n", 1)[0]
        body = self.render_gzip() if gz else self.render()
        extra = "Content-Encoding: gzip\r\n" if gz else ""
        _send(conn, _response(200, body, self.content_type, extra, method == "HEAD"), deadline)

    def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Stop serving and free the port within `timeout` (the threads are daemons: one that a
        stuck send still holds past it cannot keep the port, nor the agent, from going on)."""
        with self._lock:
            self._stop.set()
            serving = list(self._serving)
        for sock in (self.socket, *serving):
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes accept() / recv() / send() in their threads
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
                item[0].close()
        for _ in self._threads[1:]:
            self._queue.put_nowait(None)  # the queue is empty and holds more than the workers
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))


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


_REASONS = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 431: "Request Header Fields Too Large",
            503: "Service Unavailable"}


def _response(status: int, body: bytes, content_type: str = "text/plain; charset=utf-8", extra: str = "",
              head_only: bool = False) -> bytes:
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
