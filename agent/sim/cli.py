"""``gpuagent sim``: list the built-in profiles, import captures, record a real GPU."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gpuagent.commands.lazycli import LazyGroup
from gpuagent.errors import AgentError


def _write(profile: dict, output: str) -> None:
    text = json.dumps(profile, indent=2) + "\n"
    if output == "-":
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text)
    except OSError as exc:
        raise AgentError(f"cannot write {output!r}: {exc.strerror or exc}") from None
    click.echo(f"wrote {output} ({profile['product_name']}); use it with --simulate {output}", err=True)


@click.group("sim", cls=LazyGroup, lazy={"fleet": "gpuagent.sim.fleet_cli:fleet"})
def sim_group() -> None:
    """The simulated GPU fleet: built-in profiles, capture import, recording."""


@sim_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def list_profiles(as_json: bool) -> None:
    """List the built-in simulator profiles."""
    from gpuagent.sim.load import SCENARIOS
    from gpuagent.sim.profile import BUILTIN_NAMES, load_profile, peak_dram_gbps

    rows = []
    for name in BUILTIN_NAMES:
        p = load_profile(name)
        mig = p.get("mig") or {}
        rows.append(
            {
                "name": name,
                "product_name": p["product_name"],
                "architecture": p["architecture"],
                "memory_gib": round(p["memory"]["total_mib"] / 1024, 1),
                "peak_dram_gbps": round(peak_dram_gbps(p) or 0),
                "l2_mib": (p.get("l2_cache_bytes") or 0) >> 20,
                "power_limit_w": p["power_w"]["limit"],
                "nvlink_links": (p.get("nvlink") or {}).get("links", 0),
                "mig": "on" if mig.get("enabled") else ("capable" if mig else "no"),
                "virtualization": p["virtualization"]["mode"],
            }
        )
    if as_json:
        click.echo(json.dumps({"profiles": rows, "scenarios": list(SCENARIOS)}, indent=2))
        return
    header = f"{'NAME':<15} {'PRODUCT':<26} {'ARCH':<13} {'MEM':>7} {'DRAM':>9} {'L2':>6} {'POWER':>6} {'NVL':>4} {'MIG':<8} VIRT"
    click.echo(header)
    for r in rows:
        click.echo(
            f"{r['name']:<15} {r['product_name']:<26} {r['architecture']:<13} {r['memory_gib']:>5}Gi "
            f"{r['peak_dram_gbps']:>5}GB/s {r['l2_mib']:>4}MB {r['power_limit_w']:>5.0f}W {r['nvlink_links']:>4} "
            f"{r['mig']:<8} {r['virtualization']}"
        )
    click.echo(f"\nSPEC: NAME[:COUNT][@FAULT...],...  scenarios: {', '.join(SCENARIOS)}  (see docs/simulator.md)")


@sim_group.command("import")
@click.argument("capture", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", required=True, metavar="FILE", help="Profile JSON to write ('-' for stdout).")
@click.option(
    "--json", "as_json", is_flag=True, help="The report of what was read (and not) as JSON on stdout, not as text."
)
def import_cmd(capture: str, output: str, as_json: bool) -> None:
    """Build a profile from an `nvidia-smi -q` (text) or `nvidia-smi -q -x` (XML) capture, and
    say per fact class what the capture states and what it does not (stderr; --json: stdout)."""
    from gpuagent.sim.capture_import import import_capture_facts
    from gpuagent.sim.import_report import lines, report

    if as_json and output == "-":
        raise click.UsageError("--json prints the report on stdout: write the profile to a file (-o FILE)")
    profile, facts = import_capture_facts(capture)
    _write(profile, output)
    rows = report(facts, profile)
    if as_json:
        click.echo(json.dumps({"classes": rows, "not_in_capture": profile["not_in_capture"]}, indent=2))
    else:
        for line in lines(rows, profile["not_in_capture"]):
            click.echo(line, err=True)


@sim_group.command("record")
@click.option("-o", "--output", required=True, metavar="FILE", help="Profile JSON to write ('-' for stdout).")
@click.option(
    "--gpu",
    "index",
    type=int,
    default=0,
    show_default=True,
    help="NVML index of the GPU to record.",
)
def record_cmd(output: str, index: int) -> None:
    """Read a real GPU's static facts through NVML into a profile."""
    from gpuagent.sim.record import record

    _write(record(index), output)
