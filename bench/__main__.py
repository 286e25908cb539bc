"""Run every benchmark; print a table, or one JSON document with --json."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback

ROWS = (
    "cycle",
    "gpustat",
    "steady",
    "serialise",
    "replay",
    "writeahead",
    "probe",
    "nvidia_smi",
    "compare_scale",
    "compare_work",
    "compare_rollups",
    "compare_rollups_vm",
    "top",
)
MODULES = {
    "nvidia_smi": "nvml_cost",
    "compare_work": "compare_scale",
    "compare_rollups": "compare_scale",
    "compare_rollups_vm": "compare_scale",
}  # row name -> module, where they differ
FUNCTIONS = {
    "compare_work": "run_work",
    "compare_rollups": "run_rollups",
    "compare_rollups_vm": "run_rollups_vm",
}  # row name -> function, where not run()


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def _holds(row: dict) -> str:
    """The table's verdict; a figure measured below its goal's size says the size it ran at."""
    if row.get("holds", False) is None:
        at = row.get("measured_at")
        return f"n/a at {at['hosts']:,} hosts (goal at {at['goal_hosts']:,})" if at else "n/a"
    return "yes" if row.get("holds") else "NO"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="shorter runs (CI)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--only", action="append", choices=ROWS, help="run only these rows")
    args = parser.parse_args(argv)
    results = []
    for name in args.only or ROWS:
        try:
            mod = importlib.import_module(f"bench.{MODULES.get(name, name)}")
        except ModuleNotFoundError as exc:
            if exc.name != f"bench.{MODULES.get(name, name)}":
                raise
            continue
        print(f"bench: {name} …", file=sys.stderr, flush=True)
        try:
            results.append(getattr(mod, FUNCTIONS.get(name, "run"))(quick=args.quick))
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            results.append({"name": name, "error": f"{type(exc).__name__}: {exc}", "holds": False})
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "quick": args.quick,
        "machine": machine(),
        "results": results,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"gpuagent bench ({'quick' if args.quick else 'full'}) — {doc['machine']['cpu']}")
        for col in ("bench", "figure", "goal", "holds", "detail"):
            table.add_column(col, overflow="fold")
        for r in results:
            figure = r.get("error") or f"{r['figure']} {r.get('unit', '')}"
            detail = ", ".join(f"{k}={v}" for k, v in (r.get("detail") or {}).items())
            table.add_row(
                r["name"],
                figure,
                r.get("goal", ""),
                _holds(r),
                detail,
            )
        Console(width=140).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
