"""gpuagent plugins: what is loaded, from where, and what failed."""

from __future__ import annotations

import click

from gpuagent.errors import AgentError
from gpuagent.service.runtime import Options, load_plugins


@click.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
@click.option("--sample-config", "sample", metavar="NAME", help="Print the sample config table of plugin NAME.")
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False))
@click.option("--plugins-dir", type=click.Path(file_okay=False, exists=True))
def plugins(as_json, sample, config_path, plugins_dir):
    """List plugins: version, distribution, hooks, what they register, status."""
    from gpuagent.config import read_config

    config = read_config(config_path)
    host = load_plugins(config, Options(config_path=config_path, plugins_dir=plugins_dir))
    from gpuagent.cli import REGISTERED_COMMANDS

    # What each plugin's hook registered when the CLI was built (recorded by the registration).
    for info in host.plugins.values():
        info.commands = REGISTERED_COMMANDS.get(info.name, [])
    if sample:
        owner = host.plugins.get(sample) or host.owner_of("collectors", sample) or host.owner_of("sinks", sample)
        if owner is None:
            raise AgentError(f"no plugin named {sample!r} (see `gpuagent plugins`)")
        text = host.sample_config(owner.name)
        if text is None:
            raise AgentError(f"plugin {owner.name} ships no sample config")
        click.echo(text, nl=False)
        return
    infos = list(host.plugins.values())
    if as_json:
        from gpuagent.cli import print_json

        print_json({"plugins": [i.to_dict() for i in infos]})
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=None, show_lines=False)
    for col in ("plugin", "version", "distribution", "registers", "hooks", "status"):
        table.add_column(col, overflow="fold")
    for i in infos:
        registers = ", ".join(
            [
                *(f"collector:{c}" for c in i.collectors),
                *(f"sink:{s}" for s in i.sinks),
                *(f"command:{c}" for c in i.commands),
            ]
        )
        hooks = ", ".join(h.removeprefix("gpuagent_register_") for h in i.hooks)
        status = i.status if i.status != "failed" else f"[red]failed[/red]: {i.error}"
        table.add_row(i.name, i.version or "", i.distribution or "", registers, hooks, status)
    Console(width=120).print(table)
