"""Jobs that count their own work: one small text file per job and unit in a directory the
agent reads each cycle (the README says why a file, and shows a job writing one).

    pid=12345            # a process of the job (the writer itself: os.getpid())
    unit=samples         # what is counted: samples, steps, images, tokens_out, ...
    total=1234567        # the job's whole count so far (a counter: only grows)
    workload=resnet50    # optional: the job's name (default: the file's name)
    slurm_job_id=4242    # optional: the job (default: read from the process)

Replaced atomically by the job (write FILE.tmp, rename to FILE.work). A file whose process is
gone is stale and skipped (the job or a tmpfs reboot removes it); one that cannot be read is
named once in the log, with why. The directory is writable by every user (1777), so each file
is read through gpuagent.service.safe_files (no symlink, no FIFO or device, at most MAX_BYTES)
and its owner is kept: the collector credits a file only to its owner's processes.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpuagent.service import safe_files

log = logging.getLogger("gpuagent.collector.work")

SUFFIX = ".work"
MAX_BYTES = 4096
MAX_FILES = 1000  # read a cycle, in all (config: job_files)
FILES_PER_USER = 100  # read a cycle, of one owner (config: job_files_per_user)
BUDGET_S = 1.0  # time a cycle spends reading them (config: jobs_budget)
MAX_LISTED = 100_000  # directory entries looked at, at most
_UNIT = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_KEYS = {"pid", "unit", "total", "workload", "slurm_job_id"}


@dataclass(frozen=True)
class JobCount:
    path: Path
    pid: int
    unit: str
    total: float
    workload: str
    slurm_job_id: str | None
    uid: int = 0  # the file's owner: its count goes only to that user's processes (any for root)


class JobFiles:
    """The job files of one directory, read within a budget each cycle: at most ``max_files``
    files, ``files_per_user`` of each owner (users take turns: one user's 5,000 files cannot
    starve another's), ``budget_s`` of time and MAX_BYTES a file. What is cut or refused is
    counted (``cut_total``, ``refused_total``) and named once in the log."""

    def __init__(
        self,
        directory: str,
        max_files: int = MAX_FILES,
        files_per_user: int = FILES_PER_USER,
        budget_s: float = BUDGET_S,
        clock=time.monotonic,
    ):
        self.directory = Path(directory) if directory else None
        self.max_files, self.files_per_user, self.budget_s, self.clock = max_files, files_per_user, budget_s, clock
        self._warned: dict[Path, tuple[int, str]] = {}  # path -> (mtime, why) already logged
        self._missing_warned = False
        self._cut_warned = False
        self.cut_total = 0  # files left unread by the budget (files, time)
        self.refused_total = 0  # files refused: not a regular file, too big, unparsable, another user's pid

    def read(self) -> list[JobCount]:
        if self.directory is None:
            return []
        try:
            by_user = self._listed()
        except FileNotFoundError:
            return []  # no job has written one yet
        except OSError as exc:
            if not self._missing_warned:
                self._missing_warned = True
                log.warning("work: cannot list %s: %s", self.directory, exc.strerror or exc)
            return []
        turns = [e for row in itertools.zip_longest(*by_user.values()) for e in row if e is not None]
        cut = 0
        stop_at = self.clock() + self.budget_s
        out = []
        for n, (path, mtime) in enumerate(turns):
            if n >= self.max_files or self.clock() >= stop_at:
                cut += len(turns) - n
                break
            try:
                data, st = safe_files.read_bounded(path, MAX_BYTES)  # any user's; the owner limits its pid
                count = parse(path, data.decode("utf-8", errors="replace"), st.st_uid)
            except (OSError, ValueError) as exc:
                why = str(exc) if isinstance(exc, ValueError) else (exc.strerror or str(exc))
                if not isinstance(exc, FileNotFoundError):  # replaced between the listing and the open
                    self.refused_total += 1
                    # A refusal names the file with its owner and mode itself.
                    self._warn(path, mtime, why, "" if isinstance(exc, safe_files.Refused) else f"{path}: ")
                continue
            if not _alive(count.pid, st.st_mtime):
                continue  # stale: its process is gone (or the pid was reused since)
            self._warned.pop(path, None)
            out.append(count)
        self._cut(cut)
        return out

    def _listed(self) -> dict[int, list[tuple[Path, int]]]:
        """Owner uid -> its .work files (path, mtime) in name order, at most files_per_user each
        and the others counted as cut; root's files first."""
        by_user: dict[int, list[tuple[Path, int]]] = {}
        over = 0
        with os.scandir(self.directory) as listing:
            for n, entry in enumerate(listing):
                if n >= MAX_LISTED:
                    over += 1  # not even looked at: counted as one cut, the listing is bounded
                    break
                if not entry.name.endswith(SUFFIX):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                by_user.setdefault(st.st_uid, []).append((Path(entry.path), st.st_mtime_ns))
        for files in by_user.values():
            files.sort()
            over += max(0, len(files) - self.files_per_user)
            del files[self.files_per_user :]
        self._cut(over)
        return dict(sorted(by_user.items()))

    def _cut(self, n: int) -> None:
        if n <= 0:
            return
        self.cut_total += n
        if not self._cut_warned:
            self._cut_warned = True
            log.warning(
                "work: %s: %d job files left unread this cycle (at most %d a cycle, %d of each user, "
                "%gs); counted in job_files_cut_total, said once",
                self.directory, n, self.max_files, self.files_per_user, self.budget_s,
            )  # fmt: skip

    def _warn(self, path: Path, mtime: int, why: str, named: str) -> None:
        if self._warned.get(path) == (mtime, why):
            return
        if len(self._warned) > 4 * MAX_FILES:
            self._warned.clear()  # bounded: many files a hostile user renames each cycle
        self._warned[path] = (mtime, why)
        log.warning("work: %s%s; skipped", named, why)


def parse(path: Path, text: str, uid: int = 0) -> JobCount:
    values: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in _KEYS:
            raise ValueError(f"line {n}: expected one of {', '.join(sorted(_KEYS))} as KEY=VALUE")
        values[key] = value
    for key in ("pid", "unit", "total"):
        if key not in values:
            raise ValueError(f"no {key}= line")
    if not values["pid"].isdigit() or int(values["pid"]) <= 0:
        raise ValueError(f"pid={values['pid']!r} is not a process id")
    if not _UNIT.match(values["unit"]):
        raise ValueError(f"unit={values['unit']!r}: lower-case letters, digits and _ only")
    try:
        total = float(values["total"])
    except ValueError:
        raise ValueError(f"total={values['total']!r} is not a number") from None
    if not math.isfinite(total) or total < 0:
        raise ValueError(f"total={values['total']!r}: a count is a finite number >= 0")
    job = values.get("slurm_job_id") or None
    if job is not None and not job.isdigit():
        raise ValueError(f"slurm_job_id={job!r} is not a Slurm job id")
    return JobCount(
        path, int(values["pid"]), values["unit"], total,
        values.get("workload") or path.name[: -len(SUFFIX)], job, uid,
    )  # fmt: skip


def _alive(pid: int, written: float) -> bool:
    """The file's process runs, and started before the file was last written."""
    try:
        return psutil.Process(pid).create_time() <= written + 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
