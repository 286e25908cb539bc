"""`gpuagent top`: the command."""

from __future__ import annotations

import sys

import click

from gpuagent.commands.cli_options import influx_options, simulate_option
from gpuagent.errors import AgentError

DEFAULT_INTERVAL_S = 2.0


@click.command("top")
@click.option(
    "--fleet", is_flag=True, help="The fleet from InfluxDB (--url/--config) or a PromQL server (--promql-url)."
)
@click.option("--once", is_flag=True, help="Print one frame and exit.")
@simulate_option("A simulated node, e.g. l40s:2,h100-sxm-mig:1.")
@click.option("--seed", type=int, default=None, help="Seed of the simulated node's load model.")
@click.option(
    "--interval",
    default=None,
    metavar="DURATION",
    help=f"Refresh every DURATION (node: default {DEFAULT_INTERVAL_S:g}s; fleet: the server's sample pace).",
)
@click.option(
    "--by",
    type=click.Choice(["host", "model"]),
    default="host",
    show_default=True,
    help="--fleet: a row per host or per GPU model.",
)
@click.option(
    "--since",
    "window",
    default="5m",
    show_default=True,
    metavar="DURATION",
    help="--fleet: a GPU's newest sample counts when it is this recent.",
)
@click.option(
    "--where",
    default=None,
    metavar="COND",
    help="--fleet: InfluxQL condition on tags, or PromQL label matchers with --promql-url.",
)
@influx_options(
    prefix="--fleet: ",
    config_help="Config file: the node's collectors, or the fleet's [sinks.influxdb] / [compare] promql_url.",
)
@click.option("--promql-url", default=None, metavar="URL", help="--fleet: a Prometheus-compatible query API instead.")
@click.option(
    "--plugins-dir", type=click.Path(file_okay=False, exists=True), help="Also load every .py plugin file in DIR."
)
def top(
    fleet,
    once,
    simulate,
    seed,
    interval,
    by,
    window,
    where,
    config_path,
    url,
    database,
    token,
    username,
    password,
    promql_url,
    plugins_dir,
):
    """A live view of this node's GPUs (or, with --fleet, of the fleet): keys s sort, g / j filter, q quit."""
    from gpuagent.service.logsetup import setup_logging
    from gpuagent.top.app import Top, run_live, run_once, run_plain
    from gpuagent.top.view import View

    if fleet and simulate:
        raise click.UsageError("--simulate is for a node; --fleet reads the server the agents write to")
    if not fleet and (url or database or promql_url or where):
        raise click.UsageError("--url, --database, --promql-url and --where need --fleet")
    every = _duration("--interval", interval) if interval else None
    window_s = _duration("--since", window)
    setup_logging("warning")
    if fleet:
        source = fleet_source(config_path, url, database, token, username, password, promql_url, by, window_s, where)
    else:
        from gpuagent.top.node import NodeSource

        source = NodeSource(simulate, seed, config_path, plugins_dir)
    from gpuagent.commands.inspect import make_console

    console = make_console()
    view = View(
        fleet=fleet,
        sort="health" if fleet else "index",
        interval=every or (source.interval if fleet else DEFAULT_INTERVAL_S),
    )
    app = Top(source, view, follow_pace=fleet and every is None)
    try:
        if once:
            run_once(app, console)
        elif console.is_terminal and sys.stdin.isatty():
            run_live(app, console)
        else:
            run_plain(app, console)
    except KeyboardInterrupt:
        sys.exit(130)  # the shell's code for SIGINT
    finally:
        source.close()


def _duration(option: str, text: str) -> float:
    from gpuagent.units import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise AgentError(f"{option}: {exc}") from None
    if seconds <= 0:
        raise AgentError(f"{option}: must be more than 0, got {text!r}")
    return seconds


def fleet_source(config_path, url, database, token, username, password, promql_url, by, window_s, where):
    import dataclasses

    from gpuagent.compare.promql import promql_url_from

    # --where is checked by the fleet source as it is made (FleetSource.__init__), before anything is sent.
    promql = promql_url_from(config_path, promql_url, url)
    if promql:
        from gpuagent.compare.promql import PromQL, prom_connection_from
        from gpuagent.top.fleet import PromFleet

        return PromFleet(PromQL(prom_connection_from(config_path, promql)), by, window_s, where)
    from gpuagent.compare.query import InfluxQL, connection_from
    from gpuagent.top.fleet import InfluxFleet

    conn = connection_from(config_path, url, database, token, username, password)
    conn = dataclasses.replace(conn, timeout=min(conn.timeout, 30.0))
    return InfluxFleet(InfluxQL(conn), by, window_s, where)
