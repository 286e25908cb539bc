"""gpuagent: a telemetry agent for NVIDIA GPU fleets.

The names re-exported here are the API that third-party plugins use and that
the project keeps stable (see docs/plugins/reference.md).
"""

__version__ = "0.1.0"

from gpuagent.accumulator import Accumulator
from gpuagent.collector import Collector, CollectorConfig
from gpuagent.durations import Duration
from gpuagent.gpu import Gpu, GpuLost
from gpuagent.hookspecs import hookimpl
from gpuagent.metric import Point
from gpuagent.nvml_read import Field, FieldReader, valid
from gpuagent.sink import Sink, SinkConfig

__all__ = [
    "Accumulator",
    "Collector",
    "CollectorConfig",
    "Duration",
    "Field",
    "FieldReader",
    "Gpu",
    "GpuLost",
    "Point",
    "Sink",
    "SinkConfig",
    "__version__",
    "hookimpl",
    "valid",
]
