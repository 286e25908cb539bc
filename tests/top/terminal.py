"""A real terminal for the tests: tmux, on its own server socket, running a command in a pane of
a given size; the screen read back with capture-pane, keys sent with send-keys."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class Tmux:
    def __init__(self, tmp: Path, width: int, height: int):
        self.binary = shutil.which("tmux")
        self.socket = f"gpuagent-test-{uuid.uuid4().hex[:8]}"
        self.width, self.height = width, height
        self.rc_file = tmp / "rc"
        self.env = {k: v for k, v in os.environ.items() if k != "GPUAGENT_CONFIG"}
        self.env.update(XDG_STATE_HOME=str(tmp / "state"), TERM="xterm-256color")
        self.env.pop("NO_COLOR", None)

    def tmux(self, *args: str, check: bool = True) -> str:
        out = subprocess.run(
            [self.binary, "-L", self.socket, "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=30,
            check=check,
        )
        return out.stdout

    def start_top(self, *args: str) -> None:
        command = " ".join([sys.executable, "-m", "gpuagent", "top", *(f"'{a}'" for a in args)])
        self.tmux(
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            str(self.width),
            "-y",
            str(self.height),
            f"cd {REPO} && {command}; echo $? > {self.rc_file}; sleep 600",
        )

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "top")

    def wait_for(self, check, what: str, timeout: float = 40.0) -> str:
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            # The same screen twice, 0.1 s apart: not one caught half-way through a redraw.
            if check(screen):
                time.sleep(0.1)
                if self.screen() == screen:
                    return screen
            time.sleep(0.1)
        raise AssertionError(f"{what} not on the screen within {timeout:g}s:\n{screen}")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "top", *keys)

    def exit_code(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.rc_file.exists() and self.rc_file.read_text().strip():
                return int(self.rc_file.read_text())
            time.sleep(0.1)
        raise AssertionError(f"top did not exit within {timeout:g}s:\n{self.screen()}")

    def close(self) -> None:
        self.tmux("kill-server", check=False)
