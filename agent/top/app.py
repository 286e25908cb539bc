"""The refresh loop of `gpuagent top`: a frame every interval, keys in between.

On a terminal the frame is drawn full-screen in place (rich Live, the alternate screen);
otherwise (a pipe, a file) each refresh prints the frame as plain text. `--once` prints one.
"""

from __future__ import annotations

import logging
import time

from rich.console import Console

from gpuagent.errors import AgentError
from gpuagent.top.model import Frame, History
from gpuagent.top.view import SORTS, View, render, visible


class NoteHandler(logging.Handler):
    """Keeps the newest warning for the frame's status line: a log line would tear the screen."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.last = record.getMessage().splitlines()[0][:200]


class Top:
    def __init__(self, source, view: View, follow_pace: bool = False):
        self.source, self.view = source, view
        self.history = History()
        self.frame: Frame | None = None
        self.follow_pace = follow_pace  # fleet without --interval: refresh as often as the agents write

    def refresh(self) -> None:
        try:
            frame = self.source.read(self.view.host)
        except AgentError as exc:
            if self.frame is None:  # nothing to show yet: the one-line error, exit 1
                raise
            # A server that stops answering mid-watch: keep the last frame, say so, ask again.
            self.frame.note = f"{exc} (the last frame; asking again in {self.view.interval:g}s)"
            return
        self.frame = frame
        self.history.add(frame.rows)
        self.view.jobs = sorted({p.job for p in frame.procs if p.job})
        if self.follow_pace:
            self.view.interval = self.source.interval

    def draw(self, console: Console, whole: bool = False):
        """The frame at the console's size; ``whole``: every process, however tall, and no key line
        (printed frames: nothing reads keys there)."""
        return render(self._shown(), self.view, console.width, None if whole else console.height, keys=not whole)

    def key(self, key: str) -> bool:
        """Apply one key; False when it asks to quit."""
        v = self.view
        v.message = ""
        if key in ("q", "Q", "eof"):
            return False
        if key == "s":
            v.sort = SORTS[(SORTS.index(v.sort) + 1) % len(SORTS)]
        elif key == "g" and not self._fleet_list():
            keys = [r.key for r in self._shown().rows]
            v.gpu = _next(keys, v.gpu)
        elif key == "j" and not self._fleet_list():
            v.job = _next(v.jobs, v.job)
            if v.job is None and not v.jobs:
                v.message = "no process belongs to a job"
        elif key == "up" and self._fleet_list():
            v.selected = max(0, v.selected - 1)
        elif key == "down" and self._fleet_list():
            v.selected = min(len(self._shown().rows) - 1, v.selected + 1)
        elif key == "enter" and self._fleet_list() and self._shown().rows:
            rows, _ = visible(self._shown(), v)
            v.host = rows[min(v.selected, len(rows) - 1)].label if self._shown().by == "host" else None
            if v.host is None:
                v.message = "GPUs are listed per host: use --by host"
            else:
                self.refresh()
        elif key == "esc" and v.fleet and v.host is not None:
            v.host = None
            self.refresh()
        return True

    def _shown(self) -> Frame:
        """The frame drawn and keyed: the first refresh() sets it or raises."""
        assert self.frame is not None, "refresh() first"
        return self.frame

    def _fleet_list(self) -> bool:
        return self.view.fleet and self.view.host is None


def _next(values: list[str], current: str | None) -> str | None:
    """Cycle: none -> each value in turn -> none."""
    if current not in values:
        return values[0] if values else None
    i = values.index(current) + 1
    return values[i] if i < len(values) else None


def print_frame(top: Top, console: Console) -> None:
    """One frame as text, without the blanks that pad its cells at line ends (as inspect prints)."""
    from gpuagent.commands.inspect import without_trailing_blanks

    with console.capture() as captured:
        console.print(top.draw(console, whole=True), crop=False)
    console.file.write(without_trailing_blanks(captured.get()))
    console.file.flush()


def run_once(top: Top, console: Console) -> None:
    top.refresh()
    print_frame(top, console)


def run_plain(top: Top, console: Console) -> None:
    """Not a terminal: a frame per refresh, one after the other, a blank line between."""
    while True:
        top.refresh()
        print_frame(top, console)
        console.file.write("\n")
        time.sleep(top.view.interval)


def run_live(top: Top, console: Console) -> int:
    from rich.live import Live

    from gpuagent.top.keys import KeyReader

    note = NoteHandler()
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers[:] = [note]
    try:
        with (
            KeyReader() as keys,
            Live(
                console=console, screen=True, auto_refresh=False, redirect_stdout=False, redirect_stderr=False
            ) as live,
        ):
            while True:
                top.refresh()
                if note.last and top.frame and not top.frame.note:
                    top.frame.note = note.last
                due = time.monotonic() + top.view.interval
                live.update(top.draw(console), refresh=True)
                while (left := due - time.monotonic()) > 0:
                    key = keys.get(left)
                    if key is None:
                        break
                    if not top.key(key):
                        return 0
                    live.update(top.draw(console), refresh=True)
    finally:
        root.handlers[:] = saved
