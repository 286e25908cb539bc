"""Jobs that count their own work: one small text file per job and unit in a directory the
agent reads each cycle (the README says why a file, and shows a job writing one).

    pid=12345            # a process of the job (the writer itself: os.getpid())
    unit=samples         # what is counted: samples, steps, images, tokens_out, ...
    total=1234567        # the job's whole count so far (a counter: only grows)
    workload=resnet50    # optional: the job's name (default: the file's name)
    slurm_job_id=4242    # optional: the job (default: read from the process)

Replaced atomically by the job (write FILE.tmp, rename to FILE.work). A file whose process is
gone is stale and skipped (the job or a tmpfs reboot removes it); one that cannot be read is
named once in the log, with why.
"""

from __future__ import annotations

import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import psutil

log = logging.getLogger("gpuagent.collector.work")

SUFFIX = ".work"
MAX_BYTES = 4096
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


class JobFiles:
    def __init__(self, directory: str):
        self.directory = Path(directory) if directory else None
        self._warned: dict[Path, tuple[int, str]] = {}  # path -> (mtime, why) already logged
        self._missing_warned = False

    def read(self) -> list[JobCount]:
        if self.directory is None:
            return []
        try:
            entries = [e for e in os.scandir(self.directory) if e.name.endswith(SUFFIX)]
        except FileNotFoundError:
            return []  # no job has written one yet
        except OSError as exc:
            if not self._missing_warned:
                self._missing_warned = True
                log.warning("work: cannot list %s: %s", self.directory, exc.strerror or exc)
            return []
        out = []
        for entry in sorted(entries, key=lambda e: e.name):
            path = Path(entry.path)
            mtime = 0
            try:
                stat = entry.stat()
                mtime = stat.st_mtime_ns
                if stat.st_size > MAX_BYTES:
                    raise ValueError(f"over {MAX_BYTES} bytes")
                count = parse(path, path.read_text(errors="replace"))
            except (OSError, ValueError) as exc:
                why = str(exc) if isinstance(exc, ValueError) else (exc.strerror or str(exc))
                self._warn(path, mtime, why)
                continue
            if not _alive(count.pid, stat.st_mtime):
                continue  # stale: its process is gone (or the pid was reused since)
            self._warned.pop(path, None)
            out.append(count)
        return out

    def _warn(self, path: Path, mtime: int, why: str) -> None:
        if self._warned.get(path) == (mtime, why):
            return
        self._warned[path] = (mtime, why)
        log.warning("work: %s: %s; skipped", path, why)


def parse(path: Path, text: str) -> JobCount:
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
        values.get("workload") or path.name[: -len(SUFFIX)], job,
    )  # fmt: skip


def _alive(pid: int, written: float) -> bool:
    """The file's process runs, and started before the file was last written."""
    try:
        return psutil.Process(pid).create_time() <= written + 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
