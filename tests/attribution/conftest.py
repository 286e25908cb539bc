"""Real parts for the attribution tests: a one-node Slurm cluster, Kubernetes-shaped cgroups,
a kubelet pod-resources server.

- ``slurm_cluster`` (session; the repository's conftest.py, tests/servers.py SlurmCluster, shared
  with the health actions' tests): Debian's munged, slurmctld and slurmd on localhost, each on
  its own socket or free port, all state in a temporary directory (proctrack/linuxproc,
  task/none: no cgroup or systemd needed). ``submit(command) -> job id`` runs a batch job;
  ``pids(job_id)`` its processes. Needs root (slurmd starts jobs as their user); skipped with
  the reason otherwise, failed under CI when the packages are missing.
- ``cgroup_mounts``: the writable cgroup hierarchies of this machine (the v2 unified mount,
  wherever it is, and v1 ``name=systemd`` / ``memory``), each able to ``place(pid, path)`` a
  real process in a real cgroup with a Kubernetes-shaped path.
- ``pod_resources_server``: no kubelet can run here, so a gRPC server compiled at test time
  (grpcio-tools' protoc) from tests/attribution/podresources_v1.proto, the v1 API subset
  `List` uses, answers on a unix socket; the agent's client (descriptors built in code) talks
  to it over the wire, so both encodings must agree.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


# -- cgroups ------------------------------------------------------------------------------------
class CgroupMount:
    """One writable cgroup hierarchy: ``place(pid, path)`` makes ``path`` and moves pid into it."""

    def __init__(self, root: Path, version: int, controllers: str):
        self.root = root
        self.version = version
        self.controllers = controllers
        self.made: list[Path] = []

    def place(self, pid: int, path: str) -> None:
        target = self.root / path.strip("/")
        parts = target.relative_to(self.root).parts
        for i in range(1, len(parts) + 1):
            d = self.root.joinpath(*parts[:i])
            if not d.exists():
                d.mkdir()
                self.made.append(d)
        (target / "cgroup.procs").write_text(f"{pid}\n")

    def cleanup(self) -> None:
        for d in reversed(self.made):
            try:
                d.rmdir()
            except OSError:
                pass
        self.made.clear()


def _mounts() -> list[tuple[str, str, str]]:
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        dev, mnt, fstype, opts, *_ = line.split()
        if fstype in ("cgroup", "cgroup2"):
            out.append((mnt, fstype, opts))
    return out


@pytest.fixture
def cgroup_mounts():
    """Every cgroup hierarchy this machine lets a test write: the v2 unified mount and the v1
    name=systemd hierarchy (where the kubelet's and systemd's paths live on a hybrid host).
    Skipped, with the reason, only where the kernel refuses all of them."""
    found: list[CgroupMount] = []
    refused: list[str] = []
    for mnt, fstype, opts in _mounts():
        version = 2 if fstype == "cgroup2" else 1
        controllers = "" if version == 2 else ",".join(
            o for o in opts.split(",") if o not in ("rw", "ro", "nosuid", "nodev", "noexec", "relatime")
        )  # fmt: skip
        if version == 1 and controllers not in ("name=systemd", "memory"):
            continue
        probe = Path(mnt) / f"gpuagent-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as exc:
            refused.append(f"{mnt}: {exc.strerror}")
            continue
        found.append(CgroupMount(Path(mnt), version, controllers))
    if not found:
        pytest.skip(f"no writable cgroup hierarchy: {'; '.join(refused) or 'none mounted'}")
    yield found
    for m in found:
        m.cleanup()


@pytest.fixture
def sleeper():
    """start() -> a real process (sleeping) that the test may move between cgroups."""
    procs: list[subprocess.Popen] = []

    def start(env: dict | None = None) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
        p.wait()


# -- kubelet pod-resources ----------------------------------------------------------------------
def _compiled_proto(out: Path):
    """podresources_v1.proto compiled by grpcio-tools into ``out``; the generated module."""
    pytest.importorskip("grpc", reason="grpcio missing: pip install 'gpuagent[k8s]'")
    pytest.importorskip("grpc_tools", reason="grpcio-tools missing: pip install 'gpuagent[test]'")
    from grpc_tools import protoc

    rc = protoc.main(["protoc", f"-I{HERE}", f"--python_out={out}", str(HERE / "podresources_v1.proto")])
    assert rc == 0, "protoc failed on podresources_v1.proto"
    import importlib.util

    spec = importlib.util.spec_from_file_location("podresources_v1_pb2", out / "podresources_v1_pb2.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class PodResourcesServer:
    """`v1.PodResourcesLister/List` on a unix socket, answering ``self.pods``:
    [(namespace, pod, [(container, resource, [device ids])])]. ``delay`` stalls each answer
    (a kubelet that times out); ``stop()`` leaves a socket file nobody listens on."""

    def __init__(self, socket_path: Path, pb2):
        import grpc

        self.socket = socket_path
        self.pb2 = pb2
        self.pods: list = []
        self.delay = 0.0
        self.calls = 0
        server = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(2))
        handler = grpc.unary_unary_rpc_method_handler(
            self._list,
            request_deserializer=pb2.ListPodResourcesRequest.FromString,
            response_serializer=lambda m: m.SerializeToString(),
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1.PodResourcesLister", {"List": handler}),)
        )
        server.add_insecure_port(f"unix://{socket_path}")
        server.start()
        self.server = server

    def _list(self, request, context):
        self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        resp = self.pb2.ListPodResourcesResponse()
        for namespace, pod, containers in self.pods:
            p = resp.pod_resources.add(name=pod, namespace=namespace)
            for cname, resource, ids in containers:
                c = p.containers.add(name=cname)
                c.devices.add(resource_name=resource, device_ids=ids)
        return resp

    def stop(self) -> None:
        self.server.stop(0).wait()


@pytest.fixture
def pod_resources_server(tmp_path):
    pb2 = _compiled_proto(tmp_path)
    server = PodResourcesServer(tmp_path / "kubelet.sock", pb2)
    yield server
    server.stop()
