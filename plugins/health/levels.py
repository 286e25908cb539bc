"""Action levels: when a verdict fails a node health check (`fail_on`) or drains a node (`drain_on`).

Three levels, not the six verdicts: `degraded` (any verdict but ok), `drain` (every verdict that
takes the GPU out of service: drain, reset_required, reboot_required, lost; a node is drained
before a GPU reset or a reboot, so both count), `lost` (a GPU gone or missing only).
"""

from __future__ import annotations

from typing import Literal

Level = Literal["degraded", "drain", "lost"]
LEVELS: dict[str, frozenset[str]] = {
    "degraded": frozenset({"degraded", "reset_required", "reboot_required", "drain", "lost"}),
    "drain": frozenset({"reset_required", "reboot_required", "drain", "lost"}),
    "lost": frozenset({"lost"}),
}


def reaches(verdict: str, level: str) -> bool:
    return verdict in LEVELS[level]
