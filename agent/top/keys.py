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
        self.pending: list[str] = []

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
        if self.pending:
            return self.pending.pop(0)
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return None
        data = os.read(self.fd, 64).decode(errors="replace")
        if not data:  # stdin closed: nothing more will come
            return "eof"
        self.pending = split_keys(data)
        return self.pending.pop(0) if self.pending else None


_SEQUENCES = sorted((k for k in NAMES if len(k) > 1), key=len, reverse=True)


def split_keys(data: str) -> list[str]:
    """One read may hold several keys (a paste, keys sent at once): each escape sequence is one."""
    keys = []
    while data:
        seq = next((s for s in _SEQUENCES if data.startswith(s)), None)
        if seq is None and data[:2] in ("\x1b[", "\x1bO") and len(data) >= 3:
            seq = data[:3]  # another cursor or function key: one key, which does nothing
            keys.append("other")
        else:
            seq = seq or data[0]
            keys.append(NAMES.get(seq, seq))
        data = data[len(seq):]
    return keys
