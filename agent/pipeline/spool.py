"""A durable, bounded FIFO of line-protocol batches on disk: what a network sink has not delivered yet.

Why SQLite and not append-only segment files: one committed transaction is
the unit of durability, so a kill -9 in the middle of a write leaves either
the whole batch or none of it (no torn tail to detect and repair on start);
dropping the oldest batches when full and removing a replayed batch are one
DELETE each, with no compaction of half-consumed segments; and the module
ships with Python.

fsync policy (``sync``): "normal" (the default) is WAL mode with
synchronous=NORMAL: a committed batch survives a crash or kill -9 of the agent
(it is in the WAL, in the OS page cache) without an fsync per batch; a power
cut may lose the last batches committed before it (up to the last WAL
checkpoint's fsync) but never corrupts the file. "full" fsyncs the WAL at
every commit: a committed batch survives a power cut too, at the cost of one
fsync per collected batch (see bench/ and the influxdb sink's README).

A spool that heals: a file SQLite calls damaged ("database disk image is
malformed", "file is not a database": garbage written into it, cut short, a
bad header), found when it is opened (``PRAGMA quick_check``) or at any later
read or write, is moved aside as ``spool.damaged-<UTC time>.sqlite``; every
batch that can still be read out of it is copied into a fresh spool, which
takes over. One error names the file and how many batches were saved.

A spool that cannot be written (disk full, read-only file system) raises
SpoolError from ``push``; the caller keeps the batch in memory. Its counters
move only after a commit. A batch delivered but not removable (the delete
cannot be committed) is remembered in memory as delivered, so it is not sent
again in a loop; a later successful remove deletes it for good.

A batch that cannot be read as line protocol (its data NULL or not a BLOB, not UTF-8, or its
point count not a positive number: a file edited or damaged by hand) is moved, as it was, into
the file's ``quarantine`` table when a replay reaches it, counted in ``quarantined_total`` and
logged; the batches after it go on. In a damaged file being salvaged such a batch is left in the
``spool.damaged-*`` copy and counted the same way.

The bound counts line-protocol bytes (what would be sent), not the file's
size on disk. When a new batch would pass it, whole batches are dropped,
oldest first, and their points counted in ``dropped_total``.
"""

from __future__ import annotations

import builtins
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from gpuagent.service import ownership

_RAISE = object()


class _LazySqlite:
    """sqlite3, imported on first use: an agent whose sinks keep no spool (the file sink) does
    not load it (1.3 MB of resident memory)."""

    def __getattr__(self, name: str):
        import sqlite3 as module

        globals()["sqlite3"] = module
        return getattr(module, name)


if TYPE_CHECKING:
    import sqlite3
else:
    sqlite3 = _LazySqlite()


class SpoolError(Exception):
    """The spool could not keep or read a batch (disk full, read-only, unavailable). Nothing was changed."""


_CORRUPT_MARKERS = ("malformed", "not a database", "file is encrypted", "corrupt")


def _is_corruption(exc: BaseException) -> bool:
    if getattr(exc, "sqlite_errorname", "") in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
        return True
    text = str(exc).lower()
    return any(m in text for m in _CORRUPT_MARKERS)


