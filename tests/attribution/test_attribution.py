"""Attribution end to end on real parts: a Slurm job's process and processes in real cgroups
with Kubernetes-shaped paths, shown to the simulator with @proc, through `gpuagent run
--once --test`; the kubelet's pod-resources API over gRPC; and the reasons counted when a
look-up fails."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from lineprotocol_parser import parse

from gpuagent.plugins.processes import ProcessesCollector
from gpuagent.plugins.processes.attribution import Attributor
from gpuagent.plugins.processes.slurm import ListPids
from gpuagent.testing import make_collector

CONTAINER = "4f1c0b9e2d7a4c8e9b3f6a1d0e5c7b2a8f9e0d1c2b3a4f5e6d7c8b9a0f1e2d3c"


def run_once(spec: str, *extra: str) -> list[tuple[str, dict[str, str], dict]]:
    """`gpuagent run --once --test --simulate SPEC`: (measurement, tags, fields) per line."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("GPUAGENT_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "gpuagent", "run", "--once", "--test", "--simulate", spec, *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [(m, tags, fields) for m, tags, fields, _ in parse(done.stdout)]


def pod_paths(pod_uid: str) -> dict[str, str]:
    """The cgroup path of a container in a Burstable pod, per driver and runtime."""
    under = pod_uid.replace("-", "_")
    systemd = f"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{under}.slice"
    return {
        "cgroupfs": f"kubepods/burstable/pod{pod_uid}/{CONTAINER}",
        "cgroupfs-crio": f"kubepods/burstable/pod{pod_uid}/crio-{CONTAINER}",
        "systemd-containerd": f"{systemd}/cri-containerd-{CONTAINER}.scope",
        "systemd-crio": f"{systemd}/crio-{CONTAINER}.scope",
        "systemd-docker": f"{systemd}/docker-{CONTAINER}.scope",
    }


def test_slurm_job_and_pod_processes_come_out_of_run_once(slurm_cluster, cgroup_mounts, sleeper):
    job = slurm_cluster.submit("sleep 300", account="physics", job_name="train")
    try:
        job_pid = slurm_cluster.wait_running(job, "sleep 300")
        pod_uid = str(uuid.uuid4())
        pod_proc = sleeper()
        for mount in cgroup_mounts:
            layout = "systemd-containerd" if mount.version == 2 else "cgroupfs"
            mount.place(pod_proc.pid, pod_paths(pod_uid)[layout])
        spec = f"l40s:2@proc=0:{job_pid}:4096@proc=1:{pod_proc.pid}:2048"
        lines = run_once(spec)
    finally:
        slurm_cluster.cancel(job)
    procs = {t["pid"]: (t, rest) for m, t, rest in lines if m == "gpu_process"}
    assert set(procs) == {str(job_pid), str(pod_proc.pid)}
    tags, fields = procs[str(job_pid)]
    assert tags["gpu"] == "0" and tags["slurm_job_id"] == job
    assert tags["slurm_account"] == "physics" and tags["slurm_partition"] == "gpuq"
    assert fields["used_memory_bytes"] == 4096 << 20 and fields["name"] == "sleep"
    tags, fields = procs[str(pod_proc.pid)]
    assert tags["gpu"] == "1" and tags["k8s_pod_uid"] == pod_uid
    assert tags["container_id"] == CONTAINER and "slurm_job_id" not in tags
    jobs = {t["gpu"]: t for m, t, _ in lines if m == "gpu_job"}
    assert jobs["0"]["slurm_job_id"] == job and jobs["1"]["k8s_pod_uid"] == pod_uid
    # Owner names never reach the other GPU measurements (cardinality).
    for m, t, _ in lines:
        if m not in ("gpu_process", "gpu_job"):
            assert not {"slurm_job_id", "k8s_pod_uid", "container_id", "pid"} & set(t), m


@pytest.mark.parametrize("layout", list(pod_paths("x")))
def test_every_pod_layout_on_every_writable_hierarchy(
    layout, cgroup_mounts, sleeper, simulated_fleet, sim_clock, recording_accumulator
):
    pod_uid = str(uuid.uuid4())
    for mount in cgroup_mounts:
        proc = sleeper()
        mount.place(proc.pid, pod_paths(pod_uid)[layout])
        owner = Attributor()(proc.pid)
        assert owner.tags["k8s_pod_uid"] == pod_uid, (mount.root, layout)
        assert owner.tags["container_id"] == CONTAINER
        assert owner.reasons == []


def test_service_process_carries_its_unit(cgroup_mounts, sleeper):
    proc = sleeper()
    for mount in cgroup_mounts:
        mount.place(proc.pid, "system.slice/gpuagent-test-trainer.service")
    assert Attributor()(proc.pid).tags["systemd_unit"] == "gpuagent-test-trainer.service"


def test_unknown_layout_is_counted_and_the_point_still_written(
    cgroup_mounts, sleeper, simulated_fleet, sim_clock, recording_accumulator
):
    proc = sleeper()
    for mount in cgroup_mounts:
        mount.place(proc.pid, "kubepods/burstable/not-a-pod/not-a-container")
    machine = simulated_fleet(f"l40s@proc=0:{proc.pid}", scenario="training")
    sim_clock.advance(10)
    make_collector(machine, cls=ProcessesCollector).collect(recording_accumulator)
    (point,) = recording_accumulator.by_measurement("gpu_process")
    assert point.tags["pid"] == str(proc.pid) and "k8s_pod_uid" not in point.tags
    assert point.fields["attribution_missing"] == "cgroup_unknown_layout"
    (counts,) = recording_accumulator.by_measurement("gpu_attribution")
    assert counts.fields["cgroup_unknown_layout_total"] == 1


def test_listpids_names_the_job_and_step(slurm_cluster):
    job = slurm_cluster.submit("sleep 301")
    try:
        pid = slurm_cluster.wait_running(job, "sleep 301")
        lookup = ListPids(slurm_cluster.scontrol)
        os.environ["SLURM_CONF"] = str(slurm_cluster.conf)  # scontrol finds the test cluster
        try:
            assert lookup.lookup(pid) == {"slurm_job_id": job, "slurm_step": "batch"}
        finally:
            del os.environ["SLURM_CONF"]
    finally:
        slurm_cluster.cancel(job)


def test_unreadable_environ_falls_back_to_listpids_or_counts_the_reason(slurm_cluster):
    """An unprivileged agent (uid nobody) cannot read a root job's environment: the job comes
    from `scontrol listpids` where Slurm answers it, else both reasons are named."""
    import json
    import pwd

    nobody = pwd.getpwnam("nobody").pw_uid
    job = slurm_cluster.submit("sleep 302")
    try:
        pid = slurm_cluster.wait_running(job, "sleep 302")
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # the agent as nobody: privileges dropped, then the look-up
            try:
                os.close(read)
                os.environ["SLURM_CONF"] = str(slurm_cluster.conf)
                os.setgid(nobody)
                os.setuid(nobody)
                owner = Attributor(listpids=ListPids(slurm_cluster.scontrol, timeout=2))(pid)
                os.write(write, json.dumps({"tags": owner.tags, "reasons": owner.reasons}).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as fh:
            result = json.loads(fh.read() or "{}")
        os.waitpid(child, 0)
    finally:
        slurm_cluster.cancel(job)
    if result.get("tags", {}).get("slurm_job_id") is not None:
        assert result == {"tags": {"slurm_job_id": job, "slurm_step": "batch"}, "reasons": []}
    else:
        assert result == {"tags": {}, "reasons": ["environ_unreadable", "slurm_listpids_failed"]}
