"""work collector -> gpu_work: the work done on each GPU, one point per piece of work per GPU
it runs on, each cycle.

Three sources of counts: inference servers found through the GPU processes' (or their
ancestors') listening ports (discovery.py), endpoints named in the config (servers in another
network namespace), and jobs that write their own count to a file (jobfiles.py). The GPU
processes and their jobs come from the processes collector's list of this cycle (published on
the agent's shared board): this collector never calls NVML. ``units_total`` is the server's or
job's raw counter, the same on each of the work's GPUs; ``gpus`` is how many GPUs the work
spans, so a GPU's share is the counter's increase divided by ``gpus``; a decrease is a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import psutil
from pydantic import BaseModel, ConfigDict, field_validator

import gpuagent
from gpuagent.plugins.work import families, scrape
from gpuagent.plugins.work.discovery import Discovery, Endpoint
from gpuagent.plugins.work.jobfiles import JobFiles

if TYPE_CHECKING:
    from gpuagent.plugins.processes import GpuProcess

# What the processes and mig collectors publish on the shared board, under their names: read by
# name, not imported, so disabling either plugin keeps it unimported.
PROCESSES = "processes"
MIG_DEVICES = "mig"

MEASUREMENT = "gpu_work"
JOB_TAGS = ("slurm_job_id", "k8s_pod_uid")


class EndpointConfig(BaseModel):
    """A server the agent cannot find by itself (another network namespace, another host)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    url: str  # its /metrics, e.g. "http://10.1.2.3:8000/metrics"
    gpus: list[str]  # the GPUs it runs on: NVML indices ("0") or UUIDs
    source: Literal["vllm", "sglang", "triton", "tgi"] | None = None  # None: found from the answer
    workload: str | None = None  # the served model, where its families name none (TGI)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        # Only HTTP is scraped: file:// or unix:// would read a local file or socket as the agent's user.
        import urllib.parse

        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected http://HOST:PORT/PATH or https://HOST:PORT/PATH, got {url[:200]!r}")
        return url


class WorkConfig(gpuagent.CollectorConfig):
    # Find servers through the GPU processes' listening ports; false: only `endpoints`.
    discover: bool = True
    # How many parents of a GPU process are looked at (vLLM's API server is one or two up).
    ancestors: int = 3
    # At most this many ports are ever asked per process.
    ports_per_process: int = 4
    # Each HTTP request's timeout.
    request_timeout: gpuagent.Duration = 2.0
    # A process with no port that answered is looked at again after this long.
    rescan: gpuagent.Duration = 60.0
    # At most this long a run spends finding new servers (the rest wait for the next run).
    discovery_budget: gpuagent.Duration = 5.0
    # How long a run waits for this cycle's process list from the processes collector.
    processes_wait: gpuagent.Duration = 2.0
    endpoints: list[EndpointConfig] = []
    # Where jobs write their counts (one FILE.work each); "" reads none.
    jobs_dir: str = "/run/gpuagent/work"


@dataclass
class Work:
    """One piece of work this cycle: where its counts come from and the GPUs it runs on."""

    work_id: str
    source: str
    placements: dict[tuple, GpuProcess | gpuagent.Gpu] = field(default_factory=dict)
    owner: dict[str, str] = field(default_factory=dict)

    def add(self, proc: GpuProcess) -> None:
        self.placements.setdefault((proc.gpu.uuid, proc.gi_id, proc.ci_id), proc)
        for tag in JOB_TAGS:
            if tag in proc.owner:
                self.owner.setdefault(tag, proc.owner[tag])


