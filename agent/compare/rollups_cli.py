"""`gpuagent rollups init|backfill|status`: the downsampled series compare reads at fleet scale.

On InfluxDB 1.x, retention policies and continuous queries (gpuagent.compare.rollups). For
Prometheus and VictoriaMetrics the same rollups are the recording rules of deploy/rollups/, loaded
into vmalert or Prometheus; with `--promql-url`, `backfill` replays them over history with vmalert
(VictoriaMetrics) and `status` says how far they reach (gpuagent.compare.promql_rollups).
"""

from __future__ import annotations

import dataclasses
import json
import time

import click

from gpuagent.commands.cli_options import influx_options, query_timeout
from gpuagent.compare import promql_rollups
from gpuagent.compare import rollups as r
from gpuagent.compare.promql import PromQL, prom_connection_from
from gpuagent.compare.query import InfluxQL, connection_from
from gpuagent.errors import AgentError
from gpuagent.units import parse_duration


def _connection_options(f):
    f = click.option(
        "--timeout",
        default=None,
        metavar="DURATION",
        help="Longest wait for one query's answer (default: the config's, else 30s); a "
        "backfill of a large fleet may need longer, or a shorter --chunk.",
    )(f)
    f = click.option(
        "--promql-url",
        default=None,
        metavar="URL",
        help="VictoriaMetrics (Prometheus query API) whose recording rules to backfill or "
        "report on, instead of InfluxDB.",
    )(f)
    return influx_options()(f)


def _prom_client(config_path, promql_url, timeout=None):
    conn = prom_connection_from(config_path, promql_url)
    wait = query_timeout(timeout)
    return PromQL(conn if wait is None else dataclasses.replace(conn, timeout=wait))


def _client(config_path, url, database, token, username, password, timeout=None):
    conn = connection_from(config_path, url, database, token, username, password)
    wait = query_timeout(timeout)
    if wait is not None:
        conn.timeout = wait
    conn.retention_policy = ""  # the raw points: the database's default retention policy
    return InfluxQL(conn)


@click.group("rollups")
def rollups() -> None:
    """Rollups (1-minute and 1-hour) that compare reads where they cover its range: on InfluxDB 1.x,
    or as recording rules on VictoriaMetrics or Prometheus (--promql-url)."""


@rollups.command("init")
@_connection_options
def init(config_path, url, database, token, username, password, timeout, promql_url) -> None:
    """Create the retention policies and continuous queries (what exists is left as it is)."""
    if promql_url:
        raise AgentError(
            "over PromQL there is nothing to create: load deploy/rollups/gpuagent-rollups-influx.rules.yml "
            "(line protocol) or -prometheus.rules.yml (/metrics) into vmalert or Prometheus, then "
            "gpuagent rollups backfill --promql-url URL (docs/compare.md)"
        )
    client = _client(config_path, url, database, token, username, password, timeout)
    try:
        made = r.init(client)
    finally:
        client.close()
    summary = _made_summary(made)
    if summary:
        click.echo(f"created {summary}")
    click.echo(
        f"{client.conn.label}: {len(made)} created, nothing else changed"
        if made
        else f"{client.conn.label}: rollups already set up, nothing changed"
    )


def _made_summary(made: list[str]) -> str:
    """One line for what init created (not one per continuous query: 262 of them on a new database)."""
    policies = [m.removeprefix("retention policy ") for m in made if m.startswith("retention policy ")]
    queries = [m for m in made if m.startswith("continuous query ")]
    parts = []
    if policies:
        parts.append(f"retention polic{'y' if len(policies) == 1 else 'ies'} {', '.join(policies)}")
    if queries:
        parts.append(f"{len(queries)} continuous quer{'y' if len(queries) == 1 else 'ies'}")
    return " and ".join(parts)


@rollups.command("backfill")
@click.option(
    "--since",
    default="24h",
    show_default=True,
    metavar="DURATION",
    help="History to roll up, ending at the last whole bucket before now.",
)
@click.option("--chunk", default="1h", show_default=True, metavar="DURATION", help="Time each SELECT ... INTO covers.")
@click.option(
    "--write-url",
    default=None,
    metavar="URL",
    help="With --promql-url: where vmalert writes the rollups (default: the --promql-url; a "
    "cluster's vminsert, http://HOST:8480/insert/0/prometheus).",
)
@click.option(
    "--vmalert",
    default="vmalert",
    show_default=True,
    metavar="PATH",
    help="With --promql-url: the vmalert binary that replays the rules.",
)
@_connection_options
def backfill(
    since, chunk, write_url, vmalert, config_path, url, database, token, username, password, timeout, promql_url
) -> None:
    """Roll up history already stored (the continuous queries' statements over the past; over PromQL,
    the recording rules replayed by vmalert for the buckets not recorded yet)."""
    try:
        seconds, chunk_s = parse_duration(since), parse_duration(chunk)
    except ValueError as exc:
        raise AgentError(f"--since/--chunk: {exc}") from None
    if seconds <= 0 or chunk_s < 60:
        raise AgentError("--since must be more than 0 and --chunk at least 1m")
    end = time.time_ns()
    if promql_url:
        prom = _prom_client(config_path, promql_url, timeout)
        stamps = promql_rollups.backfill(
            prom, end - int(seconds * 1e9), end, write_url, vmalert, prom.conn.scheme, echo=click.echo
        )
        click.echo(f"replayed {stamps} bucket(s) of the recording rules")
        return
    client = _client(config_path, url, database, token, username, password, timeout)
    try:
        written = r.backfill(client, end - int(seconds * 1e9), end, int(chunk_s), echo=click.echo)
    finally:
        client.close()
    click.echo(f"wrote {written} rollup points")


@rollups.command("status")
@click.option("--json", "as_json", is_flag=True, default=False, help="One JSON document.")
@click.option(
    "--since",
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="With --promql-url: how far back to look for recorded buckets.",
)
@_connection_options
def status(as_json, since, config_path, url, database, token, username, password, timeout, promql_url) -> None:
    """What exists and how far each level reaches."""
    if promql_url:
        try:
            seconds = parse_duration(since)
        except ValueError as exc:
            raise AgentError(f"--since: {exc}") from None
        if seconds <= 0:
            raise AgentError("--since must be more than 0")
        doc = promql_rollups.status(_prom_client(config_path, promql_url, timeout), int(seconds * 1e9), time.time_ns())
        if as_json:
            click.echo(json.dumps(doc, indent=2))
            return
        for lv in doc["levels"]:
            reach = f"{lv['from']} to {lv['to']}" if lv["from"] else "no points (gpuagent rollups backfill)"
            click.echo(f"{lv['record']} ({lv['resolution_s']}s): {lv['series']} series, {reach}")
        return
    client = _client(config_path, url, database, token, username, password, timeout)
    try:
        doc = r.status(client)
    finally:
        client.close()
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    for lv in doc["levels"]:
        reach = f"{lv['from']} to {lv['to']}" if lv["from"] else "no points"
        state = (
            f"{lv['continuous_queries']}/{lv['continuous_queries_expected']} continuous queries, {reach}"
            if lv["exists"]
            else "absent (gpuagent rollups init)"
        )
        click.echo(f"{lv['retention_policy']} ({lv['resolution_s']}s): {state}")
