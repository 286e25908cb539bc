"""gpuagent.service.sdnotify: the datagram systemd reads, and when a watchdog is asked of us."""

from __future__ import annotations

import os
import socket
import tempfile
import time

import pytest

from gpuagent.service.sdnotify import monotonic_usec, notify, socket_address, watchdog_interval


@pytest.fixture
def path_socket():
    with tempfile.TemporaryDirectory(prefix="sdn-", dir="/tmp") as d:
        path = os.path.join(d, "notify")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(path)
            sock.settimeout(2)
            yield path, sock


def test_sends_one_datagram_to_a_path_socket(path_socket):
    path, sock = path_socket
    assert notify("READY=1\nSTATUS=2 GPUs; 9 collectors", {"NOTIFY_SOCKET": path})
    assert sock.recv(4096) == b"READY=1\nSTATUS=2 GPUs; 9 collectors"


def test_sends_to_an_abstract_socket():
    name = f"gpuagent-test-{os.getpid()}-{time.monotonic_ns()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2)
        assert notify("WATCHDOG=1", {"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_utf8_status(path_socket):
    path, sock = path_socket
    assert notify("STATUS=spool 1 point · ok", {"NOTIFY_SOCKET": path})
    assert sock.recv(4096).decode() == "STATUS=spool 1 point · ok"


@pytest.mark.parametrize("value", [None, "", "relative/path", "vsock:2:1234"])
def test_no_usable_socket_is_a_quiet_no(value):
    env = {} if value is None else {"NOTIFY_SOCKET": value}
    assert notify("READY=1", env) is False


def test_nobody_listening_is_not_fatal(tmp_path):
    assert notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "gone")}) is False
    assert notify("READY=1", {"NOTIFY_SOCKET": "@gpuagent-nobody-listens-here"}) is False


def test_socket_address():
    assert socket_address("@abc") == "\0abc"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"
    assert socket_address("x") is None


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({"WATCHDOG_USEC": "-5"}, None),
        ({"WATCHDOG_USEC": "30000000"}, 30.0),
        ({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "4242"}, 1.0),
        ({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "4243"}, None),
        ({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "x"}, None),
    ],
)
def test_watchdog_interval(env, expected):
    assert watchdog_interval(env, pid=4242) == expected


def test_watchdog_pid_defaults_to_this_process():
    env = {"WATCHDOG_USEC": "500000", "WATCHDOG_PID": str(os.getpid())}
    assert watchdog_interval(env) == 0.5


def test_monotonic_usec_is_clock_monotonic():
    before = time.monotonic()
    usec = monotonic_usec()
    after = time.monotonic()
    assert before * 1e6 - 1 <= usec <= after * 1e6 + 1
