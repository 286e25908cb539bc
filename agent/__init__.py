"""gpuagent: a telemetry agent for NVIDIA GPU fleets.

The names re-exported here are the API that third-party plugins use and that
the project keeps stable (see docs/plugins/reference.md).
"""

__version__ = "0.1.0"

# Imported on first use (PEP 562), so that `import gpuagent` is instant: the command line
# installs its Ctrl-C handling only once its first module is imported (gpuagent.__main__),
# and a Ctrl-C before then would print a traceback from deep inside these imports.
_EXPORTS = {
    "Accumulator": "gpuagent.pipeline.accumulator",
    "Collector": "gpuagent.collector",
    "CollectorConfig": "gpuagent.collector",
    "Duration": "gpuagent.units",
    "Gpu": "gpuagent.gpus.gpu",
    "GpuLost": "gpuagent.gpus.gpu",
    "hookimpl": "gpuagent.hookspecs",
    "Point": "gpuagent.pipeline.metric",
    "Field": "gpuagent.gpus.nvml_read",
    "FieldReader": "gpuagent.gpus.nvml_read",
    "valid": "gpuagent.gpus.nvml_read",
    "Sink": "gpuagent.sink",
    "SinkConfig": "gpuagent.sink",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gpuagent' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


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
