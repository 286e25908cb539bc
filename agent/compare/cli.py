"""`gpuagent compare`: the fleet side by side, by GPU model, host or GPU, from InfluxDB or a
Prometheus-compatible server (PromQL: Prometheus, VictoriaMetrics). The options only: what they
do is gpuagent.compare.command's, imported when the command runs (`gpuagent --help` lists this
command without importing the engines)."""

from __future__ import annotations

import click

from gpuagent.commands.cli_options import influx_options


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
    help="InfluxQL condition on tags, e.g. 'host =~ /^gpu-a/'; with --promql-url, PromQL label matchers, "
    "e.g. 'host=~\"gpu-a.*\"'.",
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
@influx_options()
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
def compare(**options) -> None:
    """Compare the fleet's GPUs side by side: InfluxDB, VictoriaMetrics or Prometheus (PromQL).

    Power, energy and energy per busy GPU-hour, SM clock against its max,
    throttle reasons, utilisation, DRAM bandwidth against its peak, memory,
    L2, P2P, MIG and vGPU per group; aggregated by the database (InfluxQL, or
    PromQL with --promql-url), from rollups or recording rules where they cover the range.
    Per unit of work (gpu_work; --by workload, --by model,workload): units per
    GPU-hour, Wh and cost per unit ([compare.prices]) and what limits the work.
    """
    from gpuagent.compare.command import run  # the command boundary: the engines load here

    run(**options)
