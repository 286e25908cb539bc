"""Simulated batch jobs for `gpuagent sim fleet --with-jobs`: which job holds which GPU when.

A backfilled host's GPUs are scheduled in pairs (a single GPU alone): time is cut into slots
of ``slot_s`` seconds, and in each slot each pair runs one job, or sits idle (about one slot
in four, from a seeded hash, so the history is the same for a given seed). A job's process on
each of its GPUs has a pid above Linux's largest (2^22), so it can never be mistaken for a
real process; ``JobHost`` stands in for the processes collector's /proc look-ups and names
each such pid's job as Slurm would (job id, user, account, partition).
"""

from __future__ import annotations

import hashlib

PID_BASE = 1 << 22  # Linux's PID_MAX_LIMIT: no real process has a pid this high
USERS = ("ana", "bo", "chen", "dev")
ACCOUNTS = ("vision", "llm", "speech")


def _hash01(*parts) -> float:
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / float(1 << 64)


class JobBook:
    def __init__(self, seed: int, gpus: int, slot_s: float = 1800.0):
        self.seed = int(seed)
        self.gpus = int(gpus)
        self.slot_s = float(slot_s)
        self.groups = (self.gpus + 1) // 2
        self._pids: dict[int, dict[str, str]] = {}

    def job_id(self, gpu: int, t: float) -> int | None:
        """The job on GPU ``gpu`` at machine time ``t`` (seconds), or None when it is idle."""
        slot, group = int(t // self.slot_s), gpu // 2
        if _hash01(self.seed, slot, group) < 0.25:
            return None
        return (self.seed % 10_000) * 100_000 + slot * self.groups + group + 1

    def processes(self, gpu: int, t: float) -> list[tuple[int, int | None]]:
        job = self.job_id(gpu, t)
        if job is None:
            return []
        pid = PID_BASE + (job * 8 + gpu % 2) % (1 << 30)
        if pid not in self._pids:
            self._pids[pid] = {
                "slurm_job_id": str(job),
                "slurm_user": USERS[job % len(USERS)],
                "slurm_account": ACCOUNTS[job % len(ACCOUNTS)],
                "slurm_partition": "gpu",
            }
        return [(pid, None)]

    def owner(self, pid: int) -> dict[str, str] | None:
        return self._pids.get(pid)


class JobHost:
    """The processes collector's host look-ups (see plugins/processes HostProcesses) for the
    book's simulated processes: a name, a user and the Slurm job, never a /proc read."""

    def __init__(self, book: JobBook, owner: type):
        self.book = book
        self.owner = owner  # the processes collector's Owner (agent/ imports no plugin)

    def new_cycle(self) -> None:
        pass

    def describe(self, pid: int):
        tags = self.book.owner(pid)
        if tags is None:
            return None, self.owner(reasons=["pid_vanished"])
        return {"name": "python3", "user": tags["slurm_user"]}, self.owner(tags=dict(tags))

    def keep_only(self, pids: set[int]) -> None:
        pass
