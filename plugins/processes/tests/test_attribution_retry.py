"""A failed owner look-up is asked again after a while, not every cycle: for an unprivileged
agent that is every other user's process, and each ask may fork `scontrol listpids`."""

from __future__ import annotations

import os
import time

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
    script.write_text(
        f"#!/bin/sh\necho run >> {runs}\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n"
    )
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
    scontrol, _runs_file = _failing_scontrol(tmp_path)
    attribute = Attributor(proc=str(proc), listpids=ListPids(scontrol, timeout=5, clock=clock), retry_s=30, clock=clock)
    assert attribute(77).reasons == [ENVIRON_UNREADABLE, LISTPIDS_FAILED]
    # the pid is reused by a process whose environment can be read: /proc/77 is a new entry (its
    # inode time moves; the file system's clock is coarse, so make sure it did)
    entry = proc / "77"
    before = os.stat(entry).st_ctime_ns
    (entry / "environ").rmdir()
    (entry / "environ").write_bytes(b"SLURM_JOB_ID=9\x00SLURM_STEP_ID=0\x00")
    for n in range(1000):
        if os.stat(entry).st_ctime_ns != before:
            break
        time.sleep(0.005)
        (entry / f"marker{n}").write_text("")
    assert os.stat(entry).st_ctime_ns != before
    clock.t += 1  # well inside retry_s: the new process is looked up anyway
    owner = attribute(77)
    assert owner.reasons == [] and owner.tags.get("slurm_job_id") == "9"
