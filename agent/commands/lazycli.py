"""A click group whose subcommands are imported only when used.

`gpuagent run` on every node should not pay, in start-up time and resident
memory, for the modules behind inspect, compare or probe (rich, numpy
paths, report code).
"""

from __future__ import annotations

import importlib

import click


class LazyGroup(click.Group):
    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        # name -> "module:attribute"
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str):
        command = super().get_command(ctx, name)
        if command is None and name in self.lazy:
            module, attr = self.lazy[name].split(":")
            command = getattr(importlib.import_module(module), attr)
            self.add_command(command, name)
        return command
