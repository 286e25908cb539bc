"""The gpuagent command line."""

from __future__ import annotations

import importlib
import json
import logging
import sys

import click

from gpuagent import __version__
from gpuagent.errors import AgentError

log = logging.getLogger("gpuagent")

_TOLERATE_MISSING = True  # TODO(lead): False once every command module exists

# Commands that live in their own modules: (module, attribute). Each is a click command or group.
COMMAND_MODULES: tuple[tuple[str, str], ...] = (
    ("gpuagent.commands.run", "run"),
    ("gpuagent.commands.plugins", "plugins"),
    ("gpuagent.commands.config", "config"),
    ("gpuagent.inspect", "inspect"),
    ("gpuagent.sim.cli", "sim_group"),
    ("gpuagent.compare.cli", "compare"),
    ("gpuagent.probe.cli", "probe"),
)


class AgentGroup(click.Group):
    """Turns AgentError into one line on stderr and exit 1, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AgentError as exc:
            click.echo(f"gpuagent: error: {exc}", err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=AgentGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="gpuagent")
def cli() -> None:
    """Telemetry agent for NVIDIA GPU fleets: NVML readings, tagged with each GPU's identity, to InfluxDB."""


def build_cli() -> click.Group:
    for module, attr in COMMAND_MODULES:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            # Tolerated only while a command module is being written.
            if _TOLERATE_MISSING and exc.name and module.startswith(exc.name):
                continue
            raise
        cli.add_command(getattr(mod, attr))
    from gpuagent.plugin_host import PluginHost

    logging.getLogger("gpuagent.plugins").setLevel(logging.CRITICAL)
    PluginHost().load().register_commands(cli)
    logging.getLogger("gpuagent.plugins").setLevel(logging.NOTSET)
    return cli


def main(argv: list[str] | None = None) -> None:
    build_cli()
    try:
        cli.main(args=argv, prog_name="gpuagent")
    except BrokenPipeError:
        # `gpuagent inspect | head`: the reader left; not an error worth a traceback.
        sys.stderr.close()
        sys.exit(0)


def print_json(doc) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False, default=str))
