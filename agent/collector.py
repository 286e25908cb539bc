"""The Collector contract: a named class with a config model and collect(acc)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from gpuagent.gpus.gpu import GpuLost
from gpuagent.units import Duration

if TYPE_CHECKING:
    from gpuagent.context import AgentContext
    from gpuagent.gpus.gpu import Gpu
    from gpuagent.pipeline.accumulator import Accumulator
    from gpuagent.schema.fields import Measurement


class CollectorConfig(BaseModel):
    """Base of every collector's table. Unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    enabled: bool = True
    # None: the collector's default_interval, else [agent] interval.
    interval: Duration | None = None
    # None: the collector's interval (a run may take at most one interval).
    timeout: Duration | None = None


class Collector:
    """Base class of every collector, built-in or third-party.

    Subclasses set ``name`` and optionally ``Config``, and implement either
    ``collect(acc)`` or, for per-GPU readings, ``collect_gpu(acc, gpu)``: the
    default ``collect`` calls it for each live GPU and moves on when one is
    lost mid-read. Unsupported readings are left out (None), never errors.
    """

    name: ClassVar[str] = ""
    Config: ClassVar[type[CollectorConfig]] = CollectorConfig
    # Seconds between runs when the table names no interval (None: the agent's).
    default_interval: ClassVar[float | None] = None
    # True: the agent refuses to start without NVML (no driver and no --simulate).
    requires_gpus: ClassVar[bool] = False
    # What it writes: a Measurement per point shape (gpuagent.schema.fields). The Prometheus sink
    # takes HELP and TYPE from it; a built-in plugin's README field tables are generated from it.
    schema: ClassVar[tuple[Measurement, ...]] = ()

    def __init__(self, config: CollectorConfig, context: AgentContext):
        self.config = config
        self.context = context
        self.log = logging.getLogger(f"gpuagent.collector.{self.name}")

    @property
    def gpus(self) -> list[Gpu]:
        """The machine's GPUs that are still answering."""
        return [g for g in self.context.gpus if not g.lost]

    def collect(self, acc: Accumulator) -> None:
        for gpu in self.gpus:
            try:
                self.collect_gpu(acc, gpu)
            except GpuLost:
                continue

    def collect_gpu(self, acc: Accumulator, gpu: Gpu) -> None:
        raise NotImplementedError(f"{type(self).__name__} implements neither collect nor collect_gpu")

    def read_gpu(self, gpu: Gpu) -> dict[str, Any] | None:
        """Optional: one GPU's facts for `gpuagent inspect`, read once (no earlier sample, no
        waiting), keyed by the measurement they stream as, with the stream's field names: a dict
        of fields, or for several points one object (the GPU's own fields, the others under
        ``points``). Called on an instance built with the default Config. None: nothing to show."""
        return None

    def stats(self) -> dict[str, int | float]:
        """Optional: the collector's own counters, added to its point in the ``gpuagent`` measurement
        (what a budget cut, say); names end in ``_total`` and are documented in its README."""
        return {}

    def close(self) -> None:
        """Release what the collector holds (threads, event sets). Called once at shutdown/reload."""
