"""A failed owner look-up is asked again after a while, not every cycle: for an unprivileged
agent that is every other user's process, and each ask may fork `scontrol listpids`."""

from __future__ import annotations

import os

from gpuagent.plugins.processes.attribution import Attributor
from gpuagent.plugins.processes.slurm import ENVIRON_UNREADABLE, LISTPIDS_FAILED, ListPids


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _proc_with_unreadable_environ(tmp_path, pid: int):
    proc = tmp_path / "proc"
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text("0::/user.slice/user-1000.slice/session-4.scope\n")
    (proc / str(pid) / "environ").mkdir()  # reading it fails with an OSError, as another user's would
    return proc


def _failing_scontrol(tmp_path):
    """A real executable that records each run and fails as scontrol does without slurmctld."""
    runs = tmp_path / "runs"
    script = tmp_path / "scontrol"
    script.write_text(f"#!/bin/sh\necho run >> {runs}\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n")
    script.chmod(0o755)
    return str(script), runs


def _runs(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_failed_look_up_stands_for_retry_s_then_is_asked_again(tmp_path):
    clock = Clock()
    proc = _proc_with_unreadable_environ(tmp_path, 4242)
    scontrol, runs = _failing_scontrol(tmp_path)
    listpids = ListPids(scontrol, timeout=5, retry_s=30, clock=clock)
    attribute = Attributor(proc=str(proc), listpids=listpids, retry_s=30, clock=clock)

    seen = []
    for _cycle in range(10):  # ten 1 s cycles
        attribute.new_cycle()
        seen.append(attribute(4242).reasons)
        clock.t += 1
    # the same reasons every cycle (counted every cycle by the collector) ...
    assert seen == [[ENVIRON_UNREADABLE, LISTPIDS_FAILED]] * 10
    # ... from one fork of scontrol, not ten
    assert _runs(runs) == 1

    clock.t += 30
    attribute.new_cycle()
    assert attribute(4242).reasons == [ENVIRON_UNREADABLE, LISTPIDS_FAILED]
    assert _runs(runs) == 2


def test_a_failed_look_up_is_redone_at_once_for_a_new_process_with_the_same_pid(tmp_path):
    clock = Clock()
    proc = _proc_with_unreadable_environ(tmp_path, 77)
    attribute = Attributor(proc=str(proc), listpids=None, retry_s=30, clock=clock)
    assert attribute(77).reasons == []  # no Slurm here: the environment would name no job
    # the pid is reused by a process whose environment can be read: /proc/77 is a new entry
    (proc / "77" / "environ").rmdir()
    (proc / "77" / "environ").write_bytes(b"SLURM_JOB_ID=9\x00SLURM_STEP_ID=0\x00")
    st = os.stat(proc / "77")
    os.utime(proc / "77", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # not ctime; touch the entry
    (proc / "77" / "marker").write_text("")  # a new entry in the directory changes its ctime
    assert attribute(77).tags.get("slurm_job_id") == "9"
