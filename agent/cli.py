"""The gpuagent command line."""

from __future__ import annotations

import json
import logging
import sys

import click

from gpuagent import __version__
from gpuagent.errors import AgentError
from gpuagent.lazycli import LazyGroup

log = logging.getLogger("gpuagent")

# Commands that live in their own modules, imported when used: name -> "module:attribute".
COMMANDS: dict[str, str] = {
    "run": "gpuagent.commands.run:run",
    "plugins": "gpuagent.commands.plugins:plugins",
    "config": "gpuagent.commands.config:config",
    "inspect": "gpuagent.inspect:inspect",
    "sim": "gpuagent.sim.cli:sim_group",
    "compare": "gpuagent.compare.cli:compare",
    "probe": "gpuagent.probe.cli:probe",
}


class AgentGroup(LazyGroup):
    """Turns AgentError into one line on stderr and exit 1, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AgentError as exc:
            click.echo(f"gpuagent: error: {exc}", err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=AgentGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="gpuagent")
def cli() -> None:
    """Telemetry agent for NVIDIA GPU fleets: NVML readings, tagged with each GPU's identity, to InfluxDB."""


def build_cli() -> click.Group:
    """The CLI with the commands plugins add (gpuagent_register_commands)."""
    from gpuagent.plugin_host import PluginHost

    # Load errors are reported by `gpuagent plugins` and by run; not on every command.
    logging.getLogger("gpuagent.plugins").setLevel(logging.CRITICAL)
    try:
        PluginHost().load().register_commands(cli)
    finally:
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
