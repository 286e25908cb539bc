"""sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET.

The protocol is newline-separated ``KEY=VALUE`` assignments in a single
datagram on an AF_UNIX socket; a name starting with ``@`` is in the abstract
namespace. Outside systemd (no NOTIFY_SOCKET) every call is a cheap no-op,
and a failure to send is never fatal: the service must keep collecting.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping

log = logging.getLogger("gpuagent.service.sdnotify")


def socket_address(value: str | None) -> str | None:
    """The address to connect to for a NOTIFY_SOCKET value, or None if unusable."""
    if not value:
        return None
    if value[0] == "@":
        return "\0" + value[1:]  # abstract namespace
    if value[0] == "/":
        return value
    return None  # vsock:… and other forms are not for us


def notify(state: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (e.g. "READY=1" or "STATUS=…") to the service manager.

    Returns True when the datagram was sent, False when there is no manager to
    tell or sending failed (logged at debug level).
    """
    env = os.environ if environ is None else environ
    raw = env.get("NOTIFY_SOCKET")
    address = socket_address(raw)
    if address is None:
        if raw:
            log.debug("NOTIFY_SOCKET=%s: unsupported address; not notifying", raw)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode("utf-8"))
    except OSError as exc:
        log.debug("sd_notify to %s failed: %s", raw, exc)
        return False
    return True


def watchdog_interval(environ: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """Seconds between watchdog deadlines (WATCHDOG_USEC), or None when no watchdog is
    asked of this process (unset, not a positive integer, or WATCHDOG_PID names another)."""
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    owner = env.get("WATCHDOG_PID", "")
    if owner:
        if not owner.isdigit() or int(owner) != (os.getpid() if pid is None else pid):
            return None
    return int(usec) / 1_000_000


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in microseconds, as RELOADING=1 wants in MONOTONIC_USEC=."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
