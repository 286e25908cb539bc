"""`gpuagent health`'s verdict for the node, from a state document (gpuagent.service.state_file's shape:
the running agent's file, or the points of a quick read of its own recorded the same way).

The node-health-check contract (Slurm HealthCheckProgram / LBNL NHC, node-problem-detector's
custom plugins): exit 0 ok, 1 a problem, 2 unknown; one line starting with the worst GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuagent.plugins.health.catalog import SEVERITY
from gpuagent.plugins.health.levels import reaches
from gpuagent.schema.measurements import GPU_HEALTH, GPU_INVENTORY

OK, PROBLEM, UNKNOWN = 0, 1, 2
MAX_LINE = 256  # node-problem-detector cuts a message at max_output_length (the shipped config: 256)


@dataclass
class NodeHealth:
    code: int
    line: str
    gpus: list[dict[str, Any]] = field(default_factory=list)
    missing: int = 0
    source: str = ""

    def document(self) -> dict[str, Any]:
        status = {OK: "ok", PROBLEM: "problem", UNKNOWN: "unknown"}[self.code]
        return {
            "status": status,
            "exit_code": self.code,
            "message": self.line,
            "source": self.source,
            "gpus_missing": self.missing,
            "gpus": self.gpus,
        }


def shorten(line: str, limit: int = MAX_LINE) -> str:
    line = " ".join(line.split())  # one line, whatever a reason holds
    return line if len(line) <= limit else line[: limit - 1] + "…"


def unknown(why: str, source: str = "") -> NodeHealth:
    return NodeHealth(UNKNOWN, shorten(f"unknown: {why}"), source=source)


def evaluate(state: dict[str, Any], fail_on: str, source: str = "", limit: int = MAX_LINE) -> NodeHealth:
    gpus = []
    for index, entry in (state.get("gpus") or {}).items():
        health = entry.get(GPU_HEALTH) or {}
        verdict = health.get("verdict")
        if verdict not in SEVERITY:
            continue  # a GPU the health collector has not judged (yet): not evidence either way
        gpus.append(
            {
                "gpu": int(index),
                "uuid": entry.get("tags", {}).get("uuid"),
                "verdict": verdict,
                "reason": health.get("verdict_reason") or "",
            }
        )
    gpus.sort(key=lambda g: g["gpu"])
    inventory = (state.get("node") or {}).get(GPU_INVENTORY) or {}
    missing = int(inventory.get("gpus_missing") or 0)
    if not gpus and not missing:
        return NodeHealth(
            UNKNOWN, "unknown: no GPU verdict (no GPU found, or the health collector is off)", source=source
        )
    worst = max(gpus, key=lambda g: (SEVERITY[g["verdict"]], -g["gpu"]), default=None)
    failing = [g for g in gpus if reaches(g["verdict"], fail_on)]
    if missing and (worst is None or worst["verdict"] != "lost"):
        # NVML renumbers the GPUs it lists from 0: a missing one has no index; it is named after them.
        line = f"GPU {inventory.get('gpus_present', len(gpus))} lost: {inventory.get('reason', 'GPUs missing')}"
    else:
        assert worst is not None  # no GPU and none missing returned above
        line = f"GPU {worst['gpu']} {worst['verdict']}: {worst['reason']}"
        others = len(failing) - (1 if worst in failing else 0)
        if others:
            line += f" (+{others} more GPU{'s' if others > 1 else ''} at fail_on={fail_on})"
        if missing:
            line += f" ({inventory.get('reason')})"
    code = PROBLEM if failing or missing else OK
    return NodeHealth(code, shorten(line, limit), gpus, missing, source)
