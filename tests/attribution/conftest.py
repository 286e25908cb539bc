"""Real parts for the attribution tests: a one-node Slurm cluster, Kubernetes-shaped cgroups,
a kubelet pod-resources server.

- ``slurm_cluster`` (session): Debian's munged, slurmctld and slurmd on localhost, each on
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
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gpuagent_test_servers import find_binary, free_port

HERE = Path(__file__).resolve().parent




def _wait(check, what: str, timeout: float, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    tails = "\n".join(
        f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in logs if p.exists()
    )
    raise RuntimeError(f"{what} within {timeout:g}s\n{tails}")


class SlurmCluster:
    def __init__(self, root: Path):
        self.root = root
        self.host = socket.gethostname().split(".")[0]
        self.conf = root / "slurm.conf"
        self.munge_socket = root / "munge.socket"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        munged = find_binary("munged", "munge")
        ctld = find_binary("slurmctld", "slurmctld")
        slurmd = find_binary("slurmd", "slurmd")
        self.sbatch = find_binary("sbatch", "slurm-client")
        self.scontrol = find_binary("scontrol", "slurm-client")
        r = self.root
        for d in ("state", "spool", "munge"):
            (r / d).mkdir(mode=0o700, exist_ok=True)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        subprocess.run(
            [munged, f"--socket={self.munge_socket}", f"--key-file={key}",
             f"--pid-file={r / 'munge' / 'munged.pid'}", f"--log-file={r / 'munge.log'}",
             f"--seed-file={r / 'munge' / 'seed'}", "--force"],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        self.munged_pid = int((r / "munge" / "munged.pid").read_text())
        cpus = os.cpu_count() or 1
        self.conf.write_text(
            f"""ClusterName=gpuagenttest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r / "state"}
SlurmdSpoolDir={r / "spool"}
SlurmctldPidFile={r / "slurmctld.pid"}
SlurmdPidFile={r / "slurmd.pid"}
SlurmctldLogFile={r / "slurmctld.log"}
SlurmdLogFile={r / "slurmd.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/linear
ReturnToService=2
SlurmctldParameters=enable_configless
NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=gpuq Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""
        )
        for argv in ([ctld, "-D", "-i"], [slurmd, "-D", "-N", self.host]):
            self.procs.append(
                subprocess.Popen(
                    argv, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )  # fmt: skip
        logs = [r / "slurmctld.log", r / "slurmd.log", r / "munge.log"]

        def node_up() -> bool:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(
                        f"{p.args[0]} exited with {p.returncode}: "
                        + "".join(x.read_text(errors="replace")[-1500:] for x in logs if x.exists())
                    )
            out = self.run(self.scontrol, "show", "node", self.host, check=False)
            return "State=IDLE" in out.stdout or "State=MIXED" in out.stdout

        _wait(node_up, "the Slurm node did not come up", 60, logs)

    def run(self, *argv, check=True, timeout=30):
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, check=check, timeout=timeout
        )

    def submit(self, command: str, **options: str) -> str:
        args = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
        out = self.run(
            self.sbatch, "--parsable", f"--output={self.root / 'job-%j.out'}", *args,
            f"--wrap={command}",
        )  # fmt: skip
        return out.stdout.strip().split(";")[0]

    def pids(self, job_id: str) -> list[int]:
        out = self.run(self.scontrol, "listpids", job_id, check=False)
        return [int(line.split()[0]) for line in out.stdout.splitlines()[1:] if line.split()]

    def wait_running(self, job_id: str, match: str, timeout: float = 30) -> int:
        """The pid of the job's process whose command line contains ``match``, once it runs."""
        found: list[int] = []

        def running() -> bool:
            for pid in self.pids(job_id):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                if match.encode() in cmd:
                    found.append(pid)
                    return True
            return False

        _wait(running, f"job {job_id} did not start {match!r}", timeout,
              [self.root / "slurmctld.log", self.root / "slurmd.log"])  # fmt: skip
        return found[0]

    def cancel(self, job_id: str) -> None:
        self.run(find_binary("scancel", "slurm-client"), job_id, check=False)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        try:
            os.kill(self.munged_pid, signal.SIGTERM)
        except (OSError, AttributeError):
            pass


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster needs root (slurmd starts jobs as their user)")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


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

    rc = protoc.main(
        ["protoc", f"-I{HERE}", f"--python_out={out}", str(HERE / "podresources_v1.proto")]
    )
    assert rc == 0, "protoc failed on podresources_v1.proto"
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "podresources_v1_pb2", out / "podresources_v1_pb2.py"
    )
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
