"""Shared by the dashboard tests: the committed dashboards, Grafana's macro substitution, and a
real InfluxDB 1.x holding what the dashboards read (a simulated fleet, a real agent's own
`gpuagent` measurement, real `gpuagent.probe --send` points).

The fleet's machines: sim-00 has every feature the node dashboard shows (vGPU on L40S,
NVLink and an XID on H100 SXM, MIG on H100 SXM), sim-01 an RTX 4090 pair (no P2P, no
GPM), sim-02 an A100 pair (Ampere: no GPM, memory busy time only).
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "config" / "grafana"
FLEET_SPECS = ("l40s-vgpu:2,h100-sxm:2@xid=1:79:5m,h100-sxm-mig:2", "rtx4090:2", "a100-sxm4:2")
NODE_HOST = "sim-00"
AGENT_HOST = "agent-00"
VARIABLES = ("model", "host", "gpu")


def load_generator():
    name = "gpuagent_grafana_generate"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, GRAFANA / "generate.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def dashboards(lang: str) -> dict[str, dict]:
    """slug -> the committed dashboard JSON of one query language."""
    return {
        p.stem.removeprefix("gpuagent-"): json.loads(p.read_text()) for p in sorted((GRAFANA / lang).glob("*.json"))
    }


def targets(dashboard: dict) -> list[tuple[str, dict]]:
    """(panel title, target) of every panel, rows' nested panels included."""
    out = []
    for panel in dashboard["panels"]:
        for p in [panel, *panel.get("panels", [])]:
            out.extend((p["title"], t) for t in p.get("targets", []))
    return out


def influx_substitute(query: str, values: dict[str, str], interval: str, since: str = "40m") -> str:
    """What Grafana's InfluxDB data source sends: macros and template variables replaced.

    A variable's value is already a regex (Grafana escapes a multi-value or All selection and
    joins it with |; All is `.*`, the allValue every variable here sets).
    """
    q = query.replace("$timeFilter", f"time >= now() - {since} AND time <= now() + 5m")
    q = q.replace("$__interval", interval)
    for name, value in values.items():
        q = q.replace(f"/^${name}$/", f"/^{value}$/")
    assert "$" not in re.sub(r"/\^[^/]*\$/", "", q), f"unsubstituted macro in {q}"
    return q


def has_data(series: list[dict]) -> bool:
    """At least one row with a non-null value outside the time column."""
    for s in series:
        cols = s["columns"]
        for row in s.get("values", []):
            if any(v is not None for c, v in zip(cols, row, strict=True) if c != "time"):
                return True
    return False


def agent_config(path: Path, server_url: str, database: str, state: Path, hostname: str) -> Path:
    path.write_text(
        f"""[agent]
interval = "1s"
hostname = "{hostname}"
state_dir = "{state}"

[collectors.pcie]
interval = "1s"

[sinks.influxdb]
url = "{server_url}"
api = "v1"
database = "{database}"
flush_interval = "1s"
flush_jitter = 0
"""
    )
    return path


# {pid}: a real process with a Slurm job's environment, shown on GPU 2 (@proc), for the job panels.
PROM_SPEC = "l40s-vgpu:2,h100-sxm:2@xid=1:79:4s@proc=0:{pid}:512,h100-sxm-mig:2,rtx4090:2@lost=1:4s"
SLURM_ENV = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_USER": "alice",
    "SLURM_JOB_ACCOUNT": "ml",
    "SLURM_JOB_PARTITION": "gpu",
}
# Grafana's interval macros for a 1 s scrape: $__rate_interval = max($__interval + scrape, 4 × scrape).
PROM_MACROS = {"$__rate_interval": "5s", "$__interval": "2s", "$__range": "1m"}


def prom_substitute(expr: str, values: dict[str, str]) -> str:
    """What Grafana's Prometheus data source sends: interval macros and variables replaced."""
    for macro, value in PROM_MACROS.items():
        expr = expr.replace(macro, value)
    for name, value in values.items():
        expr = expr.replace(f'=~"${name}"', f'=~"{value}"')
    for name, value in load_generator().TEXTBOX_DEFAULTS.items():  # the price variables, as left
        expr = expr.replace(f"${name}", value)
    assert "$" not in expr.replace('"$1"', ""), f"unsubstituted macro in {expr}"
    return expr


def prom_has_data(result: list[dict]) -> bool:
    """A vector or matrix result with at least one finite sample."""
    for r in result:
        samples = r.get("values") or ([r["value"]] if "value" in r else [])
        if any(v not in ("NaN", "+Inf", "-Inf") for _, v in samples):
            return True
    return False