class Spool:
    """Batches of line protocol, oldest first, in ``<directory>/spool.sqlite``. Thread-safe.

    Never raises from the constructor: a spool that cannot be opened at all
    (``available`` false, ``problem`` says why) makes every operation raise
    SpoolError, and ``reopen_if_due`` tries again every REOPEN_EVERY seconds.
    """

    FILENAME = "spool.sqlite"
    REOPEN_EVERY = 10.0
    MAX_SALVAGE_PROBES = 2_000_000  # ids probed one by one in a damaged file

    def __init__(self, directory: Path | str, max_bytes: int, sync: str = "normal", log: logging.Logger | None = None):
        self.directory = Path(directory)
        self.path = self.directory / self.FILENAME
        self.max_bytes = int(max_bytes)
        self.sync = sync
        self.log = log or logging.getLogger("gpuagent.pipeline.spool")
        self.dropped_total = 0  # points dropped, oldest first, to stay within max_bytes
        self.damaged_total = 0  # damaged files moved aside
        self.salvaged_batches_total = 0
        self.quarantined_total = 0  # unreadable batches moved aside (see the module's docstring)
        self._unmovable: set[int] = set()  # unreadable batches that could not be moved (read-only): skipped
        self.problem: str | None = None  # why the spool cannot be written (None: it can)
        self.available = False  # open at all (readable)
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._bytes = 0
        self._points = 0
        self._delivered_through = 0  # ids <= this were delivered; their delete is pending
        self._last_open = 0.0
        self._readonly = False
        self._file_id: tuple[int, int] | None = None  # (st_dev, st_ino) of the file open at `path`
        self._moving_reason: str | None = None
        self._follow_failed: float | None = None  # when following the path last failed
        with self._lock:
            self._open()

    # -- opening, healing ----------------------------------------------------

    def _connect(self, path: Path, readonly: bool = False) -> sqlite3.Connection:
        if readonly:
            try:
                db = sqlite3.connect(
                    f"file:{path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None, timeout=5
                )
                db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            except sqlite3.OperationalError:
                # A WAL-mode file on a read-only file system without its -shm: readable only
                # as immutable (batches still in an un-checkpointed -wal are not seen then).
                db = sqlite3.connect(
                    f"file:{path}?immutable=1", uri=True, check_same_thread=False, isolation_level=None, timeout=5
                )
        else:
            db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        return db

    def _open(self) -> None:
        """Open (healing a damaged file); on failure leave the spool unavailable with `problem` set."""
        self._last_open = time.monotonic()
        self._close_db()
        self._readonly = False
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            self._unavailable(f"cannot create {self.directory}: {exc.strerror or exc}")
            return
        # A spool another user could plant (its batches would be replayed with the sink's
        # credentials) or read is not used: the directory and its files must be the agent's own.
        problem = ownership.own_directory_problem(self.directory) or next(
            filter(None, (ownership.own_file_problem(Path(f"{self.path}{suffix}")) for suffix in ("", "-wal", "-shm"))),
            None,
        )
        if problem:
            self._unavailable(f"{problem}: not used as the spool")
            return
        try:
            self._open_rw()
            self.problem = None
        except sqlite3.DatabaseError as exc:
            self._close_db()
            if _is_corruption(exc):
                self._heal(str(exc))
                self._resume_heals()
                return
            # Disk full, read-only file system: batches already there can still be replayed.
            problem = _describe(exc)
            try:
                if not self.path.exists():
                    raise
                self._db = self._connect(self.path, readonly=True)
                self._load_totals()
                self.available = True
                self._readonly = True
                self.problem = problem
            except sqlite3.DatabaseError:
                self._close_db()
                self._unavailable(f"cannot open {self.path}: {problem}")
            return
        self._resume_heals()

    def _open_rw(self) -> None:
        self._db = self._connect(self.path)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=" + ("FULL" if self.sync == "full" else "NORMAL"))
        # Reads every page once: damage anywhere in the file is found now, not mid-replay.
        check = self._db.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            raise sqlite3.DatabaseError(f"database disk image is malformed ({check[0] if check else 'no answer'})")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS batches ("
            " id INTEGER PRIMARY KEY AUTOINCREMENT,"  # AUTOINCREMENT: ids never reused, so order is age
            " points INTEGER NOT NULL,"
            " bytes INTEGER NOT NULL,"
            " data BLOB NOT NULL)"
        )
        self._load_totals()
        self.available = True
        st = os.stat(self.path)
        self._file_id = (st.st_dev, st.st_ino)

    def _still_at_path(self) -> bool:
        """Whether `path` is still the file open: SQLite writes on to a file whose directory was
        deleted (or that was replaced), and what it holds would be gone at stop."""
        if self._file_id is None or self._readonly:
            return True
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._file_id

    def _follow_path(self) -> None:
        """`path` is no longer the open file: start a new spool there and move every batch
        held into it, so that nothing spooled is lost (the old file is readable while open).

        The batches are first copied (SQLite's backup) to ``spool.moving-<time>.sqlite`` beside
        the path and the old connection closed, so that its -wal (at the path, when the file was
        replaced) is checkpointed away before the new file is opened; the new spool then takes
        them in as it takes a healed file's (resumed after a kill, too)."""
        if self._follow_failed is not None and time.monotonic() - self._follow_failed < self.REOPEN_EVERY:
            return  # tried a moment ago and could not: the old file goes on holding them
        old, through, was = self._db, self._delivered_through, self.path.exists()
        assert old is not None  # called with the spool open (the file at `path` is not it)
        why = "the file was replaced" if was else "it or its directory was deleted"
        moving = self.directory / f"spool.moving-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.sqlite"
        n = 1
        while moving.exists():
            n += 1
            moving = moving.with_name(f"{moving.name.removesuffix('.sqlite')}-{n}.sqlite")
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            problem = ownership.own_directory_problem(self.directory)
            if problem:
                raise OSError(problem)
            copy = sqlite3.connect(moving, isolation_level=None)
            try:
                old.backup(copy)
                copy.execute("DELETE FROM batches WHERE id <= ?", (through,))  # delivered already
            finally:
                copy.close()
        except (OSError, sqlite3.Error) as exc:
            try:
                moving.unlink(missing_ok=True)
            except OSError:
                pass
            first = self._follow_failed is None
            self._follow_failed = time.monotonic()
            self.problem = (
                f"{self.path} is no longer the file this agent has open ({why}) and no new spool can be made: {exc}"
            )
            if first:  # said once; tried again every REOPEN_EVERY
                self.log.error(
                    "spool %s; the %d points spooled stay in the old file until stop or until a new spool "
                    "can be made (tried every %gs)",
                    self.problem,
                    self._points,
                    self.REOPEN_EVERY,
                )
            return
        self._follow_failed = None
        self._db = None
        try:
            old.close()
        except sqlite3.Error:
            pass
        # SQLite does not checkpoint a file moved under it (SQLITE_READONLY_DBMOVED): the -wal and
        # -shm at the path are still the old file's, and would be read as the new file's.
        for suffix in ("-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        self._delivered_through = 0
        self._moving_reason = f"is no longer the file this agent had open ({why}): a new spool was started there"
        try:
            self._open()  # takes in the spool.moving-* file (_resume_heals)
        finally:
            self._moving_reason = None

    def _unavailable(self, problem: str) -> None:
        self.available = False
        self.problem = problem
        self._bytes = self._points = 0

    def _load_totals(self) -> None:
        assert self._db is not None  # read when the spool is opened
        skip = sorted(self._unmovable)
        self._bytes, self._points = self._db.execute(
            "SELECT COALESCE(SUM(bytes), 0), COALESCE(SUM(points), 0) FROM batches WHERE id > ?"
            + (f" AND id NOT IN ({', '.join('?' * len(skip))})" if skip else ""),
            (self._delivered_through, *skip),
        ).fetchone()

    def _close_db(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
        self._db = None

    def _heal(self, reason: str) -> None:
        """Move the damaged file aside, copy out what can be read, start a fresh spool with it.

        Resumable: the file is moved aside as ``spool.healing-<time>.sqlite`` and named
        ``spool.damaged-<time>.sqlite`` only once every readable batch is in the fresh spool,
        whose ``salvage`` table says how far the copy got (committed with each 1000 batches).
        A kill -9 mid-copy leaves a ``spool.healing-*`` file: the next open goes on from there."""
        reason = " ".join(reason.replace("***", "").split())[:200]  # quick_check's answer spans lines
        self._close_db()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        aside = self.directory / f"spool.healing-{stamp}.sqlite"
        n = 1
        while aside.exists() or _final_name(aside).exists():
            n += 1
            aside = self.directory / f"spool.healing-{stamp}-{n}.sqlite"
        try:
            _move_with_wal(self.path, aside)
        except OSError as exc:
            self._unavailable(f"{self.path} is damaged ({reason}) and cannot be moved aside: {exc.strerror or exc}")
            self.log.error(
                "spool %s is damaged (%s) and cannot be moved aside (%s); delivery keeps points in memory",
                self.path,
                reason,
                exc.strerror or exc,
            )
            return
        self.damaged_total += 1
        self._delivered_through = 0
        try:
            self._open_rw()  # a fresh, empty file: the damaged one is aside
        except sqlite3.DatabaseError as exc:
            self._close_db()
            self._unavailable(f"cannot create a fresh spool in {self.directory}: {_describe(exc)}")
            self.log.error(
                "spool %s was damaged (%s): moved aside to %s, but no fresh spool could be made (%s)",
                self.path,
                reason,
                aside.name,
                self.problem,
            )
            return
        self._salvage_into(aside, f"was damaged ({reason})")

    def _resume_heals(self) -> None:
        """Take in every file a heal or a move left behind (``spool.healing-*``: a heal a kill
        interrupted; ``spool.moving-*``: batches of a file no longer at the path)."""
        for aside in sorted(
            [*self.directory.glob("spool.healing-*.sqlite"), *self.directory.glob("spool.moving-*.sqlite")]
        ):
            if self._db is None or self.problem is not None:
                return
            problem = ownership.own_file_problem(aside)
            if problem:
                self.log.error("spool: %s: not read (another user may have put it there)", problem)
                continue
            if aside.name.startswith("spool.moving-"):
                self._salvage_into(
                    aside, self._moving_reason or "had batches being moved when the agent stopped", keep=False
                )
            else:
                self._salvage_into(aside, "was being healed when the agent stopped")

    def _salvage_into(self, aside: Path, what: str, keep: bool = True) -> None:
        """Copy every readable batch of ``aside`` into the open spool, from where an earlier,
        interrupted copy got to; then name it spool.damaged-* (``keep``) or remove it."""
        found = found_points = kept = done = 0
        db = self._db
        assert db is not None  # into the spool just opened
        try:
            db.execute("CREATE TABLE IF NOT EXISTS salvage (source TEXT PRIMARY KEY, done INTEGER NOT NULL)")
            row = db.execute("SELECT done FROM salvage WHERE source = ?", (aside.name,)).fetchone()
            done = row[0] if row else 0
            db.execute("BEGIN IMMEDIATE")
            size = self._bytes
            # Batch by batch, committed every 1000: a large damaged spool is never held in memory.
            i = 0  # readable batches so far (what `done` counts)
            for batch in _salvage(aside, self.MAX_SALVAGE_PROBES):
                if batch is None:  # unreadable: left in the damaged copy
                    self.quarantined_total += 1
                    continue
                points, data = batch
                i += 1
                found += 1
                found_points += points
                if i <= done:  # copied before an interruption
                    continue
                if size + len(data) > self.max_bytes:
                    self.dropped_total += points
                else:
                    db.execute("INSERT INTO batches (points, bytes, data) VALUES (?, ?, ?)", (points, len(data), data))
                    size += len(data)
                    kept += 1
                if i % 1000 == 0:
                    db.execute("INSERT OR REPLACE INTO salvage (source, done) VALUES (?, ?)", (aside.name, i))
                    db.execute("COMMIT")
                    db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT OR REPLACE INTO salvage (source, done) VALUES (?, ?)", (aside.name, max(found, done)))
            db.execute("COMMIT")
            self._load_totals()
            self.problem = None
        except sqlite3.DatabaseError as exc:
            self._close_db()
            self._unavailable(f"cannot create a fresh spool in {self.directory}: {_describe(exc)}")
        self.salvaged_batches_total += kept
        final = aside
        if self.problem is None:
            try:
                if keep:
                    _move_with_wal(aside, _final_name(aside))
                    final = _final_name(aside)
                else:
                    for suffix in ("", "-wal", "-shm", "-journal"):
                        Path(f"{aside}{suffix}").unlink(missing_ok=True)
                db.execute("DELETE FROM salvage WHERE source = ?", (aside.name,))  # still self._db: no problem
            except (OSError, sqlite3.DatabaseError):
                pass  # a later open finds it again: the salvage table says it is all copied
        resumed = f"; {min(done, found)} of them had been copied before" if done else ""
        if not keep:
            self.log.error(
                "spool %s %s; the %d batches (%d points) it held were moved into it%s",
                self.path,
                what,
                found,
                found_points,
                resumed,
            )
            return
        self.log.error(
            "spool %s %s: moved aside to %s; %d batches (%d points) could be read out of it%s%s",
            self.path,
            what,
            final.name,
            found,
            found_points,
            resumed,
            " and are replayed from a fresh spool"
            if self.problem is None
            else f", but no fresh spool could be made ({self.problem})",
        )

    def reopen_if_due(self) -> None:
        """An unavailable or unwritable spool: try again now and then (the disk may have room again)."""
        with self._lock:
            if (not self.available or self._readonly) and time.monotonic() - self._last_open >= self.REOPEN_EVERY:
                self._open()

    # -- state -------------------------------------------------------------

    # Kept in memory, so a status read never touches the file. They can lag behind
    # batches another instance wrote (refresh() re-reads them), never below zero.
    # Batches delivered but not yet deleted (see remove_through) are not counted.
    @property
    def bytes(self) -> int:
        return max(0, self._bytes)

    @property
    def points(self) -> int:
        return max(0, self._points)

    @property
    def writable(self) -> bool:
        return self.available and self.problem is None

    def __len__(self) -> int:
        return self._guard(
            lambda db: db.execute("SELECT COUNT(*) FROM batches WHERE id > ?", (self._delivered_through,)).fetchone()[
                0
            ],
            default=0,
        )

    def refresh(self) -> None:
        """Re-read the totals from the file: another instance (the sink before a reload) may have added batches."""
        self._guard(lambda db: self._load_totals(), default=None)

    def _guard(self, op, default=_RAISE):
        """Run op(db) under the lock; heal a damaged file (then retry once); SpoolError for the rest."""
        with self._lock:
            if self._db is not None and self.available and not self._still_at_path():
                self._follow_path()
            for attempt in (1, 2):
                if self._db is None or not self.available:
                    if default is not _RAISE:
                        return default
                    raise SpoolError(self.problem or "spool is not open")
                try:
                    return op(self._db)
                except sqlite3.DatabaseError as exc:
                    if self._db.in_transaction:
                        try:
                            self._db.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    if _is_corruption(exc) and attempt == 1:
                        self._heal(str(exc))
                        continue
                    if default is not _RAISE:
                        return default
                    raise SpoolError(_describe(exc)) from None
            raise SpoolError(self.problem or "spool is not open")

    # -- operations ----------------------------------------------------------

    def push(self, data: builtins.bytes, points: int) -> int:  # builtins: the property `bytes` shadows it
        """Append one batch, committed before this returns; drop the oldest batches to stay
        within max_bytes. Returns points dropped. Raises SpoolError when it cannot be kept."""
        if not data or points <= 0:
            return 0
        size = len(data)
        if size > self.max_bytes:  # a batch larger than the whole spool cannot be kept
            with self._lock:
                self.dropped_total += points
            return points

        def op(db):
            dropped_points = dropped_bytes = 0
            with db:  # one transaction: the drops and the insert land together
                db.execute("BEGIN IMMEDIATE")
                while self._bytes - dropped_bytes + size > self.max_bytes:
                    row = db.execute(
                        "SELECT id, COALESCE(points, 0), COALESCE(bytes, 0) FROM batches WHERE id > ? ORDER BY id LIMIT 1",
                        (self._delivered_through,),
                    ).fetchone()
                    if row is None:
                        break
                    db.execute("DELETE FROM batches WHERE id = ?", (row[0],))
                    dropped_points += row[1]
                    dropped_bytes += row[2]
                db.execute("INSERT INTO batches (points, bytes, data) VALUES (?, ?, ?)", (points, size, data))
            # Committed: only now do the counters move.
            self._points += points - dropped_points
            self._bytes += size - dropped_bytes
            self.dropped_total += dropped_points
            if not self._readonly and self._follow_failed is None:
                self.problem = None
            return dropped_points

        with self._lock:
            try:
                return self._guard(op)
            except SpoolError as exc:
                self.problem = str(exc)
                raise

    def peek(self, max_points: int, after_id: int = 0) -> tuple[int, int, builtins.bytes] | None:
        """The oldest batches (after after_id), joined, up to max_points (at least one batch):
        (last_id, points, data)."""

        def op(db):
            while True:
                rows, bad = [], []
                total = 0
                cursor = db.execute(
                    "SELECT id, points, data FROM batches WHERE id > ? ORDER BY id",
                    (max(after_id, self._delivered_through),),
                )
                for batch_id, points, data in cursor:
                    if batch_id in self._unmovable:
                        continue
                    why = _unreadable(points, data)
                    if why:
                        bad.append((batch_id, why))
                        continue
                    if rows and total + points > max_points:
                        break
                    rows.append((batch_id, bytes(data)))
                    total += points
                    if total >= max_points:
                        break
                cursor.close()
                if bad and not self._quarantine(db, bad):
                    # Cannot be moved (read-only, disk full): skipped from now on, not counted as spooled.
                    self._unmovable.update(batch_id for batch_id, _ in bad)
                    self._load_totals()
                if rows or not bad:
                    break
            if not rows:
                return None
            data = b"".join(p if p.endswith(b"\n") else p + b"\n" for _, p in rows)
            return rows[-1][0], total, data

        return self._guard(op)

    def _quarantine(self, db, bad: list[tuple[int, str]]) -> bool:
        """Move unreadable batches, as they are, into the ``quarantine`` table; one error line."""
        try:
            with db:
                db.execute("BEGIN IMMEDIATE")
                db.execute(
                    "CREATE TABLE IF NOT EXISTS quarantine (id INTEGER PRIMARY KEY, points, bytes, data,"
                    " reason TEXT NOT NULL, moved_at TEXT NOT NULL)"
                )
                stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                for batch_id, why in bad:
                    db.execute(
                        "INSERT OR REPLACE INTO quarantine (id, points, bytes, data, reason, moved_at)"
                        " SELECT id, points, bytes, data, ?, ? FROM batches WHERE id = ?",
                        (why, stamp, batch_id),
                    )
                    db.execute("DELETE FROM batches WHERE id = ?", (batch_id,))
        except sqlite3.Error as exc:
            self.log.error(
                "spool %s: %d unreadable batches (%s) skipped, not moved aside: %s",
                self.path,
                len(bad),
                bad[0][1],
                _describe(exc),
            )
            return False
        self.quarantined_total += len(bad)
        self._load_totals()
        self.log.error(
            "spool %s: %d unreadable batches (batch %d: %s) moved to its quarantine table "
            "(spool_quarantined_total); the batches after them go on",
            self.path,
            len(bad),
            bad[0][0],
            bad[0][1],
        )
        return True

    def remove_through(self, last_id: int) -> int:
        """Remove every batch with id <= last_id (what peek returned, once delivered). Returns points removed.

        When the delete cannot be committed (disk full, read-only) the batches are
        remembered as delivered (not sent again, not counted) and deleted later."""
        through = max(last_id, self._delivered_through)

        def sums(db):
            skip = sorted(self._unmovable)  # not counted in the totals: not taken off them
            return db.execute(
                "SELECT COALESCE(SUM(points), 0), COALESCE(SUM(bytes), 0) FROM batches WHERE id > ? AND id <= ?"
                + (f" AND id NOT IN ({', '.join('?' * len(skip))})" if skip else ""),
                (self._delivered_through, through, *skip),
            ).fetchone()

        def op(db):
            points, size = sums(db)
            with db:
                db.execute("BEGIN IMMEDIATE")
                db.execute("DELETE FROM batches WHERE id <= ?", (through,))
            self._unmovable = {i for i in self._unmovable if i > through}
            self._delivered_through = 0
            if not self._readonly and self._follow_failed is None:
                self.problem = None
            return points, size

        with self._lock:
            try:
                points, size = self._guard(op)
            except SpoolError as exc:
                points, size = self._guard(sums, default=(0, 0))
                self._delivered_through = through
                self.problem = str(exc)
            self._points -= points
            self._bytes -= size
            return points

    def close(self) -> None:
        with self._lock:
            self._close_db()
            self.available = False


def _final_name(healing: Path) -> Path:
    return healing.with_name(healing.name.replace("spool.healing-", "spool.damaged-", 1))


def _move_with_wal(source: Path, target: Path) -> None:
    """Rename a spool file and its -wal/-shm (the WAL belongs with its file: it may hold the newest batches)."""
    source.rename(target)
    for suffix in ("-wal", "-shm"):
        extra = Path(f"{source}{suffix}")
        if extra.exists():
            extra.rename(f"{target}{suffix}")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    low = text.lower()
    if "disk is full" in low or "disk full" in low:
        return "disk full"
    if "readonly" in low or "read-only" in low:
        return "read-only"
    return text


def _salvage(path: Path, max_probes: int) -> Iterator[tuple[int, bytes] | None]:
    """Every (points, data) that can still be read from a damaged spool file, oldest first
    (None for a batch found but unreadable as line protocol).

    A file cut short or with a garbled header makes SQLite refuse even its schema:
    then a copy with a rebuilt header (page size 4096 as we create them, page count
    from the file's size) is read instead."""
    found = 0
    for row in _salvage_file(path, max_probes):
        found += row is not None
        yield row
    if found:
        return
    repaired = path.with_name(path.name + ".repair")
    try:
        shutil.copyfile(path, repaired)
        _rebuild_header(repaired)
        yield from _salvage_file(repaired, max_probes)
    except OSError:
        return
    finally:
        repaired.unlink(missing_ok=True)


def _rebuild_header(path: Path) -> None:
    page_size = 4096
    with open(path, "r+b") as fh:
        header = bytearray(fh.read(100))
        if header[:16] == b"SQLite format 3\x00":
            page_size = int.from_bytes(header[16:18], "big") or 4096
            page_size = 65536 if page_size == 1 else page_size
        else:
            fresh = sqlite3.connect(":memory:")
            fresh.execute("PRAGMA page_size=4096")
            fresh.execute("CREATE TABLE t (x)")
            header = bytearray(fresh.serialize()[:100])
            fresh.close()
            header[24:28] = (1).to_bytes(4, "big")  # file change counter
            header[32:40] = bytes(8)  # no freelist
        fh.seek(0, 2)
        pages = max(1, fh.tell() // page_size)
        header[18:20] = b"\x01\x01"  # legacy journal: the WAL (kept aside) is not needed to read it
        header[28:32] = pages.to_bytes(4, "big")
        header[92:96] = header[24:28]  # version-valid-for: the page count is trusted
        fh.seek(0)
        fh.write(header)


def _salvage_file(path: Path, max_probes: int) -> Iterator[tuple[int, bytes] | None]:
    try:
        db = sqlite3.connect(path, isolation_level=None, timeout=5)
    except sqlite3.Error:
        return
    try:
        last = None
        try:  # the quick way: one scan, as far as the damage lets it go
            for batch_id, points, data in db.execute("SELECT id, points, data FROM batches ORDER BY id"):
                last = batch_id
                yield _clean(points, data)
            return
        except sqlite3.Error:
            pass
        try:
            low, high = db.execute("SELECT MIN(id), MAX(id) FROM batches").fetchone()
        except sqlite3.Error:
            low = high = None
        if high is None:
            try:  # sqlite_sequence (AUTOINCREMENT) knows the newest id even when the table's root is hurt
                high = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'batches'").fetchone()[0]
            except (sqlite3.Error, TypeError):
                return
        low = 1 if low is None else low
        if last is not None:
            low = max(low, last + 1)
        low = max(low, high - max_probes)
        for batch_id in range(low, high + 1):  # one lookup per id: a bad page costs only its batches
            try:
                row = db.execute("SELECT points, data FROM batches WHERE id = ?", (batch_id,)).fetchone()
            except sqlite3.Error:
                continue
            if row is not None:
                yield _clean(row[0], row[1])
    finally:
        db.close()


def _unreadable(points, data) -> str | None:
    """Why a stored batch cannot be sent as it is, or None. (A BLOB reads as bytes; NULL as None.)"""
    if data is None:
        return "its data is NULL"
    if not isinstance(data, bytes):
        return f"its data is {type(data).__name__}, not a BLOB"
    if not isinstance(points, int) or isinstance(points, bool) or points <= 0:
        return f"its point count is {points!r}"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"its data is not UTF-8 (byte {exc.start})"
    return None


def _clean(points, data) -> tuple[int, bytes] | None:
    """A salvaged batch, only if it still reads as line protocol text; counted again from its lines.
    None: unreadable (its data NULL, not a BLOB, or not UTF-8)."""
    if not isinstance(data, bytes):
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = [line for line in text.split("\n") if line]
    if not lines:
        return None
    return len(lines), ("\n".join(lines) + "\n").encode()
