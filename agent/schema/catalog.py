"""Every declared field, by (measurement, field): what the Prometheus sink's HELP and TYPE read.

The built-in declarations are read from their modules (the agent's own measurement first, then
each plugin folder's schema.py in name order: where two declare the same field, the first
wins, so a sink's statistic takes the agent's wording). A loaded PluginHost adds the ``schema``
of every collector and sink it registered, so a third-party plugin's fields are found the same way.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources

from gpuagent.schema import agent_health
from gpuagent.schema.fields import Field, Measurement

_added: dict[tuple[str, str], Field] = {}


def builtin_plugins() -> list[str]:
    """The plugin folders that declare a schema (schema.py), in name order."""
    folders = resources.files("gpuagent.plugins")
    return sorted(p.name for p in folders.iterdir() if p.is_dir() and (p / "schema.py").is_file())


def plugin_schema(plugin: str) -> tuple[Measurement, ...]:
    """The SCHEMA of plugins/<plugin>/schema.py."""
    return importlib.import_module(f"gpuagent.plugins.{plugin}.schema").SCHEMA


def builtin_schema() -> tuple[Measurement, ...]:
    """The agent's own measurement, then every built-in plugin's, in that order."""
    out = list(agent_health.SCHEMA)
    for plugin in builtin_plugins():
        out += plugin_schema(plugin)
    return tuple(out)


def index(schema: Iterable[Measurement]) -> dict[tuple[str, str], Field]:
    """(measurement, field) -> its declaration, the first one where several declare it."""
    table: dict[tuple[str, str], Field] = {}
    for measurement in schema:
        for field in measurement.fields:
            table.setdefault((measurement.name, field.name), field)
    return table


@lru_cache(maxsize=1)
def builtin() -> dict[tuple[str, str], Field]:
    """The built-in fields (the agent's and its plugins'), by (measurement, field)."""
    return index(builtin_schema())


def declare(schema: Iterable[Measurement]) -> None:
    """Make a plugin's declarations known (the plugin host calls this for what it registers)."""
    for key, field in index(schema).items():
        _added.setdefault(key, field)


def lookup(measurement: str, field: str) -> Field | None:
    """The declaration of one field: a built-in one, else one a loaded plugin declared; None: undeclared."""
    key = (measurement, field)
    return builtin().get(key) or _added.get(key)
