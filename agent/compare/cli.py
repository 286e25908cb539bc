"""`gpuagent compare`: the fleet side by side, by GPU model, host or GPU, from InfluxDB.

Importing this module also registers `gpuagent sim fleet` (gpuagent.compare.fleet)
on the `sim` group, so the backfill lives beside the report that reads it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuagent.errors import AgentError
from gpuagent.units import parse_duration

if TYPE_CHECKING:  # the engines' modules are imported by the command that uses them
    from gpuagent.compare.promql import PromQL
    from gpuagent.compare.promql_report import PromReport
    from gpuagent.compare.query import InfluxQL
    from gpuagent.compare.report import Report
    from gpuagent.compare.work import InfluxWork, PromWork


def parse_time(text: str) -> int:
    """RFC 3339 ('2026-01-31T12:00:00Z', a date alone is midnight UTC) or epoch seconds -> ns."""
    text = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return int(Decimal(text) * 1_000_000_000)  # exact to the nanosecond, unlike a float
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise AgentError(f"not a time: {text!r} (RFC 3339 such as 2026-01-31T12:00:00Z, or epoch seconds)") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return int(stamp.timestamp()) * 1_000_000_000 + stamp.microsecond * 1000


def time_range(since: str | None, start: str | None, end: str | None):
    from gpuagent.compare.core import Range

    if since and start:
        raise click.UsageError("give --since or --start, not both")
    end_ns = parse_time(end) if end else time.time_ns()
    if start:
        start_ns = parse_time(start)
    else:
        try:
            seconds = parse_duration(since or "1h")
        except ValueError as exc:
            raise AgentError(f"--since: {exc}") from None
        start_ns = end_ns - int(seconds * 1e9)
    if start_ns >= end_ns:
        raise AgentError("the range is empty: --start must be before --end")
    # What a nanosecond timestamp (InfluxDB's, Prometheus's) can hold: 1970 to 2262.
    if start_ns < 0:
        what = f"--since {since}" if not start else f"--start {start}"
        raise AgentError(f"{what}: the range would start before 1970-01-01T00:00:00Z")
    if end_ns >= MAX_NS:
        raise AgentError(f"--end {end}: after 2262-04-11, the last time a nanosecond timestamp holds")
    return Range(start_ns, end_ns)


MAX_NS = 2**63 - 1


@click.command("compare")
@click.option(
    "--since",
    default=None,
    metavar="DURATION",
    help="Range ending now (or at --end): 1h (default), 30m, 7d.",
)
@click.option("--start", default=None, metavar="TIME", help="Range start: RFC 3339 or epoch seconds.")
@click.option("--end", default=None, metavar="TIME", help="Range end (default: now).")
@click.option(
    "--where",
    default=None,
    metavar="COND",
    help="InfluxQL condition on tags, e.g. 'host =~ /^gpu-a/'.",
)
@click.option(
    "--by",
    type=click.Choice(["model", "host", "gpu", "driver", "job", "pod", "workload", "model,workload"]),
    default="model",
    show_default=True,
    help="Group by GPU model, host or GPU; by driver version and model (from gpu_info); by Slurm job / "
    "Kubernetes pod (from gpu_job); or per unit of work (gpu_work) by workload, or by model and workload.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv", "html"]),
    default="table",
    show_default=True,
)
@click.option("-o", "--output", default=None, metavar="FILE", help="Write the report here instead of stdout.")
@click.option(
    "-c",
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Connection from its [sinks.influxdb] (default: $GPUAGENT_CONFIG or /etc/gpuagent/gpuagent.toml).",
)
@click.option("--url", default=None, help="InfluxDB URL (overrides the config).")
@click.option("--database", default=None, help="Database (1.x) or bucket / database name (2.x, 3.x).")
@click.option(
    "--token",
    default=None,
    envvar="INFLUX_TOKEN",
    help="API token, sent as 'Authorization: Token' ($INFLUX_TOKEN).",
)
@click.option("--username", default=None, help="1.x user (Basic auth), with --password.")
@click.option("--password", default=None, envvar="INFLUX_PASSWORD", help="1.x password ($INFLUX_PASSWORD).")
@click.option(
    "--promql-url",
    default=None,
    metavar="URL",
    help="Query a Prometheus-compatible server instead (Prometheus, VictoriaMetrics, vmselect, Mimir, Thanos); "
    "also [compare] promql_url in the config.",
)
@click.option(
    "--timeout",
    default=None,
    metavar="DURATION",
    help="Longest wait for one query's answer (default: the config's, else 30s for InfluxDB, 60s for PromQL).",
)
@click.option(
    "--raw",
    "raw",
    is_flag=True,
    default=False,
    help="Read raw points even where rollups (gpuagent rollups) cover the range.",
)
def compare(
    since,
    start,
    end,
    where,
    by,
    fmt,
    output,
    config_path,
    url,
    database,
    token,
    username,
    password,
    promql_url=None,
    timeout=None,
    raw=False,
) -> None:
    """Compare the fleet's GPUs side by side from the agent's measurements in InfluxDB.

    Power, energy and energy per busy GPU-hour, SM clock against its max,
    throttle reasons, utilisation, DRAM bandwidth against its peak, memory,
    L2, P2P, MIG and vGPU per group; aggregated by the database (InfluxQL).
    Per unit of work (gpu_work; --by workload, --by model,workload): units per
    GPU-hour, Wh and cost per unit ([compare.prices]) and what limits the work.
    """
    from gpuagent.compare.query import InfluxQL, connection_from
    from gpuagent.compare.render import RENDERERS
    from gpuagent.compare.report import Report, check_where

    rng = time_range(since, start, end)
    wait = _timeout(timeout)
    from gpuagent.compare.promql import promql_url_from

    promql_url = promql_url_from(config_path, promql_url, url)
    from gpuagent.compare import where as where_rule

    client: InfluxQL | PromQL
    report: Report | PromReport | None

    # One condition, refused before anything is sent (a ';' would run a statement of its own).
    where = where_rule.promql(where) if promql_url else where_rule.influxql(where)
    from gpuagent.compare.query import reading

    # A hostile server's answer (wrong types, rows of the wrong length): one line, no traceback.
    with reading(promql_url or url or "the InfluxDB of the config"):
        if by in ("workload", "model,workload"):  # per unit of work (gpuagent.compare.work)
            _compare_work(
                config_path,
                promql_url,
                wait,
                rng,
                by,
                where,
                fmt,
                output,
                url,
                database,
                token,
                username,
                password,
                raw,
            )
            return
        if promql_url:  # the same report over the Prometheus query API (gpuagent.compare.promql_report)
            if by in ("job", "pod", "driver"):
                source = "gpu_info records" if by == "driver" else "gpu_job points"
                raise AgentError(
                    f"--by {by} reads the {source} through InfluxQL; use --url (InfluxDB), not --promql-url"
                )
            from gpuagent.compare.promql import PromQL, prom_connection_from
            from gpuagent.compare.promql_report import PromReport

            prom = prom_connection_from(config_path, promql_url)
            client = PromQL(prom if wait is None else dataclasses.replace(prom, timeout=wait))
            report = PromReport(client, rng, by=by, where=where)
            if not raw:  # the recording rules' series where they cover the range (gpuagent.compare.promql_rollups)
                from gpuagent.compare.promql_rollups import prom_rollup_report_or_none

                report = prom_rollup_report_or_none(client, rng, by, where) or report
        else:
            conn = connection_from(config_path, url, database, token, username, password)
            client = InfluxQL(conn if wait is None else dataclasses.replace(conn, timeout=wait))
            check_where(client, where)
            if by in ("job", "pod"):
                _compare_jobs(client, rng, by, where, fmt, output, config_path)
                return
            report = Report(client, rng, by=by, where=where) if by != "driver" else None
            if report is not None and not raw:  # rollups where they cover the range (gpuagent.compare.rollup_report)
                from gpuagent.compare.rollup_report import rollup_report_or_none

                report = rollup_report_or_none(client, rng, by, where) or report
        from gpuagent.compare.prices import prices_from

        if report is not None:
            report.prices = prices_from(config_path)
        from gpuagent.compare.progress import Activity

        try:
            # A long report (a large fleet on InfluxDB 1.x: minutes) shows it is at work, on a terminal.
            with Activity("compare", lambda: client.requests, "queries answered"):
                if report is None:  # per driver version (gpuagent.compare.drivers)
                    from gpuagent.compare.drivers import build_by_driver

                    doc = build_by_driver(client, rng, where)
                else:
                    doc = report.build()
        finally:
            client.close()
        _emit(
            RENDERERS[fmt](doc), output, f"{len(doc['groups'])} group(s), {sum(g['gpus'] for g in doc['groups'])} GPUs"
        )


def _timeout(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise AgentError(f"--timeout: {exc}") from None
    if seconds <= 0:
        raise AgentError(f"--timeout: must be more than 0, got {text!r}")
    return seconds


def _compare_work(
    config_path, promql_url, wait, rng, by, where, fmt, output, url, database, token, username, password, raw=False
) -> None:
    """`--by workload` / `--by model,workload`: units, energy and cost per unit, what limits the work."""
    from gpuagent.compare.prices import prices_from
    from gpuagent.compare.work import InfluxWork, PromWork, build_work
    from gpuagent.compare.work_render import render_work

    prices = prices_from(config_path)
    # --where filters the GPUs' own readings too (a host, a database label), unless it names a tag that
    # only work points carry.
    gpu_where = not re.search(r"\b(workload|unit|work_id|source|slurm_job_id|k8s_pod_uid)\b", where or "")
    client: InfluxQL | PromQL
    source: InfluxWork | PromWork
    if promql_url:
        from gpuagent.compare.promql import PromQL, prom_connection_from

        prom = prom_connection_from(config_path, promql_url)
        client = PromQL(prom if wait is None else dataclasses.replace(prom, timeout=wait))
        source = PromWork(client, rng, where, gpu_where)
    else:
        from gpuagent.compare.query import InfluxQL, connection_from

        conn = connection_from(config_path, url, database, token, username, password)
        client = InfluxQL(conn if wait is None else dataclasses.replace(conn, timeout=wait))
        source = InfluxWork(client, rng, where, gpu_where)
        if not raw:  # limits and energies from rollups where they cover the range (gpuagent.compare.rollup_work)
            from gpuagent.compare.rollup_report import rollup_report_or_none
            from gpuagent.compare.rollup_work import RollupWork

            report = rollup_report_or_none(client, rng, "gpu", where if gpu_where else None)
            if report is not None:
                source = RollupWork(report, rng, where, gpu_where)
    from gpuagent.compare.progress import Activity

    try:
        with Activity("compare", lambda: client.requests, "queries answered"):
            doc = build_work(source, rng, by, prices, where)
    finally:
        client.close()
    _emit(render_work(doc, fmt), output, f"{len(doc['groups'])} group(s)")


def _emit(text: str, output, what: str) -> None:
    if output and output != "-":
        try:
            Path(output).write_text(text)
        except OSError as exc:
            raise AgentError(f"cannot write {output!r}: {exc.strerror or exc}") from None
        click.echo(f"wrote {output} ({what})", err=True)
    else:
        sys.stdout.write(text)


def _compare_jobs(client, rng, by: str, where, fmt: str, output, config_path=None) -> None:
    """`--by job` / `--by pod`: per Slurm job or pod, from gpu_job (gpuagent.compare.jobs)."""
    from gpuagent.compare.jobs import JobReport, render
    from gpuagent.compare.prices import prices_from

    report = JobReport(client, rng, by=by, where=where)
    report.prices = prices_from(config_path)
    try:
        doc = report.build()
    finally:
        client.close()
    _emit(render(doc, fmt), output, f"{len(doc['groups'])} {by}(s)")
