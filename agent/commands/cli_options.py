"""Options several commands share, each defined once: --simulate (run, inspect, probe, top), the
InfluxDB connection (compare, top --fleet, sim fleet, rollups) and --timeout's check."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import click

from gpuagent.errors import AgentError
from gpuagent.units import parse_duration

F = TypeVar("F", bound=Callable)


def simulate_spec(ctx, param, value: str | None) -> str | None:
    """`--simulate ""` is a SPEC left out by mistake (an unset shell variable): say so, rather
    than fall through to the real NVML and its "no NVIDIA driver found"."""
    if value is not None and not value.strip():
        raise AgentError("--simulate: the SPEC is empty; give NAME[:COUNT],..., e.g. --simulate l40s:2")
    return value


def simulate_option(help: str) -> Callable[[F], F]:
    """`--simulate SPEC`, with what it simulates in this command (`help`)."""
    return click.option("--simulate", metavar="SPEC", callback=simulate_spec, help=help)


CONFIG_HELP = (
    "Connection from its [sinks.influxdb], or [compare] for PromQL "
    "(default: $GPUAGENT_CONFIG or /etc/gpuagent/gpuagent.toml)."
)


def influx_options(prefix: str = "", config_help: str = CONFIG_HELP) -> Callable[[F], F]:
    """-c/--config, --url, --database, --token, --username and --password: the InfluxDB a command
    reads or writes (gpuagent.compare.query.connection_from takes them in this order). `prefix` heads
    each help text (top: "--fleet: ", where they apply only to the fleet)."""
    options = (
        click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), default=None, help=config_help),
        click.option("--url", default=None, help=f"{prefix}InfluxDB URL (overrides the config)."),
        click.option("--database", default=None, help=f"{prefix}Database (1.x) or bucket / database name (2.x, 3.x)."),
        click.option(
            "--token",
            default=None,
            envvar="INFLUX_TOKEN",
            help=f"{prefix}API token, sent as 'Authorization: Token' ($INFLUX_TOKEN).",
        ),
        click.option("--username", default=None, help=f"{prefix}1.x user (Basic auth), with --password."),
        click.option(
            "--password", default=None, envvar="INFLUX_PASSWORD", help=f"{prefix}1.x password ($INFLUX_PASSWORD)."
        ),
    )

    def decorate(f: F) -> F:
        for option in reversed(options):  # --help lists them in this order
            f = option(f)
        return f

    return decorate


def query_timeout(text: str | None) -> float | None:
    """--timeout DURATION (the longest wait for one query's answer); None: not given."""
    if text is None:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise AgentError(f"--timeout: {exc}") from None
    if seconds <= 0:
        raise AgentError(f"--timeout: must be more than 0, got {text!r}")
    return seconds