class WorkCollector(gpuagent.Collector):
    name = "work"
    Config = WorkConfig

    def __init__(self, config: WorkConfig, context):
        super().__init__(config, context)
        self.discovery = Discovery(
            config.ancestors, config.ports_per_process, config.request_timeout, config.rescan,
            config.discovery_budget,
        )  # fmt: skip
        self.jobs = JobFiles(config.jobs_dir)
        self._warned: set[str] = set()
        self._configured_sources: dict[str, str] = {}

    def collect(self, acc: gpuagent.Accumulator) -> None:
        listed = self.context.shared.latest(PROCESSES, wait=self.config.processes_wait)
        if listed is None and (self.config.discover or self.config.jobs_dir):
            self._warn(
                "no-processes",
                "work: no process list from the processes collector (disabled?): servers are "
                "not found and job files not attributed; only configured endpoints are counted",
            )  # fmt: skip
        procs: tuple[GpuProcess, ...] = listed or ()
        mig = self.context.shared.latest(MIG_DEVICES) or {}
        live = {g.uuid for g in self.gpus}
        procs = tuple(p for p in procs if p.gpu.uuid in live)
        if self.config.discover:
            self._servers(acc, procs, mig)
        for ep in self.config.endpoints:
            self._configured(acc, ep, mig)
        self._job_counts(acc, procs, mig)

    # -- servers ---------------------------------------------------------------------------------
    def _servers(self, acc, procs, mig) -> None:
        found: dict[str, tuple[Endpoint, Work]] = {}
        self.discovery.new_cycle()
        endpoints = self.discovery.endpoints_for([p.pid for p in procs])
        for proc in procs:
            endpoint = endpoints.get(proc.pid)
            if endpoint is None:
                continue
            if endpoint.work_id not in found:
                found[endpoint.work_id] = (endpoint, Work(endpoint.work_id, endpoint.source))
            found[endpoint.work_id][1].add(proc)
        self.discovery.end_cycle()
        for endpoint, work in found.values():
            counts = self._scrape(endpoint.url, endpoint.source, endpoint.workload)
            if counts is not None:
                self._emit(acc, work, counts, mig)

    def _configured(self, acc, ep: EndpointConfig, mig) -> None:
        work = Work(ep.url, ep.source or "")
        for want in ep.gpus:
            gpu = next((g for g in self.gpus if want in (str(g.index), g.uuid)), None)
            if gpu is None:
                self._warn(f"gpus:{ep.url}:{want}", f"work: endpoint {ep.url}: no GPU {want!r} on this host")
                continue
            work.placements.setdefault((gpu.uuid, None, None), gpu)
        if not work.placements:
            return
        answer = scrape.get(ep.url, self.config.request_timeout)
        if answer.status != 200:
            why = answer.error or f"HTTP {answer.status}"
            self._warn(f"get:{ep.url}", f"work: endpoint {ep.url}: {why}; asked again each cycle")
            return
        source = ep.source or self._configured_sources.get(ep.url) or families.detect(answer.body)
        if source is None:
            self._warn(
                f"detect:{ep.url}", f"work: endpoint {ep.url}: no known server's families; asked again each cycle"
            )
            return
        self._configured_sources[ep.url] = work.source = source
        self._emit(acc, work, families.read(answer.body, source, ep.workload or source), mig)

    def _scrape(self, url: str, source: str, workload: str) -> dict[tuple[str, str], float] | None:
        answer = scrape.get(url, self.config.request_timeout)
        if answer.status != 200:
            # The server is restarting or gone: no points for it this cycle (never a zero).
            self.log.debug("work: %s: %s", url, answer.error or f"HTTP {answer.status}")
            return None
        return families.read(answer.body, source, workload or source)

    # -- jobs ------------------------------------------------------------------------------------
    def _job_counts(self, acc, procs, mig) -> None:
        for count in self.jobs.read():
            job = count.slurm_job_id or self._job_of(count.pid, procs)
            if job is not None:
                mine = [p for p in procs if p.owner.get("slurm_job_id") == job]
            else:
                mine = [p for p in procs if p.pid == count.pid or _descends(p.pid, count.pid)]
            if not mine:
                continue  # the job holds no GPU this cycle
            work = Work(f"job:{job}" if job else f"pid:{count.pid}", "job")
            for p in mine:
                work.add(p)
            if job:
                work.owner["slurm_job_id"] = job
            self._emit(acc, work, {(count.workload, count.unit): count.total}, mig)

    @staticmethod
    def _job_of(pid: int, procs) -> str | None:
        for p in procs:
            if p.pid == pid and "slurm_job_id" in p.owner:
                return p.owner["slurm_job_id"]
        from gpuagent.plugins.processes import slurm  # a job file's pid the processes list lacks

        try:
            return slurm.from_environ(slurm.read_environ(pid)).get("slurm_job_id")
        except OSError:
            return None

    # -- points ----------------------------------------------------------------------------------
    def _emit(self, acc, work: Work, counts: dict[tuple[str, str], float], mig) -> None:
        gpus = len(work.placements)
        for (uuid, gi, ci), where in work.placements.items():
            gpu = where if isinstance(where, gpuagent.Gpu) else where.gpu
            tags: dict[str, Any] = dict(gpu.tags)
            fields: dict[str, Any] = {"gpus": gpus}
            if gi is not None:
                device = mig.get((uuid, gi), {})
                tags.update(device.get("tags", {"gi_id": str(gi)}))
                if ci is not None:
                    tags.setdefault("ci_id", str(ci))
                if device.get("share") is not None:
                    fields["gpu_share"] = device["share"]
            tags.update(work.owner)
            tags.update(source=work.source, work_id=work.work_id)
            for (workload, unit), value in sorted(counts.items()):
                acc.add_fields(
                    MEASUREMENT,
                    {"units_total": float(value), **fields},
                    tags=dict(tags, workload=workload, unit=unit),
                )

    def _warn(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.log.warning("%s", text)


def _descends(pid: int, ancestor: int, depth: int = 8) -> bool:
    try:
        proc = psutil.Process(pid).parent()
        while proc is not None and depth > 0:
            if proc.pid == ancestor:
                return True
            proc, depth = proc.parent(), depth - 1
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return False


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(WorkCollector)
