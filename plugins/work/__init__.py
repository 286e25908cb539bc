"""work collector -> gpu_work: the work done on each GPU, one point per piece of work per GPU
it runs on, each cycle.

Three sources of counts: inference servers found through the GPU processes' (or their
ancestors') listening ports (discovery.py), endpoints named in the config (servers in another
network namespace), and jobs that write their own count to a file (jobfiles.py). The GPU
processes and their jobs come from the processes collector's list of this cycle (published on
the agent's shared board): this collector never calls NVML. ``units_total`` is the server's or
job's raw counter, the same on each of the work's GPUs; ``gpus`` is how many GPUs the work
spans, so a GPU's share is the counter's increase divided by ``gpus``; a decrease is a restart
(a server's label children are reset-corrected one by one before they are summed: families.ChildCounters).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import psutil
from pydantic import BaseModel, ConfigDict, Field, field_validator

import gpuagent
from gpuagent.plugins.work import families, jobfiles, scrape
from gpuagent.plugins.work.discovery import Discovery, Endpoint
from gpuagent.plugins.work.schema import SCHEMA
from gpuagent.schema.measurements import GPU_WORK

if TYPE_CHECKING:
    from gpuagent.plugins.processes import GpuProcess

# What the processes and mig collectors publish on the shared board, under their names: read by
# name, not imported, so disabling either plugin keeps it unimported.
PROCESSES = "processes"
MIG_DEVICES = "mig"

MEASUREMENT = GPU_WORK
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
    # Budgets against what other users steer (what is cut is counted in the gpuagent measurement).
    job_files: int = Field(jobfiles.MAX_FILES, ge=1)  # job files read a cycle, in all
    job_files_per_user: int = Field(jobfiles.FILES_PER_USER, ge=1)  # of one file owner
    jobs_budget: gpuagent.Duration = jobfiles.BUDGET_S  # time a cycle spends on job files
    scrape_budget: gpuagent.Duration = 5.0  # time a cycle spends reading the found servers
    workloads_per_server: int = Field(64, ge=1)  # distinct workloads (model names) of one piece of work


@dataclass
class Work:
    """One piece of work this cycle: where its counts come from and the GPUs it runs on."""

    work_id: str
    source: str
    placements: dict[tuple, GpuProcess | gpuagent.Gpu] = field(default_factory=dict)
    owner: dict[str, str] = field(default_factory=dict)
    sm: dict[tuple, float] = field(default_factory=dict)  # placement -> its processes' SM share, summed

    def add(self, proc: GpuProcess) -> None:
        key = (proc.gpu.uuid, proc.gi_id, proc.ci_id)
        self.placements.setdefault(key, proc)
        if proc.sm_util_pct is not None:
            self.sm[key] = min(100.0, self.sm.get(key, 0.0) + proc.sm_util_pct)
        for tag in JOB_TAGS:
            if tag in proc.owner:
                self.owner.setdefault(tag, proc.owner[tag])


class WorkCollector(gpuagent.Collector):
    name = "work"
    schema = SCHEMA
    Config = WorkConfig

    def __init__(self, config: WorkConfig, context):
        super().__init__(config, context)
        self.discovery = Discovery(
            config.ancestors, config.ports_per_process, config.request_timeout, config.rescan,
            config.discovery_budget,
        )  # fmt: skip
        self.jobs = jobfiles.JobFiles(
            config.jobs_dir, config.job_files, config.job_files_per_user, config.jobs_budget
        )  # fmt: skip
        self._warned: set[str] = set()
        self._configured_sources: dict[str, str] = {}
        self.counters = families.ChildCounters()  # per label child reset correction, across cycles
        self._workloads: dict[str, set[str]] = {}  # work_id -> the workloads it was let have
        self._seen: set[str] = set()
        self._uids: dict[int, int | None] = {}  # pid -> real uid, while the attributions below hold
        self._attributed: dict[tuple, tuple[bool, str | None, frozenset[int]]] = {}  # job file -> _attribute's
        self._attributed_pids: frozenset[int] | None = None  # the GPU processes they were worked out for
        self._attributed_at = -math.inf
        self.job_walks_total = 0  # attributions worked out afresh (the tests count them)
        self._took: dict[str, float] = {}  # found server's URL -> seconds its last scrape took
        self.cut: Counter = Counter()  # lines, workloads, answers, servers cut; job files refused

    def stats(self) -> dict[str, int]:
        """What the budgets cut, for the gpuagent measurement (README: Budgets)."""
        return {
            "lines_cut_total": self.cut["lines"],
            "workloads_cut_total": self.cut["workloads"],
            "answers_cut_total": self.cut["answers"],
            "servers_cut_total": self.cut["servers"],
            "job_files_cut_total": self.jobs.cut_total,
            "job_files_refused_total": self.jobs.refused_total + self.cut["job_uid"],
        }

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
        self._seen = set()
        for ep in self.config.endpoints:  # configured first: the found servers and job files are others' to steer
            self._configured(acc, ep, mig)
        if self.config.discover:
            self._servers(acc, procs, mig)
        self._job_counts(acc, procs, mig)
        for gone in self._workloads.keys() - self._seen:
            del self._workloads[gone]

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
        stop_at = time.monotonic() + self.config.scrape_budget
        # The quickest last time first (one not read yet counts as quick): a server that drips
        # until request_timeout is read last, so it cannot keep the others out of the budget.
        self._took = {url: s for url, s in self._took.items() if url in {e.url for e, _ in found.values()}}
        order = sorted(found.values(), key=lambda found_one: self._took.get(found_one[0].url, 0.0))
        for n, (endpoint, work) in enumerate(order):
            if time.monotonic() >= stop_at:  # dripping servers spent the cycle's time: the rest wait
                self.cut["servers"] += len(found) - n
                self._warn(
                    "scrape-budget",
                    f"work: servers left unread this cycle past scrape_budget "
                    f"({self.config.scrape_budget:g}s); counted in servers_cut_total, said once",
                )
                break
            started = time.monotonic()
            counts = self._scrape(endpoint.url, endpoint.source, endpoint.workload)
            self._took[endpoint.url] = time.monotonic() - started
            if counts is not None:
                self._emit(acc, work, self.counters.total(work.work_id, counts, time.monotonic()), mig)

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
        self._count_cut(answer)
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
        children = families.read_children(answer.body, source, ep.workload or source, self.cut)
        self._emit(acc, work, self.counters.total(work.work_id, children, time.monotonic()), mig)

    def _scrape(self, url: str, source: str, workload: str) -> families.Children | None:
        answer = scrape.get(url, self.config.request_timeout)
        self._count_cut(answer)
        if answer.status != 200:
            # The server is restarting or gone: no points for it this cycle (never a zero).
            self.log.debug("work: %s: %s", url, answer.error or f"HTTP {answer.status}")
            return None
        return families.read_children(answer.body, source, workload or source, self.cut)

    def _count_cut(self, answer: scrape.Answer) -> None:
        if answer.status == 200 and answer.error:  # over scrape.MAX_BODY
            self.cut["answers"] += 1

    # -- jobs ------------------------------------------------------------------------------------
    def _job_counts(self, acc, procs, mig) -> None:
        counts = self.jobs.read()
        if not counts:
            return
        # Whose a job file's count is (its pid's owner, job and process tree) is worked out when
        # the GPU processes change and every rescan, as servers are found: not every cycle.
        pids, now = frozenset(p.pid for p in procs), time.monotonic()
        stale = now - self._attributed_at >= self.config.rescan
        # Bounded: files other users write may name a new pid each cycle.
        if pids != self._attributed_pids or stale or len(self._attributed) > 4 * self.config.job_files:
            self._attributed, self._uids = {}, {}
            self._attributed_pids, self._attributed_at = pids, now
            self.job_walks_total += 1
        for count in counts:
            key = (count.pid, count.uid, count.slurm_job_id)
            found = self._attributed.get(key)
            if found is None:
                found = self._attributed[key] = self._attribute(count, procs)
            refused, job, theirs = found
            if refused:
                # Anyone may write in jobs_dir: a file counts only for its owner's processes.
                self.cut["job_uid"] += 1
                self._warn(
                    f"uid:{count.path}:{count.pid}",
                    f"work: {count.path}: pid {count.pid} is not a process of the file's owner "
                    f"(uid {count.uid}); skipped",
                )  # fmt: skip
                continue
            mine = [p for p in procs if p.pid in theirs]
            if not mine:
                continue  # the job holds no GPU this cycle (none of its owner's)
            work = Work(f"job:{job}" if job else f"pid:{count.pid}", "job")
            for p in mine:
                work.add(p)
            if job:
                work.owner["slurm_job_id"] = job
            self._emit(acc, work, {(count.workload, count.unit): count.total}, mig)

    def _attribute(self, count: jobfiles.JobCount, procs) -> tuple[bool, str | None, frozenset[int]]:
        """(refused: the pid is not the file owner's, the job, the pids of the GPU processes its count is for)."""
        if count.uid != 0 and self._uid(count.pid) != count.uid:
            return True, None, frozenset()
        job = count.slurm_job_id or self._job_of(count.pid, procs)
        if job is not None:
            mine = [p for p in procs if p.owner.get("slurm_job_id") == job]
        else:
            mine = [p for p in procs if p.pid == count.pid or _descends(p.pid, count.pid)]
        if count.uid != 0:
            mine = [p for p in mine if self._uid(p.pid) == count.uid]
        return False, job, frozenset(p.pid for p in mine)

    def _uid(self, pid: int) -> int | None:
        if pid not in self._uids:
            try:
                self._uids[pid] = psutil.Process(pid).uids().real
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                self._uids[pid] = None
        return self._uids[pid]

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
        self._seen.add(work.work_id)
        allowed = self._workloads.setdefault(work.work_id, set())
        for workload, _unit in list(counts):
            if workload not in allowed and len(allowed) >= self.config.workloads_per_server:
                # Each new workload is a new series: another user's server must not make them unbounded.
                self.cut["workloads"] += 1
                del counts[(workload, _unit)]
                self._warn(
                    f"workloads:{work.work_id}",
                    f"work: {work.work_id}: more than "
                    f"{self.config.workloads_per_server} workloads; the others are counted in "
                    "workloads_cut_total, said once",
                )
                continue
            allowed.add(workload)
        gpus = len(work.placements)
        for (uuid, gi, ci), where in work.placements.items():
            gpu = where if isinstance(where, gpuagent.Gpu) else where.gpu
            tags: dict[str, Any] = dict(gpu.tags)
            fields: dict[str, Any] = {"gpus": gpus}
            if (uuid, gi, ci) in work.sm:  # the GPU shared with other work is shared by this (compare)
                fields["sm_util_pct"] = float(work.sm[(uuid, gi, ci)])
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
        if len(self._warned) > 10_000:
            self._warned.clear()  # bounded: keys name files other users may create without end
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
