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
import os
import time
from pathlib import Path
from typing import Any

from gpuagent.pipeline.metric import Point

log = logging.getLogger("gpuagent.state")

STATE_FILE = "state.json"
FRESH_INTERVALS = 3  # a state older than this many intervals is stale (DESIGN: Health actions)
PER_JOB = frozenset({"gpu_process", "gpu_job", "gpu_work"})
NODE = frozenset({"gpu_inventory", "gpu_action"})  # node-level measurements a reader needs


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
        try:
            tmp = path.with_name(f".{STATE_FILE}.{os.getpid()}")
            tmp.write_text(json.dumps(self.document(interval, hostname, cost), default=str))
            os.replace(tmp, path)
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


def read_fresh(state_dir: Path, now: float | None = None) -> tuple[dict[str, Any] | None, str]:
    """(the running agent's state, "") when it is fresh and its writer alive, else (None, why not)."""
    path = Path(state_dir) / STATE_FILE
    try:
        doc = json.loads(path.read_text())
        pid, written, interval = int(doc["pid"]), float(doc["written"]), float(doc["interval"])
    except FileNotFoundError:
        return None, f"no running agent's state in {path}"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"{path} is unreadable ({type(exc).__name__}: {exc})"
    age = (time.time() if now is None else now) - written
    if age > FRESH_INTERVALS * interval:
        return None, f"{path} is {age:.0f} s old (more than {FRESH_INTERVALS} intervals of {interval:g} s)"
    if not pid_alive(pid):
        return None, f"{path} was written by pid {pid}, which is not running"
    return doc, ""
