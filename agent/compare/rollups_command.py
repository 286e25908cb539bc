"""What `gpuagent rollups init|backfill|status` do with their options (gpuagent.compare.rollups_cli):
over InfluxDB 1.x, gpuagent.compare.rollups; over PromQL, gpuagent.compare.promql_rollups."""

from __future__ import annotations

import dataclasses
import json
import time

import click

from gpuagent.commands.cli_options import query_timeout
from gpuagent.compare import promql_rollups
from gpuagent.compare import rollups as r
from gpuagent.compare.promql import PromQL, prom_connection_from
from gpuagent.compare.query import InfluxQL, connection_from
from gpuagent.errors import AgentError
from gpuagent.units import parse_duration


def prom_client(config_path, promql_url, timeout=None):
    conn = prom_connection_from(config_path, promql_url)
    wait = query_timeout(timeout)
    return PromQL(conn if wait is None else dataclasses.replace(conn, timeout=wait))


def influx_client(config_path, url, database, token, username, password, timeout=None):
    conn = connection_from(config_path, url, database, token, username, password)
    wait = query_timeout(timeout)
    if wait is not None:
        conn.timeout = wait
    conn.retention_policy = ""  # the raw points: the database's default retention policy
    return InfluxQL(conn)


def init(config_path, url, database, token, username, password, timeout, promql_url) -> None:
    """`gpuagent rollups init` (gpuagent.compare.rollups_cli names its options)."""
    if promql_url:
        raise AgentError(
            "over PromQL there is nothing to create: load deploy/rollups/gpuagent-rollups-influx.rules.yml "
            "(line protocol) or -prometheus.rules.yml (/metrics) into vmalert or Prometheus, then "
            "gpuagent rollups backfill --promql-url URL (docs/compare.md)"
        )
    client = influx_client(config_path, url, database, token, username, password, timeout)
    try:
        made = r.init(client)
    finally:
        client.close()
    summary = made_summary(made)
    if summary:
        click.echo(f"created {summary}")
    click.echo(
        f"{client.conn.label}: {len(made)} created, nothing else changed"
        if made
        else f"{client.conn.label}: rollups already set up, nothing changed"
    )


def backfill(
    since, chunk, write_url, vmalert, config_path, url, database, token, username, password, timeout, promql_url
) -> None:
    """`gpuagent rollups backfill` (gpuagent.compare.rollups_cli names its options)."""
    try:
        seconds, chunk_s = parse_duration(since), parse_duration(chunk)
    except ValueError as exc:
        raise AgentError(f"--since/--chunk: {exc}") from None
    if seconds <= 0 or chunk_s < 60:
        raise AgentError("--since must be more than 0 and --chunk at least 1m")
    end = time.time_ns()
    if promql_url:
        prom = prom_client(config_path, promql_url, timeout)
        stamps = promql_rollups.backfill(
            prom, end - int(seconds * 1e9), end, write_url, vmalert, prom.conn.scheme, echo=click.echo
        )
        click.echo(f"replayed {stamps} bucket(s) of the recording rules")
        return
    client = influx_client(config_path, url, database, token, username, password, timeout)
    try:
        written = r.backfill(client, end - int(seconds * 1e9), end, int(chunk_s), echo=click.echo)
    finally:
        client.close()
    click.echo(f"wrote {written} rollup points")


def status(as_json, since, config_path, url, database, token, username, password, timeout, promql_url) -> None:
    """`gpuagent rollups status` (gpuagent.compare.rollups_cli names its options)."""
    if promql_url:
        try:
            seconds = parse_duration(since)
        except ValueError as exc:
            raise AgentError(f"--since: {exc}") from None
        if seconds <= 0:
            raise AgentError("--since must be more than 0")
        doc = promql_rollups.status(prom_client(config_path, promql_url, timeout), int(seconds * 1e9), time.time_ns())
        if as_json:
            click.echo(json.dumps(doc, indent=2))
            return
        for lv in doc["levels"]:
            reach = f"{lv['from']} to {lv['to']}" if lv["from"] else "no points (gpuagent rollups backfill)"
            click.echo(f"{lv['record']} ({lv['resolution_s']}s): {lv['series']} series, {reach}")
        return
    client = influx_client(config_path, url, database, token, username, password, timeout)
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


def made_summary(made: list[str]) -> str:
    """One line for what init created (not one per continuous query: 262 of them on a new database)."""
    policies = [m.removeprefix("retention policy ") for m in made if m.startswith("retention policy ")]
    queries = [m for m in made if m.startswith("continuous query ")]
    parts = []
    if policies:
        parts.append(f"retention polic{'y' if len(policies) == 1 else 'ies'} {', '.join(policies)}")
    if queries:
        parts.append(f"{len(queries)} continuous quer{'y' if len(queries) == 1 else 'ies'}")
    return " and ".join(parts)
