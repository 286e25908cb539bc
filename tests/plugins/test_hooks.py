"""One test per hookspec, named test_hook_<hook> (tests/test_docs.py checks that each hook has one)."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from gpuagent.plugin_host import PluginHost
from gpuagent.service.runtime import Options, build

SINK_PLUGIN = """
import gpuagent

RECEIVED = []

class MemorySink(gpuagent.Sink):
    name = "memory_tp"

    class Config(gpuagent.SinkConfig):
        label: str = "mem"

    def write(self, points):
        RECEIVED.extend(points)

    def stats(self):
        return {"points_written_total": len(RECEIVED)}

@gpuagent.hookimpl
def gpuagent_register_sinks(register):
    register(MemorySink)
"""

COMMAND_PLUGIN = """
import click
import gpuagent

@click.command("ib-status")
@click.option("--port", default=1)
def ib_status(port):
    \"\"\"Show one port.\"\"\"
    click.echo(f"port {port}: ACTIVE")

@gpuagent.hookimpl
def gpuagent_register_commands(cli):
    cli.add_command(ib_status)
"""


def test_hook_gpuagent_register_collectors(plugin_file, plugins_dir, write_config, good_plugin, capsys):
    plugin_file("hello_plugin", good_plugin)
    host = PluginHost(plugins_dir=plugins_dir).load()
    assert host.plugins["hello_plugin"].hooks == ["gpuagent_register_collectors"]
    assert host.owner_of("collectors", "hello_tp").name == "hello_plugin"
    cfg = write_config('[collectors.hello_tp]\ngreeting = "moin"\n')
    agent = build(Options(config_path=cfg, plugins_dir=str(plugins_dir), test=True))
    try:
        points = agent.scheduler.run_once()
    finally:
        agent.close(flush_timeout=1)
    [point] = [p for p in points if p.measurement == "hello_tp"]
    assert point.fields == {"greeting": "moin", "limit": 10}
    assert point.tags == {"host": "node1"}  # host (and global tags) come from the agent
    assert point.time_ns > 0
    capsys.readouterr()


def test_hook_gpuagent_register_sinks(plugin_file, plugins_dir, write_config):
    import sys

    plugin_file("memory_plugin", SINK_PLUGIN)
    cfg = write_config('[sinks.memory_tp]\nlabel = "x"\n')
    agent = build(Options(config_path=cfg, plugins_dir=str(plugins_dir)))
    try:
        assert [s.name for s in agent.sinks] == ["memory_tp"]  # a configured sink replaces the default
        agent.scheduler.run_once()
    finally:
        agent.close(flush_timeout=1)
    received = sys.modules["gpuagent_local_plugin_memory_plugin"].RECEIVED
    kinds = {p.measurement for p in received}
    assert {"host", "gpuagent"} <= kinds
    assert any(p.tags.get("sink") == "memory_tp" for p in received if p.measurement == "gpuagent")


def test_hook_gpuagent_register_commands(plugin_file, plugins_dir):
    plugin_file("ib_commands", COMMAND_PLUGIN)
    host = PluginHost(plugins_dir=plugins_dir).load()
    group = click.Group("gpuagent")
    host.register_commands(group)
    assert host.plugins["ib_commands"].commands == ["ib-status"]
    result = CliRunner().invoke(group, ["ib-status", "--port", "2"])
    assert result.exit_code == 0 and result.output == "port 2: ACTIVE\n"

    # A plugin whose command hook raises is failed; the commands of the others are kept.
    plugin_file(
        "bad_commands",
        """
    import gpuagent

    @gpuagent.hookimpl
    def gpuagent_register_commands(cli):
        raise RuntimeError("bad_commands: no")
    """,
    )
    host = PluginHost(plugins_dir=plugins_dir).load()
    group = click.Group("gpuagent")
    host.register_commands(group)
    assert "ib-status" in group.commands
    assert (host.plugins["bad_commands"].status, host.plugins["bad_commands"].error) == (
        "failed",
        "RuntimeError: bad_commands: no",
    )


@pytest.mark.slow
def test_hook_gpuagent_register_commands_from_an_installed_package(site, cli):
    site.add_dist("tp-ibcmd", "0.2", {"tp_ibcmd.py": COMMAND_PLUGIN}, {"ibcmd": "tp_ibcmd"})
    out = cli("ib-status", "--port", "3", site=site)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "port 3: ACTIVE\n"
    listed = cli("plugins", "--json", site=site)
    ibcmd = next(p for p in json.loads(listed.stdout)["plugins"] if p["name"] == "ibcmd")
    assert (ibcmd["hooks"], ibcmd["commands"], ibcmd["version"]) == (
        ["gpuagent_register_commands"],
        ["ib-status"],
        "0.2",
    )
