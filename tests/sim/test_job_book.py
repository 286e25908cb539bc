"""The simulated Slurm jobs of `sim fleet --with-jobs` (gpuagent.sim.jobs) on their own: GPUs in
pairs, about one slot in four idle, the same history for a seed, pids no real process has."""

from __future__ import annotations

from gpuagent.sim.jobs import PID_BASE, JobBook

SLOT = 1800.0


def test_a_pair_of_gpus_runs_one_job_per_slot_and_a_seed_gives_the_same_history():
    book = JobBook(seed=7, gpus=4)
    for slot in range(50):
        t = slot * SLOT + 1
        assert book.job_id(0, t) == book.job_id(1, t)  # a pair shares its job
        assert book.job_id(0, t) == JobBook(seed=7, gpus=4).job_id(0, t)
    idle = sum(book.job_id(2, slot * SLOT) is None for slot in range(400))
    assert 60 < idle < 140  # about one slot in four (a seeded hash)
    assert [book.job_id(0, s * SLOT) for s in range(20)] != [
        JobBook(seed=8, gpus=4).job_id(0, s * SLOT) for s in range(20)
    ]


def test_each_jobs_process_has_a_pid_above_linuxs_largest_and_an_owner():
    book = JobBook(seed=1, gpus=2)
    t = next(s * SLOT for s in range(100) if book.job_id(0, s * SLOT) is not None)
    (pid0, _), (pid1, _) = book.processes(0, t)[0], book.processes(1, t)[0]
    assert pid0 >= PID_BASE and pid1 >= PID_BASE and pid0 != pid1
    owner = book.owner(pid0)
    assert owner["slurm_job_id"] == str(book.job_id(0, t)) == book.owner(pid1)["slurm_job_id"]
    assert owner["slurm_partition"] == "gpu" and book.owner(12345) is None
    idle_t = next(s * SLOT for s in range(100) if book.job_id(0, s * SLOT) is None)
    assert book.processes(0, idle_t) == []
