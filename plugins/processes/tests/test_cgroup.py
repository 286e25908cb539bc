"""cgroup paths -> owner tags: every layout of the kubelet's two drivers, Docker, Slurm and
systemd, as /proc/PID/cgroup spells them on v1, v2 and hybrid hosts."""

from __future__ import annotations

import pytest

from gpuagent.plugins.processes import cgroup, slurm

UID = "1f2e3d4c-5b6a-4789-8abc-def012345678"
UNDER = UID.replace("-", "_")
CID = "0123456789abcdef" * 4
SYSTEMD_POD = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UNDER}.slice"


@pytest.mark.parametrize(
    "path, tags",
    [
        (f"/kubepods/burstable/pod{UID}/{CID}", {"k8s_pod_uid": UID, "container_id": CID}),
        (f"/kubepods/pod{UID}/{CID}", {"k8s_pod_uid": UID, "container_id": CID}),
        (f"/kubepods/besteffort/pod{UID}/crio-{CID}",
         {"k8s_pod_uid": UID, "container_id": CID, "container_runtime": "cri-o"}),
        (f"{SYSTEMD_POD}/cri-containerd-{CID}.scope",
         {"k8s_pod_uid": UID, "container_id": CID, "container_runtime": "containerd"}),
        (f"{SYSTEMD_POD}/crio-{CID}.scope",
         {"k8s_pod_uid": UID, "container_id": CID, "container_runtime": "cri-o"}),
        (f"{SYSTEMD_POD}/docker-{CID}.scope",
         {"k8s_pod_uid": UID, "container_id": CID, "container_runtime": "docker"}),
        (f"/kubepods.slice/kubepods-pod{UNDER}.slice/cri-containerd-{CID}.scope",
         {"k8s_pod_uid": UID, "container_id": CID, "container_runtime": "containerd"}),
        (f"/docker/{CID}", {"container_id": CID, "container_runtime": "docker"}),
        (f"/system.slice/docker-{CID}.scope", {"container_id": CID, "container_runtime": "docker"}),
        ("/slurm/uid_1000/job_4242/step_0", {"slurm_job_id": "4242", "slurm_step": "0"}),
        ("/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0",
         {"slurm_job_id": "77", "slurm_step": "batch"}),
        ("/system.slice/trainer.service", {"systemd_unit": "trainer.service"}),
        ("/user.slice/user-1000.slice/user@1000.service/app.slice/llm.service",
         {"systemd_unit": "llm.service"}),
        ("/user.slice/user-1000.slice/session-4.scope", {}),
        ("/", {}),
    ],
)  # fmt: skip
def test_layouts(path, tags):
    info = cgroup.from_path(path)
    assert info.tags == tags and info.reasons == []


@pytest.mark.parametrize(
    "path",
    ["/kubepods/burstable/podnot-a-uid/abc", f"/kubepods.slice/kubepods-pod{UNDER}.slice/weird-1"],
)
def test_unknown_container_layouts_name_the_reason(path):
    assert cgroup.from_path(path).reasons == [cgroup.UNKNOWN_LAYOUT]


def test_pod_pause_cgroup_and_crio_conmon_are_not_unknown():
    assert cgroup.from_path(f"/kubepods/burstable/pod{UID}").reasons == []
    assert cgroup.from_path(f"{SYSTEMD_POD}/crio-conmon-{CID}.scope").reasons == []


def test_hybrid_host_reads_every_hierarchy():
    text = f"12:memory:/kubepods/burstable/pod{UID}/{CID}\n1:name=systemd:/system.slice/containerd.service\n0::/\n"
    info = cgroup.attribute(text)
    assert info.tags == {
        "k8s_pod_uid": UID,
        "container_id": CID,
        "systemd_unit": "containerd.service",
    }


def test_slurm_environment():
    env = b"PATH=/bin\0SLURM_JOB_ID=12\0SLURM_STEP_ID=3\0SLURM_JOB_USER=ann\0SLURM_JOB_ACCOUNT=phys\0SLURM_JOB_PARTITION=gpu\0"
    assert slurm.from_environ(env) == {
        "slurm_job_id": "12",
        "slurm_step": "3",
        "slurm_user": "ann",
        "slurm_account": "phys",
        "slurm_partition": "gpu",
    }
    assert slurm.from_environ(b"SLURM_JOBID=9\0SLURM_STEPID=0\0") == {
        "slurm_job_id": "9",
        "slurm_step": "0",
    }
    assert slurm.from_environ(b"HOME=/root\0") == {}


def test_listpids_output():
    text = (
        "PID      JOBID    STEPID   LOCALID GLOBALID\n"
        "18990    1        batch    0       0\n"
        "18991    1        4294967291 -     -\n"
        "20000    2        0        0       0\n"
    )
    assert slurm.parse_listpids(text) == {
        18990: {"slurm_job_id": "1", "slurm_step": "batch"},
        18991: {"slurm_job_id": "1", "slurm_step": "batch"},
        20000: {"slurm_job_id": "2", "slurm_step": "0"},
    }
