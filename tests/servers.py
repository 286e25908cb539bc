"""Real time-series servers for tests: InfluxDB 1.x (`influxd`) and VictoriaMetrics.

Both come from Debian's packages (`influxdb`, `victoria-metrics`) and run on
free loopback ports in a temporary directory. The pytest fixtures live in the
repository's root ``conftest.py``:

``influxdb_v1`` (session scope) -> ``InfluxdServer``, already running, database
    ``gpuagent`` created. Stable API (``gpuagent compare`` tests use it too):

    - ``url``                    ``"http://127.0.0.1:PORT"``
    - ``database``               ``"gpuagent"`` (created at start)
    - ``query(q, db=None, epoch="ns") -> list[dict]``  InfluxQL; returns the
      ``series`` list of the first result (``[]`` when empty); raises
      ``RuntimeError`` on an error answer.
    - ``points(q, db=None) -> list[dict]``  rows of all series as dicts
      (``{"time": ns, <tag>: ..., <field>: ...}``), tags of GROUP BY merged in.
    - ``write(lines, db=None)``  posts line protocol (str or list of lines,
      precision ns); raises ``RuntimeError`` unless the server answers 204.
    - ``create_database(name)`` / ``drop_database(name)``
    - ``stop()`` / ``start()``   stop the server and start it again on the same
      port and data directory (outage tests: use ``influxdb_v1_factory`` so a
      shared server is never stopped under another test)
    - ``running`` (bool)

``influxdb_v1_factory`` (function scope) -> ``make(auth=False) -> InfluxdServer``:
    a fresh, private server per call, stopped at the end of the test. With
    ``auth=True`` HTTP auth is on and an admin ``admin`` / ``admin-pass`` exists.

``victoria_metrics`` (session scope) / ``victoria_metrics_factory`` ->
    ``VictoriaMetricsServer``: ``url``, ``export(match, min_samples=0) ->
    list[dict]`` (the JSON lines of ``/api/v1/export``: ``{"metric": {...},
    "values": [...], "timestamps": [ms, ...]}``; it waits until min_samples
    samples are visible, as new series take about a second), ``stop()``,
    ``start()``. Line protocol posted to its ``/write?db=NAME`` gets a label
    ``db="NAME"``; ``/api/v2/write`` (the sink's v2 path) adds no db label. VictoriaMetrics takes
    ``/api/v2/write``, names a series
    ``<measurement>_<field>``, keeps numbers only (bool -> 1/0, strings are
    dropped) and stores millisecond timestamps. It is started with
    ``-search.latencyOffset=0s`` so the newest points are queryable at once.

A missing binary skips the test with the reason, or fails it when the
environment variable ``CI`` is set (CI must run these tests).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

INFLUXD = "influxd"
VICTORIA_METRICS = "victoria-metrics"


def find_binary(name: str, package: str) -> str:
    """Path of a server binary; skip (or fail under CI) with a clear reason when it is missing."""
    # /usr/sbin too: daemons (slurmctld, munged) live there and may be off a user's PATH.
    path = shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None
    )
    if path:
        return path
    import pytest

    reason = f"{name} not found: install the Debian package `{package}` (apt-get install {package})"
    if os.environ.get("CI"):
        pytest.fail(f"CI is set and {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(
    method: str, url: str, data: bytes | None = None, timeout: float = 10.0, headers: dict | None = None
) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class _PortTaken(RuntimeError):
    """The server could not bind its port: something took it after free_port() looked."""


class _Server:
    """A child process on a fixed port and directory that can be stopped and started again."""

    name = "server"

    def __init__(self, binary: str, root: Path):
        self.binary = binary
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen | None = None
        self._log = self.root / f"{self.name}.log"
        self._started_once = False

    def _argv(self) -> list[str]:
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 30.0) -> None:
        if self.running:
            return
        for attempt in range(3):
            try:
                self._start_once(timeout)
                self._started_once = True
                return
            except _PortTaken:
                # free_port() only found a port free a moment ago: a client's ephemeral port may
                # have taken it since. A first start moves to another; a restart keeps its URL.
                if self._started_once or attempt == 2:
                    raise
                self._move_ports()

    def _move_ports(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def _start_once(self, timeout: float) -> None:
        offset = self._log.stat().st_size if self._log.exists() else 0
        with open(self._log, "ab") as log:
            self._proc = subprocess.Popen(
                self._argv(), stdout=log, stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                with open(self._log, "rb") as log:
                    log.seek(offset)
                    tail = log.read().decode(errors="replace")[-2000:]
                error = _PortTaken if "address already in use" in tail else RuntimeError
                raise error(f"{self.name} exited with {self._proc.returncode}:\n{tail}")
            try:
                if self._ready():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready on {self.url} within {timeout:g}s")

    @contextlib.contextmanager
    def suspended(self):
        """The server stopped with SIGSTOP: connections are accepted by the kernel, never answered."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)
        try:
            yield self
        finally:
            self._proc.send_signal(signal.SIGCONT)

    def stop(self, timeout: float = 15.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        # The port must refuse connections before an outage test goes on.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) != 0:
                    return
            time.sleep(0.05)


class InfluxdServer(_Server):
    """influxd 1.x: line protocol on /write, InfluxQL on /query."""

    name = "influxd"
    database = "gpuagent"

    def __init__(self, binary: str, root: Path, auth: bool = False, max_row_limit: int = 0):
        super().__init__(binary, root)
        self.auth = auth
        self.max_row_limit = max_row_limit  # rows a non-chunked answer holds at most (0: all)
        self.rpc_port = free_port()
        self.admin = ("admin", "admin-pass") if auth else None
        self.config_file = self.root / "influxdb.conf"
        self._write_config()
        self._initialised = False

    def _move_ports(self) -> None:
        super()._move_ports()
        self.rpc_port = free_port()
        self._write_config()

    def _write_config(self) -> None:
        auth = self.auth
        self.config_file.write_text(
            f"""reporting-disabled = true
bind-address = "127.0.0.1:{self.rpc_port}"
[meta]
  dir = "{self.root / "meta"}"
  logging-enabled = false
[data]
  dir = "{self.root / "data"}"
  wal-dir = "{self.root / "wal"}"
  query-log-enabled = false
  wal-fsync-delay = "0s"
[monitor]
  store-enabled = false
[continuous_queries]
  enabled = false
[http]
  bind-address = "127.0.0.1:{self.port}"
  auth-enabled = {"true" if auth else "false"}
  log-enabled = false
  max-row-limit = {self.max_row_limit}
  max-body-size = 0
[[udp]]
  enabled = false
[[graphite]]
  enabled = false
[[collectd]]
  enabled = false
[[opentsdb]]
  enabled = false
"""
        )

    def _argv(self) -> list[str]:
        return [self.binary, "run", "-config", str(self.config_file)]

    def _ready(self) -> bool:
        return _http("GET", f"{self.url}/ping", timeout=1)[0] == 204

    def start(self, timeout: float = 30.0) -> None:
        super().start(timeout)
        if not self._initialised:
            if self.auth:  # the first user may be created without credentials
                admin, self.admin = self.admin, None
                self._query_raw("CREATE USER admin WITH PASSWORD 'admin-pass' WITH ALL PRIVILEGES", None, "POST")
                self.admin = admin
            self.create_database(self.database)
            self._initialised = True

    def _auth_headers(self) -> dict[str, str]:
        if not self.admin:
            return {}
        return {"Authorization": "Basic " + base64.b64encode(":".join(self.admin).encode()).decode()}

    def _query_raw(self, q: str, db: str | None, method: str = "GET", epoch: str = "ns") -> dict:
        params = {"q": q, "epoch": epoch}
        if db:
            params["db"] = db
        body = urllib.parse.urlencode(params).encode()
        if method == "GET":
            status, data = _http("GET", f"{self.url}/query?{body.decode()}", headers=self._auth_headers())
        else:
            status, data = _http("POST", f"{self.url}/query", data=body, headers=self._auth_headers())
        doc = json.loads(data or b"{}")
        if status >= 300 or "error" in doc:
            raise RuntimeError(f"influxd query {q!r}: {status} {doc}")
        for result in doc.get("results", []):
            if "error" in result:
                raise RuntimeError(f"influxd query {q!r}: {result['error']}")
        return doc

    def create_database(self, name: str) -> None:
        self._query_raw(f'CREATE DATABASE "{name}"', None, "POST")

    def drop_database(self, name: str) -> None:
        self._query_raw(f'DROP DATABASE "{name}"', None, "POST")

    def query(self, q: str, db: str | None = None, epoch: str = "ns") -> list[dict]:
        doc = self._query_raw(
            q,
            db or self.database,
            "POST" if q.lstrip().upper().startswith(("DROP", "DELETE", "CREATE")) else "GET",
            epoch,
        )
        results = doc.get("results", [{}])
        return results[0].get("series", []) if results else []

    def points(self, q: str, db: str | None = None) -> list[dict]:
        rows = []
        for series in self.query(q, db):
            tags = series.get("tags", {})
            for values in series.get("values", []):
                row = dict(zip(series["columns"], values, strict=True))
                row.update(tags)
                rows.append(row)
        return rows

    def write(self, lines: str | list[str], db: str | None = None) -> None:
        body = lines if isinstance(lines, str) else "\n".join(lines)
        params = urllib.parse.urlencode({"db": db or self.database, "precision": "ns"})
        status, data = _http("POST", f"{self.url}/write?{params}", data=body.encode(), headers=self._auth_headers())
        if status != 204:
            raise RuntimeError(f"influxd write: {status} {data[:500]!r}")


class VictoriaMetricsServer(_Server):
    """VictoriaMetrics single node: accepts InfluxDB /api/v2/write and /write, Prometheus queries."""

    name = "victoria-metrics"

    def _argv(self) -> list[str]:
        return [
            self.binary,
            f"-httpListenAddr=127.0.0.1:{self.port}",
            f"-storageDataPath={self.root / 'data'}",
            "-search.latencyOffset=0s",
            "-retentionPeriod=100y",
            "-loggerLevel=ERROR",
        ]

    def _ready(self) -> bool:
        return _http("GET", f"{self.url}/health", timeout=1)[0] == 200

    def export(self, match: str = '{__name__!=""}', min_samples: int = 0, timeout: float = 10.0) -> list[dict]:
        """Series matching `match`; waits until at least `min_samples` samples are visible.

        New rows and new series become searchable about a second after the write
        (force_flush helps with the rows only), hence the wait. With min_samples=0
        it returns once two reads 0.3 s apart agree.
        """
        deadline = time.monotonic() + timeout
        previous = None
        while True:
            _http("GET", f"{self.url}/internal/force_flush")
            body = urllib.parse.urlencode({"match[]": match}).encode()
            status, data = _http("POST", f"{self.url}/api/v1/export", data=body)
            if status != 200:
                raise RuntimeError(f"victoria-metrics export: {status} {data[:500]!r}")
            series = [json.loads(line) for line in data.splitlines() if line.strip()]
            count = sum(len(s["timestamps"]) for s in series)
            if min_samples and count >= min_samples:
                return series
            if not min_samples and series and count == previous:
                return series
            if time.monotonic() > deadline:
                return series
            previous = count
            time.sleep(0.3)


PROMETHEUS = "prometheus"
PROMTOOL = "promtool"


class PrometheusServer(_Server):
    """Prometheus (Debian `prometheus`): scrapes `targets` every `scrape_interval`, answers PromQL.

    ``PrometheusServer(binary, root, targets=["127.0.0.1:PORT"], scrape_interval="1s")``;
    ``backfill(openmetrics_text)`` turns timestamped OpenMetrics text into TSDB blocks with
    ``promtool tsdb create-blocks-from openmetrics`` (call it before ``start()``);
    ``query(promql, time=None) -> list`` and ``query_range(...)`` return the ``result`` list.
    """

    name = "prometheus"

    def __init__(self, binary: str, root: Path, targets: list[str] = (), scrape_interval: str = "1s"):
        super().__init__(binary, root)
        self.config_file = self.root / "prometheus.yml"
        self.data = self.root / "data"
        jobs = ""
        if targets:
            quoted = ", ".join(f'"{t}"' for t in targets)
            jobs = f"""scrape_configs:
  - job_name: gpuagent
    scrape_interval: {scrape_interval}
    scrape_timeout: {scrape_interval}
    static_configs:
      - targets: [{quoted}]
"""
        self.config_file.write_text(f"global:\n  scrape_interval: {scrape_interval}\n{jobs}")

    def _argv(self) -> list[str]:
        return [
            self.binary,
            f"--config.file={self.config_file}",
            f"--storage.tsdb.path={self.data}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=100y",
            "--log.level=warn",
        ]

    def _ready(self) -> bool:
        return _http("GET", f"{self.url}/-/ready", timeout=1)[0] == 200

    def backfill(self, openmetrics: str) -> None:
        promtool = find_binary(PROMTOOL, "prometheus")
        source = self.root / "backfill.om"
        source.write_text(openmetrics if openmetrics.endswith("# EOF\n") else openmetrics + "# EOF\n")
        self.data.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(self.data)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise RuntimeError(f"promtool create-blocks-from: {done.stderr[-2000:]}")

    def _api(self, path: str, params: dict) -> list:
        body = urllib.parse.urlencode(params).encode()
        status, data = _http(
            "POST", f"{self.url}{path}", data=body, headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        doc = json.loads(data or b"{}")
        if status != 200 or doc.get("status") != "success":
            raise RuntimeError(f"prometheus {path} {params}: {status} {doc}")
        return doc["data"]["result"]

    def query(self, promql: str, time_s: float | None = None) -> list:
        params = {"query": promql}
        if time_s is not None:
            params["time"] = f"{time_s:.3f}"
        return self._api("/api/v1/query", params)


# -- Slurm ---------------------------------------------------------------------------------------
def _wait(check, what: str, timeout: float, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    tails = "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in logs if p.exists())
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
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=check, timeout=timeout)

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

    def sinfo_reasons(self) -> str:
        """`sinfo -R` as an operator reads it: the drained nodes with their reasons."""
        sinfo = find_binary("sinfo", "slurm-client")
        return self.run(sinfo, "-R", "--noheader", "--format=%N|%T|%E").stdout

    def drain(self, reason: str) -> None:
        self.run(self.scontrol, "update", f"nodename={self.host}", "state=drain", f"reason={reason}")

    def resume(self) -> None:
        """Back to service (tests that drain the node must leave it usable for the next)."""
        self.run(self.scontrol, "update", f"nodename={self.host}", "state=resume", check=False)

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


# -- alerting without Prometheus: vmalert and Alertmanager -----------------------------------------
ALERTMANAGER = "prometheus-alertmanager"
VMALERT = "vmalert"


class AlertmanagerServer(_Server):
    """Alertmanager (Debian `prometheus-alertmanager`), one receiver that sends nowhere, no
    clustering. ``alerts()`` is its v2 API's list of the alerts it holds."""

    name = "alertmanager"

    def __init__(self, binary: str, root: Path):
        super().__init__(binary, root)
        self.config_file = self.root / "alertmanager.yml"
        self.config_file.write_text(
            "route:\n  receiver: hold\n  group_wait: 0s\n  group_interval: 1s\nreceivers:\n  - name: hold\n"
        )

    def _argv(self) -> list[str]:
        return [
            self.binary,
            f"--config.file={self.config_file}",
            f"--storage.path={self.root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ]

    def _ready(self) -> bool:
        return _http("GET", f"{self.url}/-/ready", timeout=1)[0] == 200

    def alerts(self) -> list[dict]:
        status, data = _http("GET", f"{self.url}/api/v2/alerts")
        if status != 200:
            raise RuntimeError(f"alertmanager /api/v2/alerts: {status} {data[:300]!r}")
        return json.loads(data)


class VmalertServer(_Server):
    """vmalert (Debian `victoria-metrics`): evaluates ``rules`` against ``datasource`` (a
    VictoriaMetrics URL) every ``interval`` and sends firing alerts to ``notifier``."""

    name = "vmalert"

    def __init__(self, binary: str, root: Path, rules: Path, datasource: str, notifier: str, interval: str = "1s"):
        super().__init__(binary, root)
        self.rules, self.datasource, self.notifier, self.interval = rules, datasource, notifier, interval

    def _argv(self) -> list[str]:
        return [
            self.binary,
            f"-rule={self.rules}",
            f"-datasource.url={self.datasource}",
            f"-notifier.url={self.notifier}",
            f"-evaluationInterval={self.interval}",
            f"-httpListenAddr=127.0.0.1:{self.port}",
            "-loggerLevel=ERROR",
        ]

    def _ready(self) -> bool:
        return _http("GET", f"{self.url}/health", timeout=1)[0] == 200

    def alerts(self) -> list[dict]:
        status, data = _http("GET", f"{self.url}/api/v1/alerts")
        if status != 200:
            raise RuntimeError(f"vmalert /api/v1/alerts: {status} {data[:300]!r}")
        return json.loads(data)["data"]["alerts"]


class DrippingServer:
    """A local HTTP server that answers every request with a valid 200, one byte every `pace`
    seconds: a per-read socket timeout never fires against it, only a whole-request deadline
    does. `finished` counts the answers sent to their last byte; `cut` those whose client
    hung up first. Only this kind of server can drip, so it is not a real one (see
    plugins/influxdb/tests/test_faults.py for the sink's own).

    `close=True`: the status line and headers (`Connection: close`, no length) come at once and
    only the body drips: http.client then drops its own reference to the socket (issue 46)."""

    def __init__(
        self,
        body: bytes = b'{"status": "success", "data": {"result": []}, "results": [{}]}',
        pace: float = 0.25,
        close: bool = False,
        status: int = 200,
    ):
        import threading

        head = b"HTTP/1.1 %d Answer\r\nContent-Type: application/json\r\n" % status
        if close:
            self.head, self.answer = head + b"Connection: close\r\n\r\n", body
        else:
            self.head, self.answer = b"", head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        self.pace = pace
        self.finished = self.cut = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import threading

        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                head += chunk
            length = next(
                (
                    int(v)
                    for k, _, v in (h.partition(b":") for h in head.split(b"\r\n"))
                    if k.lower() == b"content-length"
                ),
                0,
            )
            body = head.split(b"\r\n\r\n", 1)[1]
            while len(body) < length:  # read the whole request: closing on unread bytes is a reset
                chunk = conn.recv(65536)
                if not chunk:
                    return
                body += chunk
            try:
                conn.sendall(self.head)
                if not self.pace:  # pace 0: a fixed answer at once (a hostile body, a large one)
                    conn.sendall(self.answer)
                    self.finished += 1
                    return
                for byte in self.answer:
                    if self._stop.wait(self.pace):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:  # the client shut its socket: its deadline passed
                self.cut += 1
                return
            self.finished += 1

    def wait_cut(self, timeout: float = 10.0) -> bool:
        """Whether the client hung up on an answer (seen by the next byte the server drips)."""
        end = time.monotonic() + timeout
        while not self.cut and time.monotonic() < end:
            time.sleep(0.05)
        return self.cut > 0

    def close(self) -> None:
        self._stop.set()
        self._sock.close()
