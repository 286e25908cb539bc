"""The gpuagent command line."""

from __future__ import annotations

import json
import logging
import sys

import click

from gpuagent import __version__
from gpuagent.commands.lazycli import LazyGroup
from gpuagent.errors import AgentError

log = logging.getLogger("gpuagent")

# Commands that live in their own modules, imported when used: name -> "module:attribute".
COMMANDS: dict[str, str] = {
    "run": "gpuagent.commands.run:run",
    "plugins": "gpuagent.commands.plugins:plugins",
    "config": "gpuagent.commands.config:config",
    "inspect": "gpuagent.commands.inspect:inspect",
    "sim": "gpuagent.sim.cli:sim_group",
    "compare": "gpuagent.compare.cli:compare",
    "rollups": "gpuagent.compare.rollups_cli:rollups",
    "probe": "gpuagent.probe.cli:probe",
    "top": "gpuagent.top.cli:top",
}


class AgentGroup(LazyGroup):
    """Turns AgentError into one line on stderr and exit 1, never a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AgentError as exc:
            click.echo(f"gpuagent: error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt as exc:
            interrupted(at_once=False, note="; ".join(getattr(exc, "__notes__", ())))


def interrupted(at_once: bool = True, note: str = "") -> None:
    """Ctrl-C, whatever the command and wherever it was: one line, exit 130 (128 + SIGINT),
    as shells report it; not click's `Aborted!` (exit 1), nor a traceback. In a command, the
    interpreter shuts down as usual (worker pools release what they hold); in start-up,
    where nothing is open yet, at once: see exit_interrupted. ``note``: what the command left
    half-done (a partial history), on the same line."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the exit short
    click.echo(f"gpuagent: interrupted: {note}" if note else "gpuagent: interrupted", err=True)
    if not at_once:
        import atexit

        # After the worker pools' own exits (threading's, which run before atexit's), 130 for sure:
        # an interrupt caught inside a command's lazy import can otherwise end it by SIGINT (-2).
        atexit.register(exit_interrupted)
        sys.exit(130)
    exit_interrupted()


def exit_interrupted() -> None:
    """Exit 130 now, skipping the interpreter's shutdown: an interrupt caught inside an
    import can otherwise turn the status into death by SIGINT (exit -2)."""
    import os

    if "logging" in sys.modules:  # its handlers flushed, as the interpreter's shutdown would
        sys.modules["logging"].shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(130)


@click.group(cls=AgentGroup, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="gpuagent")
def cli() -> None:
    """Telemetry agent for NVIDIA GPU fleets: NVML readings, tagged with each GPU's identity, to InfluxDB,
    VictoriaMetrics or Prometheus; compare and top --fleet read them back by InfluxQL or PromQL."""


# Plugin name -> the commands its gpuagent_register_commands hook added, as recorded when
# build_cli registered them (gpuagent plugins lists these; no second way of working them out).
REGISTERED_COMMANDS: dict[str, list[str]] = {}


def disabled_plugins(argv: list[str]) -> list[str]:
    """`[plugins] disabled` of the config this command line will use, read before any plugin
    is imported (a disabled plugin must never be imported). A config that cannot be read
    here disables nothing: the command itself reports the problem in one line."""

    from gpuagent.config import resolve_path

    path = None
    for i, arg in enumerate(argv):
        if arg in ("-c", "--config") and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
    try:
        chosen = resolve_path(path)
        if chosen is None:
            return []
        from gpuagent.service import toml_bound

        disabled = toml_bound.loads(toml_bound.read(chosen).decode()).get("plugins", {}).get("disabled", [])
    except (OSError, ValueError):
        return []
    return [str(n) for n in disabled] if isinstance(disabled, list) else []


def build_cli(argv: list[str] | None = None) -> click.Group:
    """The CLI with the commands plugins add (gpuagent_register_commands)."""
    from gpuagent.plugin_host import load_host

    args = list(sys.argv[1:] if argv is None else argv)
    # Load errors are reported by `gpuagent plugins` and by run; not on every command.
    logging.getLogger("gpuagent.plugins").setLevel(logging.CRITICAL)
    try:
        host = load_host(extra_disabled=disabled_plugins(args))
        host.register_commands(cli)
    finally:
        logging.getLogger("gpuagent.plugins").setLevel(logging.NOTSET)
    REGISTERED_COMMANDS.clear()
    REGISTERED_COMMANDS.update({name: list(info.commands) for name, info in host.plugins.items()})
    return cli


def main(argv: list[str] | None = None) -> None:
    try:
        build_cli(argv)
        cli.main(args=argv, prog_name="gpuagent")
    except KeyboardInterrupt:  # in start-up, before a command runs
        interrupted()
    except BrokenPipeError:
        # `gpuagent inspect | head`: the reader left; not an error worth a traceback.
        sys.stderr.close()
        sys.exit(0)


def print_json(doc) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False, default=str))
