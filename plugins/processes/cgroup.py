"""Who a process belongs to, from its cgroup path (/proc/PID/cgroup).

Each line of /proc/PID/cgroup is ``HIERARCHY:CONTROLLERS:PATH``; cgroup v2 has one line
``0::PATH``, v1 one line per hierarchy (``name=systemd``, ``memory``, ``cpu,cpuacct`` ...), and a
hybrid host both. The path names the workload the way whoever made the cgroup spelt it:

- Kubernetes, cgroupfs driver: ``/kubepods/burstable/pod<uid>/<container id>`` (also
  ``/kubepods/pod<uid>/...`` for Guaranteed pods, ``besteffort``; CRI-O writes
  ``crio-<id>``, Docker ``docker-<id>`` in some versions);
- Kubernetes, systemd driver: ``/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid with _ for ->.slice/cri-containerd-<id>.scope`` (``crio-<id>``,
  ``docker-<id>`` for the other runtimes);
- Docker alone: ``/docker/<id>`` (cgroupfs) or ``/system.slice/docker-<id>.scope`` (systemd);
- Slurm's cgroup plugins: ``/slurm/uid_<uid>/job_<id>/step_<step>`` (v1) or
  ``/system.slice/slurmstepd.scope/job_<id>/step_<step>/...`` (v2);
- a systemd service: ``/system.slice/<name>.service`` (or a user's ``.../app.slice/x.service``).

``attribute(lines)`` returns the tags it could read and, when a path looks like a container
or pod but matches no layout above, the reason ``cgroup_unknown_layout``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# A container id: 64 hex digits from Docker, containerd and CRI-O.
_ID = r"[0-9a-f]{64}"
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
# One pod component, either driver: "pod<uid>" (cgroupfs) or "kubepods[-qos]-pod<uid>.slice".
_POD = re.compile(rf"^(?:kubepods(?:-[a-z]+)*-)?pod({_UID})(?:\.slice)?$")
# One container component: bare id (cgroupfs), or runtime-prefixed, with ".scope" under systemd.
_CONTAINER = re.compile(rf"^(?:(cri-containerd|crio|docker|containerd)-)?({_ID})(?:\.scope)?$")
_CONMON = re.compile(rf"^crio-conmon-{_ID}(?:\.scope)?$")  # CRI-O's monitor, not the container
_SLURM_JOB = re.compile(r"^job_(\d+)$")
_SLURM_STEP = re.compile(r"^step_(\w+)$")
_UNIT = re.compile(r"^[^/]+\.service$")
_CONTAINERISH = ("kubepods", "docker", "containerd", "crio", "libpod")

UNKNOWN_LAYOUT = "cgroup_unknown_layout"


@dataclass
class CgroupInfo:
    tags: dict[str, str] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)


def parse_lines(text: str) -> list[tuple[str, str, str]]:
    """(hierarchy id, controllers, path) per line of /proc/PID/cgroup."""
    out = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out.append((parts[0], parts[1], parts[2]))
    return out


def paths(lines: list[tuple[str, str, str]]) -> list[str]:
    """The distinct paths, the v2 path (or v1 name=systemd) first: the one a service lives in."""
    first = [p for h, c, p in lines if h == "0" or c == "name=systemd"]
    rest = [p for h, c, p in lines if not (h == "0" or c == "name=systemd")]
    seen: list[str] = []
    for p in first + rest:
        if p not in seen:
            seen.append(p)
    return seen


def from_path(path: str) -> CgroupInfo:
    """Tags named by one cgroup path."""
    info = CgroupInfo()
    parts = [p for p in path.split("/") if p]
    pod_at = None
    for i, part in enumerate(parts):
        m = _POD.match(part)
        if m:
            info.tags["k8s_pod_uid"] = m.group(1).replace("_", "-")
            pod_at = i
    kube = any(p.startswith("kubepods") for p in parts)
    if pod_at is not None:
        for part in parts[pod_at + 1 :]:
            m = _CONTAINER.match(part)
            if m:
                info.tags["container_id"] = m.group(2)
                if m.group(1):
                    info.tags["container_runtime"] = _RUNTIMES[m.group(1)]
                break
    elif not kube:
        # Outside Kubernetes: Docker's own cgroups, either driver.
        for i, part in enumerate(parts):
            m = _CONTAINER.match(part)
            if m and (m.group(1) or (i > 0 and parts[i - 1] == "docker")):
                info.tags["container_id"] = m.group(2)
                info.tags["container_runtime"] = _RUNTIMES[m.group(1) or "docker"]
                break
    for i, part in enumerate(parts):
        m = _SLURM_JOB.match(part)
        if m and (i == 0 or parts[i - 1].startswith(("uid_", "slurm")) or "slurm" in path):
            info.tags["slurm_job_id"] = m.group(1)
            if i + 1 < len(parts):
                step = _SLURM_STEP.match(parts[i + 1])
                if step:
                    info.tags["slurm_step"] = step.group(1)
            break
    units = [p for p in parts if _UNIT.match(p) and not p.startswith("user@")]
    if units:
        info.tags["systemd_unit"] = units[-1]
    looks_contained = kube or any(any(word in part for word in _CONTAINERISH) for part in parts)
    if looks_contained and "container_id" not in info.tags and not any(_CONMON.match(p) for p in parts):
        if not (pod_at is not None and pod_at == len(parts) - 1):  # the pod's own (pause) cgroup
            info.reasons.append(UNKNOWN_LAYOUT)
    return info


_RUNTIMES = {
    "cri-containerd": "containerd",
    "containerd": "containerd",
    "crio": "cri-o",
    "docker": "docker",
}


def attribute(text: str) -> CgroupInfo:
    """Tags from the whole of /proc/PID/cgroup: the first path that names each tag wins."""
    out = CgroupInfo()
    unknown = False
    for path in paths(parse_lines(text)):
        info = from_path(path)
        for key, value in info.tags.items():
            out.tags.setdefault(key, value)
        unknown = unknown or bool(info.reasons)
    if unknown and "container_id" not in out.tags:
        out.reasons.append(UNKNOWN_LAYOUT)
    return out


def read(pid: int, proc: str = "/proc") -> str:
    """/proc/PID/cgroup (FileNotFoundError / ProcessLookupError when the process is gone)."""
    with open(f"{proc}/{pid}/cgroup", encoding="utf-8", errors="replace") as fh:
        return fh.read()
