"""file sink: line protocol to a file, or to stdout with path "-", with rotation by size.

The default sink when no [sinks.*] table is configured (path "-").
Each write() ends with a flush, so the file is a faithful record of what the
agent produced, line for line (the outage tests use it as the record of truth).
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from pydantic import Field

import gpuagent
from gpuagent.errors import AgentError
from gpuagent.pipeline.metric import Point, to_lines
from gpuagent.plugins.file.schema import SCHEMA
from gpuagent.service import ownership
from gpuagent.units import ByteSize

REOPEN_S = 30.0  # a refused PATH is tried again this often (the admin removed the planted link)


class FileSinkConfig(gpuagent.SinkConfig):
    path: str = "-"
    max_bytes: ByteSize | None = None  # rotate before the file would pass this size; unset: never
    keep: int = Field(5, ge=0, le=1000)  # rotated files kept: PATH.1 (newest) … PATH.keep
    follow_symlinks: bool = False  # PATH may be a symlink (the operator means it); else refused


class FileSink(gpuagent.Sink):
    name = "file"
    schema = SCHEMA
    Config = FileSinkConfig

    def __init__(self, config: FileSinkConfig, context):
        super().__init__(config, context)
        self._lock = threading.Lock()
        self._fh: TextIO | None = None
        self._size = 0
        self.points_written = 0
        self.bytes_written = 0
        self.rotations = 0
        self.reader_gone = False  # stdout's reader left (`gpuagent run --test | head -1`)
        self.refused: str | None = None  # why PATH is not opened (a planted symlink, another user's file)
        self._refused_at = 0.0
        self.points_refused = 0

    @property
    def path(self) -> Path | None:
        return None if self.config.path == "-" else Path(os.path.expanduser(self.config.path))

    def check(self) -> None:
        """The file, or the nearest folder above it that exists (start creates the rest), is writable."""
        path = self.path
        if path is None:
            return
        if path.is_dir():
            raise AgentError(f"sinks.file: cannot open {path}: is a directory")
        target = path
        while not target.exists() and target != target.parent:
            target = target.parent
        if target != path and not target.is_dir():
            raise AgentError(f"sinks.file: cannot open {path}: {target} is not a directory")
        if not os.access(target, os.W_OK):
            raise AgentError(f"sinks.file: cannot open {path}: permission denied ({target})")

    def start(self) -> None:
        if self.path is None:
            self._fh = sys.stdout
            return
        self._open()

    def _open(self) -> None:
        path = self.path
        assert path is not None, "stdout (path '-') is not opened"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AgentError(f"sinks.file: cannot open {path}: {exc.strerror or exc}") from None
        # Never append through a path another user controls: a symlink planted in a directory
        # others can write to (a Kubernetes emptyDir is 0777) would make the agent (root, often)
        # append where they say. Refused before the open for the message, and by O_NOFOLLOW and
        # the opened file's fstat for a swap in between; O_NONBLOCK: a planted FIFO cannot hang it.
        problem = ownership.own_file_problem(path, self.config.follow_symlinks)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK
        if not self.config.follow_symlinks:
            flags |= os.O_NOFOLLOW
        fd = None
        if not problem:
            try:
                fd = os.open(path, flags, 0o644)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise AgentError(f"sinks.file: cannot open {path}: {exc.strerror or exc}") from None
                problem = ownership.own_file_problem(path) or f"{path} is a symlink (not followed)"
            else:
                problem = ownership.opened_file_problem(path, os.fstat(fd))
        if problem:
            if fd is not None:
                os.close(fd)
            # Another user can plant this in a directory others may write: it stops this sink
            # only (counted, said once per problem), the agent runs on; the open is tried again.
            self._refused_at = time.monotonic()
            if problem != self.refused:
                self.log.error("sinks.file: %s: not written to (see follow_symlinks in its README)", problem)
            self.refused = problem
            return
        self.refused = None
        assert fd is not None  # no problem: the open above succeeded
        os.set_blocking(fd, True)
        self._fh = open(fd, "a", encoding="utf-8")
        self._size = self._fh.tell()

    def _rotate(self) -> None:
        """PATH -> PATH.1 -> PATH.2 …; the oldest beyond `keep` is removed."""
        if self._fh is not None:
            self._fh.close()
        self._fh = None
        path, keep = self.path, self.config.keep
        assert path is not None, "stdout (path '-') is not rotated"
        if keep == 0:
            path.unlink(missing_ok=True)
        else:
            Path(f"{path}.{keep}").unlink(missing_ok=True)
            for i in range(keep - 1, 0, -1):
                older = Path(f"{path}.{i}")
                if older.exists():
                    older.rename(f"{path}.{i + 1}")
            path.rename(f"{path}.1")
        self.rotations += 1
        self._open()

    def write(self, points: Sequence[Point]) -> None:
        if not points:
            return
        text = to_lines(points)
        with self._lock:
            if self.refused is not None and time.monotonic() - self._refused_at >= REOPEN_S:
                self._open()
            if self.refused is not None:
                self.points_refused += len(points)
                return
            if self._fh is None:
                raise RuntimeError("file sink is not started")
            size = len(text.encode("utf-8"))
            limit = self.config.max_bytes
            if limit and self.path is not None and self._size and self._size + size > limit:
                self._rotate()
                if self.refused is not None:  # what it reopened was planted: counted, not written
                    self.points_refused += len(points)
                    return
            if self.reader_gone:
                return
            self._size += size
            try:
                self._fh.write(text)
                self._fh.flush()
            except BrokenPipeError:
                if self._fh is not sys.stdout:
                    raise
                self._reader_left()
                return
            self.points_written += len(points)
            self.bytes_written += size

    def _reader_left(self) -> None:
        """The pipe's reader is gone: not an error (`| head`). Stop writing, and point fd 1 at
        /dev/null so neither we nor Python's exit-time flush report a broken pipe."""
        self.reader_gone = True
        self.log.debug("stdout's reader has gone; no more line protocol is written")
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def flush(self, timeout: float) -> None:
        with self._lock:
            if self._fh is not None and not self.reader_gone:
                try:
                    self._fh.flush()
                except BrokenPipeError:
                    if self._fh is not sys.stdout:
                        raise
                    self._reader_left()

    def close(self) -> None:
        with self._lock:
            if self._fh is not None and self._fh is not sys.stdout:
                self._fh.close()
            self._fh = None

    def stats(self) -> dict[str, int | float]:
        return {
            "points_written_total": self.points_written,
            "bytes_written_total": self.bytes_written,
            "rotations_total": self.rotations,
            "points_refused_total": self.points_refused,
        }

    def describe(self) -> str:
        return f"refused: {self.refused}" if self.refused else "ok"


@gpuagent.hookimpl
def gpuagent_register_sinks(register):
    register(FileSink)
