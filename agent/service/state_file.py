"""The running agent's latest state: one JSON file in its state directory, replaced atomically
each cycle, so that one-shot commands (`gpuagent health`, later `top` and `inspect`) read what
the agent already knows instead of opening a second NVML session.

The document: ``{"pid", "written" (epoch s), "interval" (s), "hostname", "gpus": {index:
{"tags": {...}, measurement: {field: value}}}, "node": {measurement: {field: value}},
"cost": {collector: {runs, nvml_calls, cpu_ms} over the last minute}}``. A GPU's
fields are the latest value of each, merged over the cycle's points (an XID point and the
verdict point of one GPU both land in ``gpu_health``). Per-process and per-job points
(``gpu_process``, ``gpu_job``) are left out: their cardinality is the jobs', not the GPUs'.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import psutil

from gpuagent.pipeline.metric import Point
from gpuagent.schema.measurements import GPU_ACTION, GPU_INVENTORY, GPU_JOB, GPU_PROCESS, GPU_WORK
from gpuagent.service import safe_files
from gpuagent.service.ownership import OTHERS_WRITE

log = logging.getLogger("gpuagent.state")

STATE_FILE = "state.json"
FRESH_INTERVALS = 3  # a state older than this many intervals is stale (DESIGN: Health actions)
PER_JOB = frozenset({GPU_PROCESS, GPU_JOB, GPU_WORK})
MAX_BYTES = 64 << 20  # an 8-GPU node's state is about 20 KB; a reader never holds more than this
MAX_INTERVAL_S = 86400.0  # a larger "interval" would make any old file fresh
FUTURE_SLACK_S = 1.0
NODE = frozenset({GPU_INVENTORY, GPU_ACTION})  # node-level measurements a reader needs


class LatestState:
    """The latest fields per GPU and measurement, from the points the scheduler delivers."""

    def __init__(self) -> None:
        self.gpus: dict[str, dict[str, Any]] = {}
        self.node: dict[str, dict[str, Any]] = {}
        self._warned = False

    def record(self, points: list[Point]) -> None:
        for p in points:
            m = p.measurement
            if m in NODE:
                self.node.setdefault(m, {}).update(p.fields)
                continue
            gpu = p.tags.get("gpu")
            if gpu is None or m in PER_JOB or "mig_uuid" in p.tags or "peer_gpu" in p.tags:
                continue
            entry = self.gpus.get(gpu)
            if entry is None:
                entry = self.gpus[gpu] = {"tags": {}}
            entry["tags"] = {k: p.tags[k] for k in ("host", "gpu", "uuid", "model", "pci_bus_id") if k in p.tags}
            entry.setdefault(m, {}).update(p.fields)

    def document(self, interval: float, hostname: str, cost: dict | None = None) -> dict[str, Any]:
        return {
            "cost": cost or {},
            "pid": os.getpid(),
            "written": time.time(),
            "interval": interval,
            "hostname": hostname,
            "gpus": self.gpus,
            "node": self.node,
        }

    def write(self, state_dir: Path, interval: float, hostname: str, cost: dict | None = None) -> None:
        """Replace the file atomically; nothing when the agent has no state directory (a one-off run)."""
        path = Path(state_dir) / STATE_FILE
        if not path.parent.is_dir():
            return
        try:  # exclusively created temporary file: a symlink planted in a 0777 dir is never followed
            safe_files.write_replace(path, json.dumps(self.document(interval, hostname, cost), default=str).encode())
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("cannot write %s: %s (gpuagent health will read NVML itself)", path, exc)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's (the unit's DynamicUser)
        return True
    except OSError:
        return False
    return True


def trusted_writers(state_dir: Path) -> set[int]:
    """Root, this process's user, and the state directory's owner where only it may write there
    (the unit's DynamicUser owns /var/lib/private/gpuagent, 0700)."""
    owners = set(safe_files.trusted_owners())
    try:
        st = os.stat(state_dir)
    except OSError:
        return owners
    if not st.st_mode & OTHERS_WRITE:
        owners.add(st.st_uid)
    return owners


def agent_process_problem(pid: int, uid: int) -> str | None:
    """Why ``pid`` is not a running gpuagent of user ``uid``, or None."""
    if pid <= 1 or not pid_alive(pid):
        return f"pid {pid}, which is not running" if pid > 1 else f"pid {pid}, which is not an agent"
    try:
        proc = psutil.Process(pid)
        cmdline, uids = proc.cmdline(), proc.uids()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return f"pid {pid}, which is not running"
    except psutil.AccessDenied:
        return f"pid {pid}, whose command line cannot be read"
    # `gpuagent run`, `python -m gpuagent run`, or a console script behind its interpreter.
    if not any(os.path.basename(arg) == "gpuagent" for arg in cmdline[:3]):
        return f"pid {pid}, which is not a gpuagent ({' '.join(cmdline)[:80]!r})"
    if uid not in (uids.real, uids.effective):
        return f"pid {pid}, a process of uid {uids.real}, not of the file's owner (uid {uid})"
    return None


def read_fresh(state_dir: Path, now: float | None = None) -> tuple[dict[str, Any] | None, str]:
    """(the running agent's state, "") when the file is trusted, else (None, why not). Trusted: a
    regular file of at most MAX_BYTES owned by the agent's user (see trusted_writers), naming a
    running gpuagent of that user as its writer, written within FRESH_INTERVALS of now (a time
    in the future is not fresh: no clock runs ahead of the reader's on one host)."""
    path = Path(state_dir) / STATE_FILE
    try:
        data, st = safe_files.read_bounded(path, MAX_BYTES, trusted_writers(Path(state_dir)))
        doc = json.loads(data)
        pid, written, interval = int(doc["pid"]), float(doc["written"]), float(doc["interval"])
    except FileNotFoundError:
        return None, f"no running agent's state in {path}"
    except safe_files.Refused as exc:
        return None, f"not trusted: {exc}"
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        return None, f"{path} is unreadable ({type(exc).__name__}: {str(exc)[:200]})"
    if not (math.isfinite(written) and 0 < interval <= MAX_INTERVAL_S):
        return None, f"{path} is unreadable (written {written!r}, interval {interval!r})"
    age = (time.time() if now is None else now) - written
    if age < -FUTURE_SLACK_S:
        return None, f"{path} is written {-age:.0f} s in the future: not trusted"
    if age > FRESH_INTERVALS * interval:
        return None, f"{path} is {age:.0f} s old (more than {FRESH_INTERVALS} intervals of {interval:g} s)"
    problem = agent_process_problem(pid, st.st_uid)
    if problem:
        return None, f"{path} was written by {problem}"
    return doc, ""
