"""Single keys from the terminal, without Enter: cbreak mode (Ctrl-C still raises SIGINT).

A resize (SIGWINCH) comes back as the key "resize", through a pipe the handler writes to, so
the frame is redrawn at the new size at once rather than at the next refresh.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import termios
import tty

NAMES = {
    "\x1b[A": "up",
    "\x1b[B": "down",
    "\x1bOA": "up",
    "\x1bOB": "down",
    "\r": "enter",
    "\n": "enter",
    "\x1b": "esc",
    "\x7f": "esc",
}


class KeyReader:
    """A context that puts stdin in cbreak mode and gives back its keys; restores it on exit."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdin
        self.fd = self.stream.fileno()
        self.saved = None
        self.pending: list[str] = []
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.saved_winch = None

    def __enter__(self) -> KeyReader:
        if os.isatty(self.fd):
            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        self.saved_winch = signal.signal(signal.SIGWINCH, self._resized)
        return self

    def __exit__(self, *exc) -> None:
        if self.saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)
        signal.signal(signal.SIGWINCH, self.saved_winch or signal.SIG_DFL)
        os.close(self.wake_r)
        os.close(self.wake_w)

    def _resized(self, signum, frame) -> None:
        try:
            os.write(self.wake_w, b"r")
        except BlockingIOError:  # one wake-up pending is enough
            pass

    def get(self, timeout: float) -> str | None:
        """The next key ("q", "up", "enter", ...) or None when none came within ``timeout`` seconds."""
        if self.pending:
            return self.pending.pop(0)
        ready, _, _ = select.select([self.fd, self.wake_r], [], [], max(0.0, timeout))
        if not ready:
            return None
        if self.wake_r in ready:
            os.read(self.wake_r, 64)
            return "resize"
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
        data = data[len(seq) :]
    return keys
