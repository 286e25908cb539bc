"""What the host hands every collector and sink."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuagent.service.liveness import Liveness
from gpuagent.service.shared import Shared

if TYPE_CHECKING:
    from gpuagent.gpus.gpu import Gpu
    from gpuagent.gpus.nvml import NvmlSession


@dataclass
class AgentContext:
    hostname: str
    global_tags: dict[str, str] = field(default_factory=dict)
    gpus: list[Gpu] = field(default_factory=list)
    nvml: NvmlSession | None = None
    state_dir: Path = Path("/var/lib/gpuagent")
    config_path: Path | None = None
    # What collectors hand each other per cycle (the processes collector's list, for work).
    shared: Shared = field(default_factory=Shared)
    # /healthz and /readyz read it; the scheduler's loop feeds it (a reload hands it on).
    liveness: Liveness = field(default_factory=Liveness)

    @property
    def simulated(self) -> bool:
        return bool(self.nvml and self.nvml.simulated)

    @property
    def default_tags(self) -> dict[str, str]:
        return {"host": self.hostname, **self.global_tags}
