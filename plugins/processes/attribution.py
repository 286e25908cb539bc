"""One process's owner: Slurm job, Kubernetes pod and container, systemd unit.

Joins what cgroup.py reads from /proc/PID/cgroup and what slurm.py reads from
/proc/PID/environ (or `scontrol listpids`). A look-up that fails leaves its tags out and
names why (a reason); the caller counts the reasons and still writes the process's point.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuagent.plugins.processes import cgroup, slurm

PID_VANISHED = "pid_vanished"
CGROUP_UNREADABLE = "cgroup_unreadable"

# Tags (in this order) that name the workload on gpu_process and gpu_job points.
OWNER_TAGS = (
    "slurm_job_id",
    "slurm_step",
    "slurm_user",
    "slurm_account",
    "slurm_partition",
    "k8s_pod_uid",
    "container_id",
    "systemd_unit",
)


@dataclass
class Owner:
    tags: dict[str, str] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)  # container_runtime
    reasons: list[str] = field(default_factory=list)


class Attributor:
    """``attributor(pid)`` -> Owner, remembered while /proc/PID is the same process (its
    inode time is set when the entry appears): a process's cgroup and environment are read
    once, not every cycle. A look-up that failed (its reasons named) is asked again after
    ``retry_s``, not every cycle: for an unprivileged agent that is every other user's process,
    and each ask may fork `scontrol listpids`."""

    def __init__(
        self,
        proc: str = "/proc",
        listpids: slurm.ListPids | None = None,
        retry_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.proc = proc
        self.listpids = listpids
        self.retry_s = retry_s
        self.clock = clock
        self._known: dict[int, tuple[int, Owner, float | None]] = {}  # pid -> (stamp, owner, retry at)

    def new_cycle(self) -> None:
        if self.listpids is not None:
            self.listpids.reset()

    def __call__(self, pid: int) -> Owner:
        try:
            stamp = os.stat(f"{self.proc}/{pid}").st_ctime_ns
        except OSError:
            self._known.pop(pid, None)
            return Owner(reasons=[PID_VANISHED])
        known = self._known.get(pid)
        if known is not None and known[0] == stamp and (known[2] is None or self.clock() < known[2]):
            return known[1]
        owner = self._look_up(pid)
        if PID_VANISHED in owner.reasons:
            self._known.pop(pid, None)
        else:
            self._known[pid] = (stamp, owner, self.clock() + self.retry_s if owner.reasons else None)
        return owner

    def _look_up(self, pid: int) -> Owner:
        owner = Owner()
        try:
            info = cgroup.attribute(cgroup.read(pid, self.proc))
        except (FileNotFoundError, ProcessLookupError):
            return Owner(reasons=[PID_VANISHED])
        except OSError:
            info = cgroup.CgroupInfo(reasons=[CGROUP_UNREADABLE])
        runtime = info.tags.pop("container_runtime", None)
        if runtime:
            owner.fields["container_runtime"] = runtime
        owner.tags.update(info.tags)
        owner.reasons.extend(info.reasons)
        try:
            owner.tags.update(slurm.from_environ(slurm.read_environ(pid, self.proc)))
        except (FileNotFoundError, ProcessLookupError):
            return Owner(reasons=[PID_VANISHED])
        except OSError:  # PermissionError: another user's process and no root
            if "slurm_job_id" in owner.tags:
                return owner  # Slurm's cgroup path named the job already
            if self.listpids is None or self.listpids.scontrol is None:
                return owner  # no Slurm on this host: the environment would name no job
            job = self.listpids.lookup(pid)
            if job is not None:
                for key, value in job.items():
                    owner.tags.setdefault(key, value)
            else:
                owner.reasons.append(slurm.ENVIRON_UNREADABLE)
                if self.listpids.error:
                    owner.reasons.append(slurm.LISTPIDS_FAILED)
        return owner

    def keep_only(self, pids: set[int]) -> None:
        for pid in self._known.keys() - pids:
            del self._known[pid]
