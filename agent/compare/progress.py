"""Progress of long work (`sim fleet`, `rollups backfill`) on stderr: a rich progress bar on a
terminal, a line per host or chunk otherwise (at most about 20 lines: every 5% of a long run), and a
line saying what was left half-done when the work stops early (an error; Ctrl-C's one line says it)."""

from __future__ import annotations

import sys
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported where a terminal asks for it
    import rich.progress
    import rich.status

LINES = 20  # the most progress lines off a terminal: a line each step up to this, then every 5%


class Progress:
    """`with Progress("sim fleet", 12, "hosts", partial=...) as p: ... p.advance("sim-03")`.

    `partial(done, total)` -> the line printed when the work stops before its end (None: none)."""

    def __init__(self, what: str, total: int, unit: str, partial=None, stream=None):
        self.what, self.total, self.unit, self.partial = what, max(0, total), unit, partial
        self.stream = stream or sys.stderr
        self.done = 0
        self._bar: rich.progress.Progress | None = None
        self._every = max(1, -(-self.total // LINES)) if self.total > LINES else 1
        self.started = time.monotonic()

    def __enter__(self) -> Progress:
        if self.total and _is_terminal(self.stream):
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                TextColumn(f"{self.what}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(self.unit),
                TimeElapsedColumn(),
                TextColumn("{task.description}"),
                console=Console(file=self.stream),
                transient=True,  # the summary line replaces it
            )
            self._bar.start()
            self._task = self._bar.add_task("", total=self.total)
        return self

    def advance(self, label: str = "") -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=label)
        elif self.done % self._every == 0 or self.done == self.total:
            tail = f" ({label})" if label else ""
            print(f"{self.what}: {self.done}/{self.total} {self.unit}{tail}", file=self.stream, flush=True)

    def __exit__(self, kind, exc, tb) -> None:
        if self._bar is not None:
            self._bar.stop()
        if kind is not None and self.partial is not None and self.done < self.total:
            line = self.partial(self.done, self.total)
            if line and isinstance(exc, KeyboardInterrupt):
                exc.add_note(line)  # on the one "gpuagent: interrupted" line (gpuagent.cli)
            elif line:
                print(line, file=self.stream, flush=True)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Activity:
    """`with Activity("compare", lambda: client.requests, "queries answered"):` a spinner on a terminal,
    from `after_s` on (a report of a second shows none), with the count `count()` gives; off a terminal
    nothing (the report is the output)."""

    def __init__(self, what: str, count, unit: str, after_s: float = 2.0, stream=None):
        self.what, self.count, self.unit, self.after_s = what, count, unit, after_s
        self.stream = stream or sys.stderr
        self._status: rich.status.Status | None = None
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.started = time.monotonic()

    def _text(self) -> str:
        return f"{self.what}: {self.count()} {self.unit}, {time.monotonic() - self.started:.0f}s"

    def _start(self) -> None:
        from rich.console import Console

        with self._lock:
            if self._closed:
                return
            self._status = Console(file=self.stream).status(self._text())
            self._status.start()

        def tick() -> None:
            while True:
                with self._lock:
                    if self._closed:
                        return
                    if self._status is not None:
                        self._status.update(self._text())
                time.sleep(0.25)

        threading.Thread(target=tick, daemon=True).start()

    def __enter__(self) -> Activity:
        if _is_terminal(self.stream):
            self._timer = threading.Timer(self.after_s, self._start)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self._closed = True
            if self._status is not None:
                self._status.stop()  # transient: the report follows on a clean screen
