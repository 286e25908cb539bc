"""Finds the inference server behind a GPU process: the listening TCP ports of the process or
of its nearest ancestors (vLLM's API server and SGLang's server listen in a parent of the
processes that hold the GPUs) are asked once for /metrics, and kept when a known family
answers. TGI's launcher starts its router beside the GPU shards, so where no ancestor serves,
the other children of the parent and grandparent are looked at too, those that are neither a
GPU process nor above one (a server with GPU processes of its own is theirs, not this one's).

Bounded: at most ``ports_per_process`` ports are ever asked per process, each with a timeout; a
port that answers something else is never asked again; a process is looked at again only when
it changes (a new process under the same pid), or, while it had no port that answered at all
(a server still loading its model listens late), after ``rescan_s``.

The process tree is walked (parents, children, sockets) only when the set of GPU processes
changes, every ``rescan_s``, and on the cycle after one whose budget ran out; on the cycles
between, the servers found are those of the last walk (a cycle reads /proc not at all).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from gpuagent.plugins.work import families, scrape

MAX_KIN = 16  # children of one parent looked at for a side-by-side server

log = logging.getLogger("gpuagent.collector.work")


@dataclass
class Endpoint:
    source: str
    url: str  # its /metrics
    work_id: str
    workload: str = ""  # the work's name when the families carry none (TGI: /info's model_id)


@dataclass
class Listener:
    """What is known of one process (pid and start time) as a possible server."""

    endpoint: Endpoint | None = None
    other: set[int] = field(default_factory=set)  # ports that answered something else
    asked: set[int] = field(default_factory=set)  # every port ever asked
    scanned_at: float | None = None
    settled: bool = False  # every port it listens on answered: nothing more to learn
    warned: bool = False
    kin: list[tuple[int, float]] = field(default_factory=list)  # its children, as last listed
    kin_at: float | None = None


class Discovery:
    def __init__(
        self,
        ancestors: int,
        ports_per_process: int,
        timeout: float,
        rescan_s: float,
        budget_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.ancestors = ancestors
        self.ports_per_process = ports_per_process
        self.timeout = timeout
        self.rescan_s = rescan_s
        self.budget_s = budget_s
        self.clock = clock
        self._stop_at = 0.0
        self._now = 0.0  # the cycle's time: what scans and listings are dated with
        self.own = os.getpid()
        self._known: dict[tuple[int, float], Listener] = {}
        self._seen: set[tuple[int, float]] = set()
        self._walked = False  # this cycle walked the process tree
        self._short = False  # a walk that the budget cut short: walked again next cycle
        self._walked_pids: frozenset[int] | None = None
        self._walked_at: float | None = None
        self._endpoints: dict[int, Endpoint] = {}  # the last walk's answer
        self.gets_total = 0  # /metrics asked during discovery (the tests count them)
        self.walks_total = 0  # process-tree walks (the tests count them)

    def new_cycle(self) -> None:
        self._now = self.clock()
        self._stop_at = self._now + self.budget_s
        self._walked = False

    def end_cycle(self) -> None:
        """Forget the processes no GPU process led to on this cycle's walk (gone, or no longer a parent)."""
        if not self._walked:
            return
        for key in self._known.keys() - self._seen:
            del self._known[key]

    def endpoints_for(self, pids) -> dict[int, Endpoint]:
        """GPU process pid -> its server: its own or its nearest ancestor's endpoint, else (TGI:
        the launcher starts the router and the GPU shards side by side) one of its parent's or
        grandparent's other children that is neither a GPU process nor above one. The last
        walk's answer while the GPU processes are the same and no rescan is due."""
        wanted = frozenset(pids)
        if wanted == self._walked_pids and self._walked_at is not None and self._now - self._walked_at < self.rescan_s:
            return dict(self._endpoints)
        self._walked, self._short, self._seen = True, False, set()
        self.walks_total += 1
        out = self._walk(wanted)
        self._walked_pids, self._endpoints = wanted, out
        self._walked_at = None if self._short else self._now
        return dict(out)

    def _walk(self, pids: frozenset[int]) -> dict[int, Endpoint]:
        chains = {pid: self._chain(pid) for pid in pids}
        out = {}
        for pid, chain in chains.items():
            endpoint = self._direct(chain)
            if endpoint is not None:
                out[pid] = endpoint
        above = {key for chain in chains.values() for key in chain}
        for pid, chain in chains.items():
            if pid not in out:
                endpoint = self._kin(chain, above)
                if endpoint is not None:
                    out[pid] = endpoint
        return out

    def _direct(self, chain: list[tuple[int, float]]) -> Endpoint | None:
        for key in chain:
            endpoint = self._look(key)
            if endpoint is not None:
                return endpoint
        return None

    def _kin(self, chain: list[tuple[int, float]], above: set[tuple[int, float]]) -> Endpoint | None:
        for key in chain[1:3]:
            parent = self._known[key]
            if parent.kin_at is None or self._now - parent.kin_at >= self.rescan_s:
                parent.kin_at = self._now
                parent.kin = _children(key[0])
            for kin in parent.kin:
                if kin in above or kin[0] == self.own:
                    continue
                endpoint = self._look(kin)
                if endpoint is not None:
                    return endpoint
        return None

    def _look(self, key: tuple[int, float]) -> Endpoint | None:
        self._seen.add(key)
        listener = self._known.get(key)
        if listener is None:
            listener = self._known[key] = Listener()
        if listener.endpoint is None and self._due(listener):
            if self.clock() < self._stop_at:
                self._scan(key, listener)
            else:
                self._short = True  # out of time this cycle: looked at on the next
        return listener.endpoint

    def _chain(self, pid: int) -> list[tuple[int, float]]:
        """(pid, start time) of the process and up to ``ancestors`` parents; init and the
        agent itself are never asked."""
        out: list[tuple[int, float]] = []
        try:
            proc: psutil.Process | None = psutil.Process(pid)
            while proc is not None and len(out) <= self.ancestors:
                if proc.pid in (0, 1) or proc.pid == self.own:
                    break
                out.append((proc.pid, proc.create_time()))
                proc = proc.parent()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
        return out

    def _due(self, listener: Listener) -> bool:
        if listener.scanned_at is None:
            return True
        if listener.settled or len(listener.asked) >= self.ports_per_process:
            return False
        return self._now - listener.scanned_at >= self.rescan_s

    def _scan(self, key: tuple[int, float], listener: Listener) -> None:
        pid = key[0]
        listener.scanned_at = self._now
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except psutil.NoSuchProcess:
            return
        except psutil.AccessDenied:
            if not listener.warned:
                listener.warned = True
                log.warning(
                    "work: cannot read the sockets of pid %d (another user's process: run the agent "
                    "with CAP_SYS_PTRACE, or configure the endpoint)", pid,
                )  # fmt: skip
            listener.settled = True
            return
        ports: dict[int, str] = {}
        for c in conns:
            if c.status == psutil.CONN_LISTEN and c.laddr:
                ip, port = c.laddr[0], c.laddr[1]
                if port not in ports or ":" in ports[port]:  # IPv4 first where both are open
                    ports[port] = ip
        unanswered = 0
        for port in sorted(ports):
            if port in listener.other:
                continue
            if self.clock() >= self._stop_at:
                unanswered += 1  # out of time this cycle: asked at the next rescan
                continue
            if port not in listener.asked and len(listener.asked) >= self.ports_per_process:
                unanswered += 1
                continue
            listener.asked.add(port)
            url = scrape.url_for(ports[port], port, "/metrics")
            self.gets_total += 1
            answer = scrape.get(url, self.timeout)
            if answer.status is None:
                unanswered += 1  # no answer: asked again at the next rescan
                continue
            source = families.detect(answer.body) if answer.status == 200 else None
            if source is None:
                listener.other.add(port)
                log.debug("work: pid %d port %d answers no known server's /metrics; left alone", pid, port)
                continue
            workload = ""
            if source == "tgi":
                workload = scrape.tgi_model(scrape.url_for(ports[port], port, ""), self.timeout) or ""
            listener.endpoint = Endpoint(source, url, f"{pid}:{port}", workload)
            log.info("work: pid %d port %d is a %s server", pid, port, source)
            return
        listener.settled = bool(ports) and unanswered == 0


def _children(pid: int) -> list[tuple[int, float]]:
    out = []
    try:
        for child in psutil.Process(pid).children()[:MAX_KIN]:
            try:
                out.append((child.pid, child.create_time()))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass
    return out
