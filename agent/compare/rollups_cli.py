"""`gpuagent rollups init|backfill|status`: the downsampled series compare reads at fleet scale.

InfluxDB 1.x only (retention policies and continuous queries, gpuagent.compare.rollups); for
Prometheus and VictoriaMetrics the same rollups are the recording rules in
examples/rollups/gpuagent-rollups.rules.yml.
"""

from __future__ import annotations

import json
import time

import click

from gpuagent.errors import AgentError
from gpuagent.units import parse_duration


def _connection_options(f):
    f = click.option("--timeout", default=None, metavar="DURATION",
                     help="Longest wait for one query's answer (default: the config's, else 30s); a "
                          "backfill of a large fleet may need longer, or a shorter --chunk.")(f)
    f = click.option("--password", default=None, envvar="INFLUX_PASSWORD", help="1.x password ($INFLUX_PASSWORD).")(f)
    f = click.option("--username", default=None, help="1.x user (Basic auth), with --password.")(f)
    f = click.option("--database", default=None, help="Database.")(f)
    f = click.option("--url", default=None, help="InfluxDB 1.x URL (overrides the config).")(f)
    f = click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False), default=None,
                     help="Connection from its [sinks.influxdb] (default: $GPUAGENT_CONFIG or "
                          "/etc/gpuagent/gpuagent.toml).")(f)
    return f


def _client(config_path, url, database, username, password, timeout=None):
    from gpuagent.compare.cli import _timeout
    from gpuagent.compare.query import InfluxQL, connection_from

    conn = connection_from(config_path, url, database, None, username, password)
    wait = _timeout(timeout)
    if wait is not None:
        conn.timeout = wait
    conn.retention_policy = ""  # the raw points: the database's default retention policy
    return InfluxQL(conn)


@click.group("rollups")
def rollups() -> None:
    """Rollups (1-minute and 1-hour) on InfluxDB 1.x that compare reads when they cover its range."""


@rollups.command("init")
@_connection_options
def init(config_path, url, database, username, password, timeout) -> None:
    """Create the retention policies and continuous queries (what exists is left as it is)."""
    from gpuagent.compare import rollups as r

    client = _client(config_path, url, database, username, password, timeout)
    try:
        made = r.init(client)
    finally:
        client.close()
    for what in made:
        click.echo(f"created {what}")
    click.echo(f"{client.conn.label}: {len(made)} created, nothing else changed" if made
               else f"{client.conn.label}: rollups already set up, nothing changed")


@rollups.command("backfill")
@click.option("--since", default="24h", show_default=True, metavar="DURATION",
              help="History to roll up, ending at the last whole bucket before now.")
@click.option("--chunk", default="1h", show_default=True, metavar="DURATION",
              help="Time each SELECT ... INTO covers.")
@_connection_options
def backfill(since, chunk, config_path, url, database, username, password, timeout) -> None:
    """Roll up history already stored (the continuous queries' statements over the past)."""
    from gpuagent.compare import rollups as r

    try:
        seconds, chunk_s = parse_duration(since), parse_duration(chunk)
    except ValueError as exc:
        raise AgentError(f"--since/--chunk: {exc}") from None
    if seconds <= 0 or chunk_s < 60:
        raise AgentError("--since must be more than 0 and --chunk at least 1m")
    client = _client(config_path, url, database, username, password, timeout)
    end = time.time_ns()
    try:
        written = r.backfill(client, end - int(seconds * 1e9), end, int(chunk_s), echo=click.echo)
    finally:
        client.close()
    click.echo(f"wrote {written} rollup points")


@rollups.command("status")
@click.option("--json", "as_json", is_flag=True, default=False, help="One JSON document.")
@_connection_options
def status(as_json, config_path, url, database, username, password, timeout) -> None:
    """What exists and how far each level reaches."""
    from gpuagent.compare import rollups as r

    client = _client(config_path, url, database, username, password, timeout)
    try:
        doc = r.status(client)
    finally:
        client.close()
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    for lv in doc["levels"]:
        reach = f"{lv['from']} to {lv['to']}" if lv["from"] else "no points"
        state = (f"{lv['continuous_queries']}/{lv['continuous_queries_expected']} continuous queries, {reach}"
                 if lv["exists"] else "absent (gpuagent rollups init)")
        click.echo(f"{lv['retention_policy']} ({lv['resolution_s']}s): {state}")
