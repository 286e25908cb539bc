"""Single keys from the terminal, without Enter: cbreak mode (Ctrl-C still raises SIGINT)."""

from __future__ import annotations

import os
import select
import sys
import termios
import tty

NAMES = {"\x1b[A": "up", "\x1b[B": "down", "\x1bOA": "up", "\x1bOB": "down", "\r": "enter", "\n": "enter",
         "\x1b": "esc", "\x7f": "esc"}


class KeyReader:
    """A context that puts stdin in cbreak mode and gives back its keys; restores it on exit."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdin
        self.fd = self.stream.fileno()
        self.saved = None

    def __enter__(self) -> KeyReader:
        if os.isatty(self.fd):
            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc) -> None:
        if self.saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def get(self, timeout: float) -> str | None:
        """The next key ("q", "up", "enter", ...) or None when none came within ``timeout`` seconds."""
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return None
        data = os.read(self.fd, 16).decode(errors="replace")
        if not data:  # stdin closed: nothing more will come
            return "eof"
        return NAMES.get(data, data[:1])
