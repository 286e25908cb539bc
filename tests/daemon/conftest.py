"""The daemon tests' harness: a real sd_notify socket and `gpuagent run` as a subprocess."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

PLUGINS_DIR = Path(__file__).parent / "plugins"
SIMULATE = "l40s:2"


class NotifyListener:
    """Binds an AF_UNIX datagram socket, as systemd does, and records every message.

    ``on_ready`` is called from the receiving thread when a message holding
    READY=1 arrives, so a test can see what was true at that moment.
    """

    def __init__(self, path: str, on_ready=None):
        self.path = path
        self.on_ready = on_ready
        self.messages: list[tuple[float, str]] = []
        self.ready_snapshots: list[object] = []
        self._cond = threading.Condition()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(path)
        self._sock.settimeout(0.05)
        self._closed = False
        self._thread = threading.Thread(target=self._receive, daemon=True)
        self._thread.start()

    def _receive(self) -> None:
        while not self._closed:
            try:
                data = self._sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            text = data.decode()
            when = time.monotonic()
            snapshot = self.on_ready() if self.on_ready and "READY=1" in text.split("\n") else None
            with self._cond:
                self.messages.append((when, text))
                if snapshot is not None:
                    self.ready_snapshots.append(snapshot)
                self._cond.notify_all()

    def wait_for(self, line: str, start: int = 0, timeout: float = 15.0) -> int:
        """Index of the first message at or after ``start`` that has ``line`` as one of its lines."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i in range(start, len(self.messages)):
                    if line in self.messages[i][1].split("\n"):
                        return i
                left = deadline - time.monotonic()
                if left <= 0:
                    got = [m for _, m in self.messages[start:]][-10:]
                    raise AssertionError(f"no {line} within {timeout}s; last messages: {got}")
                self._cond.wait(left)

    def times_of(self, line: str, since: float = 0.0, until: float = float("inf")) -> list[float]:
        with self._cond:
            return [t for t, m in self.messages if since <= t <= until and line in m.split("\n")]

    def close(self) -> None:
        self._closed = True
        self._thread.join(1)
        self._sock.close()


class AgentProcess:
    """`gpuagent run` started the way systemd starts it (WATCHDOG_PID is its own pid)."""

    def __init__(
        self,
        workdir: Path,
        notify_path: str,
        config: Path,
        *,
        watchdog_usec: int | None,
        hooks: bool,
        plugins_dir: Path | None,
        journal: bool = False,
    ):
        self.stderr_path = workdir / "stderr.log"
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM", "GPUAGENT_CONFIG")
        }
        env["NOTIFY_SOCKET"] = notify_path
        if watchdog_usec:
            env["WATCHDOG_USEC"] = str(watchdog_usec)
        if hooks:
            env["GPUAGENT_TEST_HOOKS"] = "1"
        argv = [
            sys.executable,
            "-c",
            "import sys; from gpuagent.cli import main; main(sys.argv[1:])",
            "run",
            "--config",
            str(config),
            "--simulate",
            SIMULATE,
        ]
        if plugins_dir:
            argv += ["--plugins-dir", str(plugins_dir)]
        # systemd sets WATCHDOG_PID to the service's pid; `exec` keeps the shell's pid.
        script = 'WATCHDOG_PID=$$; export WATCHDOG_PID; exec "$@"' if watchdog_usec else 'exec "$@"'
        with open(self.stderr_path, "wb") as err:
            if journal:  # what systemd sets when stderr is a stream to journald
                st = os.fstat(err.fileno())
                env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
            self.proc = subprocess.Popen(
                ["/bin/sh", "-c", script, "sh", *argv],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def send(self, sig: int) -> float:
        self.proc.send_signal(sig)
        return time.monotonic()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def write_config(
    path: Path, workdir: Path, *, tags: dict[str, str] | None = None, interval: str = '"500ms"', extra: str = ""
) -> None:
    tag_text = ", ".join(f'{k} = "{v}"' for k, v in (tags or {}).items())
    path.write_text(
        f"""\
[agent]
interval = {interval}
state_dir = "{workdir / "state"}"
log_level = "info"
shutdown_timeout = "5s"
tags = {{ {tag_text} }}

[collectors.host]
interval = "200ms"

[sinks.file]
path = "{workdir / "out.lp"}"
{extra}"""
    )


class Harness:
    """What a daemon test needs; files live in the test's tmp_path."""

    plugins_dir = PLUGINS_DIR
    simulate = SIMULATE

    def __init__(self, tmp_path: Path, notify_dir: str):
        self.tmp_path = tmp_path
        self.config = tmp_path / "gpuagent.toml"
        self.out = tmp_path / "out.lp"
        self._notify_dir = notify_dir
        self.started: list[tuple[AgentProcess, NotifyListener]] = []

    def write_config(self, **kw) -> None:
        write_config(self.config, self.tmp_path, **kw)

    def start(
        self,
        *,
        watchdog_usec: int | None = None,
        hooks: bool = False,
        plugins_dir: Path | None = None,
        extra: str = "",
        journal: bool = False,
    ):
        """-> (AgentProcess, NotifyListener)"""
        self.write_config(extra=extra)
        out = self.out
        listener = NotifyListener(
            os.path.join(self._notify_dir, "notify"), on_ready=lambda: out.read_text() if out.exists() else ""
        )
        proc = AgentProcess(
            self.tmp_path,
            listener.path,
            self.config,
            watchdog_usec=watchdog_usec,
            hooks=hooks,
            plugins_dir=plugins_dir,
            journal=journal,
        )
        self.started.append((proc, listener))
        return proc, listener


@pytest.fixture
def agent_run(tmp_path):
    notify_dir = tempfile.mkdtemp(prefix="gpuagent-notify-", dir="/tmp")  # sun_path is short
    harness = Harness(tmp_path, notify_dir)
    yield harness
    for proc, listener in harness.started:
        proc.kill()
        listener.close()
    shutil.rmtree(notify_dir, ignore_errors=True)
