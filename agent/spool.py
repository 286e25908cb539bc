"""A durable, bounded FIFO of line-protocol batches on disk: what a network sink could not deliver.

Why SQLite and not append-only segment files: one committed transaction is
the unit of durability, so a kill -9 in the middle of a write leaves either
the whole batch or none of it (no torn tail to detect and repair on start);
dropping the oldest batches when full and removing a replayed batch are one
DELETE each, with no compaction of half-consumed segments; and the module
ships with Python. WAL mode with synchronous=NORMAL makes a committed batch
survive a crash of the agent (it is in the WAL, in the OS page cache) without
an fsync per batch; a power cut may lose the last few batches but never
corrupts the file.

The bound counts line-protocol bytes (what would be sent), not the file's
size on disk. When a new batch would pass it, whole batches are dropped,
oldest first, and their points counted in ``dropped_total``.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(b|kb|kib|mb|mib|gb|gib|tb|tib)?", re.IGNORECASE)
_SIZE_UNITS = {
    None: 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_bytes(value: object) -> int:
    """Bytes as an int, or a string with a unit: "512MiB", "1GB", "100kB"."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size in bytes, got {value!r}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, float) and value.is_integer():
        size = int(value)
    elif isinstance(value, str):
        m = _SIZE.fullmatch(value.strip())
        if not m:
            raise ValueError(f'expected a size such as "512MiB" or "1GB", got "{value}"')
        size = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower() if m.group(2) else None])
    else:
        raise ValueError(f"expected a size in bytes, got {type(value).__name__}")
    if size <= 0:
        raise ValueError(f"expected a positive size, got {value!r}")
    return size


ByteSize = Annotated[int, BeforeValidator(parse_bytes)]


class Spool:
    """Batches of line protocol, oldest first, in ``<directory>/spool.sqlite``. Thread-safe."""

    FILENAME = "spool.sqlite"

    def __init__(self, directory: Path | str, max_bytes: int):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.max_bytes = int(max_bytes)
        self.dropped_total = 0
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.directory / self.FILENAME, check_same_thread=False, isolation_level=None, timeout=30
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS batches ("
            " id INTEGER PRIMARY KEY AUTOINCREMENT,"  # AUTOINCREMENT: ids never reused, so order is age
            " points INTEGER NOT NULL,"
            " bytes INTEGER NOT NULL,"
            " data BLOB NOT NULL)"
        )
        self._bytes, self._points = self._db.execute(
            "SELECT COALESCE(SUM(bytes), 0), COALESCE(SUM(points), 0) FROM batches"
        ).fetchone()

    # -- state -------------------------------------------------------------

    # Kept in memory, so a status read never touches the file. They can lag behind
    # batches another instance wrote (refresh() re-reads them), never below zero.
    @property
    def bytes(self) -> int:
        return max(0, self._bytes)

    @property
    def points(self) -> int:
        return max(0, self._points)

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM batches").fetchone()[0]

    def refresh(self) -> None:
        """Re-read the totals from the file: another instance (the sink before a reload) may have added batches."""
        with self._lock:
            self._bytes, self._points = self._db.execute(
                "SELECT COALESCE(SUM(bytes), 0), COALESCE(SUM(points), 0) FROM batches"
            ).fetchone()

    # -- operations ----------------------------------------------------------

    def push(self, data: bytes, points: int) -> int:
        """Append one batch; drop the oldest batches to stay within max_bytes. Returns points dropped."""
        if not data or points <= 0:
            return 0
        size = len(data)
        with self._lock:
            if size > self.max_bytes:  # a batch larger than the whole spool cannot be kept
                self.dropped_total += points
                return points
            dropped = 0
            with self._db:  # one transaction: the drops and the insert land together
                self._db.execute("BEGIN IMMEDIATE")
                while self._bytes + size > self.max_bytes:
                    row = self._db.execute(
                        "SELECT id, points, bytes FROM batches ORDER BY id LIMIT 1"
                    ).fetchone()
                    if row is None:
                        break
                    self._db.execute("DELETE FROM batches WHERE id = ?", (row[0],))
                    self._points -= row[1]
                    self._bytes -= row[2]
                    dropped += row[1]
                self._db.execute(
                    "INSERT INTO batches (points, bytes, data) VALUES (?, ?, ?)", (points, size, data)
                )
                self._points += points
                self._bytes += size
            self.dropped_total += dropped
            return dropped

    def peek(self, max_points: int, after_id: int = 0) -> tuple[int, int, bytes] | None:
        """The oldest batches (after after_id), joined, up to max_points (at least one batch):
        (last_id, points, data)."""
        with self._lock:
            rows = []
            total = 0
            cursor = self._db.execute(
                "SELECT id, points, data FROM batches WHERE id > ? ORDER BY id", (after_id,)
            )
            for row in cursor:
                if rows and total + row[1] > max_points:
                    break
                rows.append(row)
                total += row[1]
                if total >= max_points:
                    break
            cursor.close()
            if not rows:
                return None
            parts = [bytes(r[2]) for r in rows]
            data = b"".join(p if p.endswith(b"\n") else p + b"\n" for p in parts)
            return rows[-1][0], total, data

    def remove_through(self, last_id: int) -> int:
        """Remove every batch with id <= last_id (what peek returned, once delivered). Returns points removed."""
        with self._lock:
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                points, size = self._db.execute(
                    "SELECT COALESCE(SUM(points), 0), COALESCE(SUM(bytes), 0) FROM batches WHERE id <= ?",
                    (last_id,),
                ).fetchone()
                self._db.execute("DELETE FROM batches WHERE id <= ?", (last_id,))
            self._points -= points
            self._bytes -= size
            return points

    def close(self) -> None:
        with self._lock:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
