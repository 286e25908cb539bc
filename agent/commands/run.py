"""gpuagent run: collect and send, once or as a service."""

from __future__ import annotations

import click

from gpuagent.commands.cli_options import simulate_option
from gpuagent.service.logsetup import setup_logging
from gpuagent.service.runtime import Options, build, load


@click.command()
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="Config file (default: $GPUAGENT_CONFIG or /etc/gpuagent/gpuagent.toml).",
)
@simulate_option("Run on a simulated fleet, e.g. l40s:2,h100-sxm:1.")
@click.option("--seed", type=int, default=None, help="Seed of the simulated fleet's load model.")
@click.option("--once", is_flag=True, help="Collect every enabled collector once, flush the sinks and exit.")
@click.option("--test", is_flag=True, help="Print line protocol on stdout instead of sending it.")
@click.option(
    "--plugins-dir", type=click.Path(file_okay=False, exists=True), help="Also load every .py plugin file in DIR."
)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default=None)
@click.option("--log-format", type=click.Choice(["text", "json"]), default=None)
def run(config_path, simulate, seed, once, test, plugins_dir, log_level, log_format):
    """Collect GPU telemetry and send it to the configured sinks."""
    options = Options(config_path=config_path, simulate=simulate, seed=seed, test=test, plugins_dir=plugins_dir)
    setup_logging(log_level or "warning", log_format or "text")
    config, host = load(options)
    setup_logging(log_level or config.agent.log_level, log_format or config.agent.log_format)
    if once:
        agent = build(options, config, host)
        try:
            agent.scheduler.run_once()
        finally:
            agent.close()
        return
    from gpuagent.service.daemon import serve
    from gpuagent.service.malloc_arenas import limit_arenas

    limit_arenas()  # before the collector threads: a service keeps what its arenas take
    serve(options, config, host, log_level=log_level, log_format=log_format)
