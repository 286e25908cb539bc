"""Which Slurm job a process belongs to: its environment, else `scontrol listpids`.

slurmstepd starts every task of a job with SLURM_JOB_ID (and the step, user, account and
partition) in its environment, and children inherit it, so /proc/PID/environ names the job
without any prolog writing files. Reading another user's environ needs root (or the same
user): when it is refused, `scontrol listpids` (which asks the node's slurmstepds, through
the proctrack plugin, for the pids of each job step) still gives the job and step.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable

# Environment variable -> tag. SLURM_JOBID / SLURM_STEPID: the older spellings.
ENV_TAGS = (
    ("SLURM_JOB_ID", "slurm_job_id"),
    ("SLURM_JOBID", "slurm_job_id"),
    ("SLURM_STEP_ID", "slurm_step"),
    ("SLURM_STEPID", "slurm_step"),
    ("SLURM_JOB_USER", "slurm_user"),
    ("SLURM_JOB_ACCOUNT", "slurm_account"),
    ("SLURM_JOB_PARTITION", "slurm_partition"),
)
# slurm.h: SLURM_BATCH_SCRIPT and friends, as `scontrol listpids` prints their step ids.
_STEP_NAMES = {"4294967290": "interactive", "4294967291": "batch", "4294967292": "extern"}

ENVIRON_UNREADABLE = "environ_unreadable"
LISTPIDS_FAILED = "slurm_listpids_failed"


def from_environ(data: bytes) -> dict[str, str]:
    """Slurm's tags from the NUL-separated bytes of /proc/PID/environ."""
    env: dict[str, str] = {}
    for item in data.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key.startswith(b"SLURM_"):
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    tags: dict[str, str] = {}
    for var, tag in ENV_TAGS:
        text = env.get(var, "").strip()
        if text and tag not in tags:
            tags[tag] = text
    return tags


def read_environ(pid: int, proc: str = "/proc") -> bytes:
    with open(f"{proc}/{pid}/environ", "rb") as fh:
        return fh.read()


def parse_listpids(text: str) -> dict[int, dict[str, str]]:
    """`scontrol listpids` output (PID JOBID STEPID LOCALID GLOBALID) -> pid -> job and step."""
    out: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        cols = line.split()
        if len(cols) < 3 or not cols[0].isdigit() or not cols[1].isdigit():
            continue  # the header, or a line this parser does not know
        step = _STEP_NAMES.get(cols[2], cols[2])
        tags = {"slurm_job_id": cols[1]}
        if step != "-":
            tags["slurm_step"] = step
        out[int(cols[0])] = tags
    return out


class ListPids:
    """`scontrol listpids`, run at most once per collection and only when asked for."""

    def __init__(
        self,
        scontrol: str | None = None,
        timeout: float = 2.0,
        retry_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.scontrol = scontrol or shutil.which("scontrol")
        self.timeout = timeout
        self.retry_s = retry_s  # after a failed ask, the failure stands this long (no fork per cycle)
        self.clock = clock
        self._cache: dict[int, dict[str, str]] | None = None
        self.error: str | None = None
        self._failed_until = float("-inf")

    def reset(self) -> None:
        """A new cycle: ask again when asked (unless the last ask failed less than retry_s ago)."""
        if self.clock() >= self._failed_until:
            self._cache = None
            self.error = None

    def lookup(self, pid: int) -> dict[str, str] | None:
        """The job of ``pid``; None when Slurm does not know it or cannot be asked."""
        if self.scontrol is None:
            return None
        if self._cache is None:
            self._cache = {}
            try:
                done = subprocess.run(
                    [self.scontrol, "listpids"],
                    capture_output=True,
                    text=True,
                    timeout=self.timeout,
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                self._failed(str(exc))
                return None
            if done.returncode != 0:
                self._failed((done.stderr or done.stdout).strip()[:200])
                return None
            self._cache = parse_listpids(done.stdout)
        return self._cache.get(pid)

    def _failed(self, why: str) -> None:
        """Name the failure; it stands for retry_s (the cache stays empty meanwhile)."""
        self.error = f"scontrol listpids: {why}"
        self._failed_until = self.clock() + self.retry_s
