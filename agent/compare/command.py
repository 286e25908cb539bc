"""What `gpuagent compare` does with its options (gpuagent.compare.cli): the range, the engine and
report shape they choose, the document built, rendered and written."""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from pathlib import Path

import click

from gpuagent.commands.cli_options import query_timeout
from gpuagent.compare import html_report, render
from gpuagent.compare import where as where_rule
from gpuagent.compare.core import Range, parse_time
from gpuagent.compare.drivers import build_by_driver
from gpuagent.compare.jobs import JobReport
from gpuagent.compare.jobs_render import render as render_jobs
from gpuagent.compare.prices import prices_from
from gpuagent.compare.progress import Activity
from gpuagent.compare.promql import PromQL, prom_connection_from, promql_url_from
from gpuagent.compare.promql_report import PromReport
from gpuagent.compare.promql_rollups import prom_rollup_report_or_none
from gpuagent.compare.query import InfluxQL, connection_from, reading
from gpuagent.compare.report import Report, check_where
from gpuagent.compare.rollup_report import rollup_report_or_none
from gpuagent.compare.rollup_work import RollupWork
from gpuagent.compare.work import InfluxWork, PromWork, build_work
from gpuagent.compare.work_render import render_work
from gpuagent.errors import AgentError
from gpuagent.units import parse_duration

# --format -> the renderer of a compare document.
RENDERERS = {
    "table": render.render_table,
    "json": render.render_json,
    "csv": render.render_csv,
    "html": html_report.render_html,
}


def time_range(since: str | None, start: str | None, end: str | None) -> Range:
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


def run(
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
    """`gpuagent compare` with these options (gpuagent.compare.cli names them)."""
    rng = time_range(since, start, end)
    wait = query_timeout(timeout)
    promql_url = promql_url_from(config_path, promql_url, url)

    client: InfluxQL | PromQL
    report: Report | PromReport | None

    # One condition, refused before anything is sent (a ';' would run a statement of its own).
    where = where_rule.promql(where) if promql_url else where_rule.influxql(where)
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
            prom = prom_connection_from(config_path, promql_url)
            client = PromQL(prom if wait is None else dataclasses.replace(prom, timeout=wait))
            report = PromReport(client, rng, by=by, where=where)
            if not raw:  # the recording rules' series where they cover the range (gpuagent.compare.promql_rollups)
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
                report = rollup_report_or_none(client, rng, by, where) or report
        if report is not None:
            report.prices = prices_from(config_path)
        try:
            # A long report (a large fleet on InfluxDB 1.x: minutes) shows it is at work, on a terminal.
            with Activity("compare", lambda: client.requests, "queries answered"):
                if report is None:  # per driver version (gpuagent.compare.drivers)
                    doc = build_by_driver(client, rng, where)
                else:
                    doc = report.build()
        finally:
            client.close()
        _emit(
            RENDERERS[fmt](doc), output, f"{len(doc['groups'])} group(s), {sum(g['gpus'] for g in doc['groups'])} GPUs"
        )


def _compare_work(
    config_path, promql_url, wait, rng, by, where, fmt, output, url, database, token, username, password, raw=False
) -> None:
    """`--by workload` / `--by model,workload`: units, energy and cost per unit, what limits the work."""
    prices = prices_from(config_path)
    # --where filters the GPUs' own readings too (a host, a database label), unless it names a tag that
    # only work points carry.
    gpu_where = not re.search(r"\b(workload|unit|work_id|source|slurm_job_id|k8s_pod_uid)\b", where or "")
    client: InfluxQL | PromQL
    source: InfluxWork | PromWork
    if promql_url:
        prom = prom_connection_from(config_path, promql_url)
        client = PromQL(prom if wait is None else dataclasses.replace(prom, timeout=wait))
        source = PromWork(client, rng, where, gpu_where)
    else:
        conn = connection_from(config_path, url, database, token, username, password)
        client = InfluxQL(conn if wait is None else dataclasses.replace(conn, timeout=wait))
        source = InfluxWork(client, rng, where, gpu_where)
        if not raw:  # limits and energies from rollups where they cover the range (gpuagent.compare.rollup_work)
            report = rollup_report_or_none(client, rng, "gpu", where if gpu_where else None)
            if report is not None:
                source = RollupWork(report, rng, where, gpu_where)
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
    report = JobReport(client, rng, by=by, where=where)
    report.prices = prices_from(config_path)
    try:
        doc = report.build()
    finally:
        client.close()
    _emit(render_jobs(doc, fmt), output, f"{len(doc['groups'])} {by}(s)")
