"""The hooks a gpuagent plugin may implement.

Hooks register things; the host calls them once at start (and on reload).
There is deliberately no broadcast hook on the collection path: pluggy stops
at the first exception, so the scheduler calls each collector itself, inside
its own guard. Each hook is documented in docs/plugins/reference.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import click

    from gpuagent.collector import Collector
    from gpuagent.sink import Sink

hookspec = pluggy.HookspecMarker("gpuagent")
hookimpl = pluggy.HookimplMarker("gpuagent")


@hookspec
def gpuagent_register_collectors(register: Callable[[type[Collector]], None]) -> None:
    """Register collector classes by calling ``register(CollectorClass)`` for each.

    A collector's ``name`` is its config table (``[collectors.NAME]``) and must
    be unique across all plugins.
    """


@hookspec
def gpuagent_register_sinks(register: Callable[[type[Sink]], None]) -> None:
    """Register sink classes by calling ``register(SinkClass)`` for each.

    A sink's ``name`` is its config table (``[sinks.NAME]``); a sink runs when
    its table is present and not ``enabled = false``.
    """


@hookspec
def gpuagent_register_commands(cli: click.Group) -> None:
    """Add click commands or groups to the ``gpuagent`` command line."""
