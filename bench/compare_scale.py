"""compare at fleet scale: client CPU and wall time of `gpuagent compare` at 10, 100 and 1,000 hosts.

Each size is a fresh simulated fleet (`sim fleet`: hosts of 8 GPUs, half
`h100-sxm:8`, half `l40s:8`, 1 h at 10 s; 4 hosts per spec simulated in full,
the rest replayed under their own names and UUIDs, see
gpuagent.compare.fleet_replay), written into a local InfluxDB 1.6 and a
local VictoriaMetrics (both from Debian's packages, started here). Then
`compare --since 1h --by model --format json` runs in this process against
each: InfluxQL on influxd, PromQL on VictoriaMetrics. The client's CPU
(process time) and wall time are measured; the build rate (points/s) too.
Goal: 1,000 hosts × 8 GPUs × 1 h answers within 10 s, and the client's CPU
does not grow with the fleet (the server aggregates; no raw points move).

With work (`run_work`, `python -m bench.compare_scale --work [--vm-only] [HOSTS ...]`; the row
`compare_work` of `python -m bench`): the fleet is built with `--scenario inference`, so every GPU
also writes `gpu_work` points (gpuagent.sim.work: three workloads, one over two GPUs), and
`compare --by model,workload` (units, energy and cost per unit, what limits it) is timed beside
`compare --by model` (whose groups now carry the same work figures). Goal: at most 10 s at 1,000
hosts on VictoriaMetrics.

From rollups (`run_rollups`, `python -m bench.compare_scale --rollups [HOSTS ...]`): the same fleet on
InfluxDB 1.6 only, then `gpuagent rollups init` and `backfill` (timed), then `compare --by model`
from rollups and with `--raw`. Goal: at most 10 s at 1,000 hosts.

From the recording rules (`run_rollups_vm`, `python -m bench.compare_scale --rollups --vm-only [HOSTS ...]`):
the same fleet on VictoriaMetrics only, `gpuagent rollups backfill --promql-url` (vmalert's replay,
timed), then `compare --by model --promql-url` from the rules' series and with `--raw`; the two
documents are checked equal (figures to 1e-9). Goal: at most 10 s at 1,000 hosts.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 10.0
SPECS = ("h100-sxm:8", "l40s:8")
STEP_S = 10
DURATION_S = 3600


def _servers():
    from bench.replay import _servers as load

    return load()


def _cli(*args):
    from click.testing import CliRunner

    from gpuagent.cli import build_cli

    return CliRunner().invoke(build_cli(), list(args), catch_exceptions=False)


def _build(url: str, db: str, hosts: int, end_s: int, jobs: int, scenario: str | None = None) -> tuple[int, float]:
    args = ["sim", "fleet", "--url", url, "--database", db, "--hosts", str(hosts), "--duration", f"{DURATION_S}s",
            "--step", f"{STEP_S}s", "--end", str(end_s), "--distinct", "4", "--jobs", str(jobs)]
    if scenario:
        args += ["--scenario", scenario]
    for spec in SPECS:
        args += ["--spec", spec]
    t0 = time.perf_counter()
    result = _cli(*args)
    elapsed = time.perf_counter() - t0
    if result.exit_code != 0:
        raise RuntimeError(result.output[-2000:])
    return int(result.stderr.split("wrote ")[1].split()[0]), elapsed


QUERY_TIMEOUT = "600s"  # a slow engine is measured, not cut off at compare's default 30 s


def _compare(args: list[str], end_s: int, docs: dict | None = None, key: str = "") -> dict:
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = _cli("compare", *args, "--start", str(end_s - DURATION_S), "--end", str(end_s), "--format", "json",
                  "--timeout", QUERY_TIMEOUT)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if result.exit_code != 0:  # one engine failing still leaves the other's figure
        return {"wall_s": round(wall, 2), "client_cpu_s": round(cpu, 2), "error": result.output.strip()[-300:]}
    doc = json.loads(result.stdout)
    if docs is not None:
        docs[key] = doc
    out = {"wall_s": round(wall, 2), "client_cpu_s": round(cpu, 2), "gpus": sum(g["gpus"] for g in doc["groups"])}
    if "power_mean_w" in doc["groups"][0]:
        out["power_mean_w"] = {g["label"]: round(g["power_mean_w"], 2) for g in doc["groups"]}
    if doc["by"] == "model,workload":
        out["units_per_gpu_hour"] = {f"{g['label']} {u}": round(w["units_per_gpu_hour"], 1)
                                     for g in doc["groups"] for u, w in g["work"].items()}
    return out


def run(quick: bool = False, sizes: tuple[int, ...] | None = None, jobs: int = 2) -> dict:
    servers = _servers()
    sizes = sizes or ((10,) if quick else (10, 100, 1000))
    root = Path(tempfile.mkdtemp(prefix="gpuagent-bench-compare-"))
    influx = servers.InfluxdServer(servers.find_binary(servers.INFLUXD, "influxdb"), root / "influxd")
    vm = servers.VictoriaMetricsServer(servers.find_binary(servers.VICTORIA_METRICS, "victoria-metrics"), root / "vm")
    rows = []
    try:
        influx.start()
        vm.start()
        end_s = int(time.time()) // STEP_S * STEP_S - 60
        for n in sizes:
            db = f"fleet{n}"
            influx.create_database(db)
            points, build_influx = _build(influx.url, db, n, end_s, jobs)
            _, build_vm = _build(vm.url, db, n, end_s, jobs)
            vm.export(f'{{__name__="gpu_power_power_w",db="{db}"}}', min_samples=n * 8 * (DURATION_S // STEP_S))
            row = {"hosts": n, "gpus": n * 8, "points": points,
                   "build_points_per_s": {"influxd": round(points / build_influx), "victoria_metrics": round(points / build_vm)},
                   "influxql": _compare(["--url", influx.url, "--database", db], end_s),
                   "promql": _compare(["--promql-url", vm.url, "--where", f'db="{db}"'], end_s)}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)  # a long run's rows as they come
    finally:
        vm.stop()
        influx.stop()
        shutil.rmtree(root, ignore_errors=True)
    largest = rows[-1]
    worst = max(largest["influxql"]["wall_s"], largest["promql"]["wall_s"])
    failed = any("error" in row[engine] for row in rows for engine in ("influxql", "promql"))
    return {
        "name": "compare_scale",
        "figure": worst,
        "unit": "s",
        "goal": f"<= {GOAL_S:g} s at 1,000 hosts x 8 GPUs x 1 h; client CPU flat",
        "holds": worst <= GOAL_S and largest["hosts"] >= 1000 and not failed,
        "detail": {"rows": rows},
    }


def run_work(quick: bool = False, sizes: tuple[int, ...] | None = None, jobs: int = 2,
             vm_only: bool = False) -> dict:
    """compare with work: `--by model,workload` and `--by model` over a fleet that writes gpu_work."""
    servers = _servers()
    sizes = sizes or ((10,) if quick else (10, 100, 1000))
    root = Path(tempfile.mkdtemp(prefix="gpuagent-bench-work-"))
    influx = None if vm_only else servers.InfluxdServer(servers.find_binary(servers.INFLUXD, "influxdb"), root / "influxd")
    vm = servers.VictoriaMetricsServer(servers.find_binary(servers.VICTORIA_METRICS, "victoria-metrics"), root / "vm")
    rows = []
    try:
        if influx:
            influx.start()
        vm.start()
        end_s = int(time.time()) // STEP_S * STEP_S - 60
        for n in sizes:
            db = f"work{n}"
            points, build_vm = _build(vm.url, db, n, end_s, jobs, "inference")
            vm.export(f'{{__name__="gpu_work_units_total",db="{db}"}}', min_samples=n * 8 * (DURATION_S // STEP_S) // 2)
            prom = ["--promql-url", vm.url, "--where", f'db="{db}"']
            row = {"hosts": n, "gpus": n * 8, "points": points,
                   "build_points_per_s": {"victoria_metrics": round(points / build_vm)},
                   "promql_by_model_workload": _compare([*prom, "--by", "model,workload"], end_s),
                   "promql_by_model": _compare([*prom, "--by", "model"], end_s)}
            if influx:
                influx.create_database(db)
                _, build_influx = _build(influx.url, db, n, end_s, jobs, "inference")
                row["build_points_per_s"]["influxd"] = round(points / build_influx)
                row["influxql_by_model_workload"] = _compare(
                    ["--url", influx.url, "--database", db, "--by", "model,workload"], end_s)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        vm.stop()
        if influx:
            influx.stop()
        shutil.rmtree(root, ignore_errors=True)
    largest = rows[-1]
    worst = max(largest["promql_by_model_workload"]["wall_s"], largest["promql_by_model"]["wall_s"])
    failed = any("error" in v for row in rows for k, v in row.items() if k.startswith(("promql", "influxql")))
    return {
        "name": "compare_work",
        "figure": worst,
        "unit": "s",
        "goal": f"<= {GOAL_S:g} s at 1,000 hosts x 8 GPUs x 1 h on VictoriaMetrics, with work",
        "holds": worst <= GOAL_S and largest["hosts"] >= 1000 and not failed,
        "detail": {"rows": rows},
    }


def run_rollups(quick: bool = False, sizes: tuple[int, ...] | None = None, jobs: int = 2) -> dict:
    """compare on InfluxDB 1.6 from rollups (`gpuagent rollups init` + `backfill`) against raw (`--raw`)."""
    servers = _servers()
    sizes = sizes or ((10,) if quick else (10, 100, 1000))
    root = Path(tempfile.mkdtemp(prefix="gpuagent-bench-rollups-"))
    influx = servers.InfluxdServer(servers.find_binary(servers.INFLUXD, "influxdb"), root / "influxd")
    rows = []
    try:
        influx.start()
        end_s = int(time.time()) // STEP_S * STEP_S - 60
        for n in sizes:
            db = f"rollups{n}"
            influx.create_database(db)
            points, build = _build(influx.url, db, n, end_s, jobs)
            conn = ["--url", influx.url, "--database", db]
            t0 = time.perf_counter()
            # A statement over 1,000 hosts' hour takes more than the default 30 s.
            for command in (["init"], ["backfill", "--since", f"{DURATION_S + 3600}s", "--timeout", QUERY_TIMEOUT]):
                result = _cli("rollups", *command, *conn)
                if result.exit_code != 0:
                    raise RuntimeError(result.output[-2000:])
            row = {"hosts": n, "gpus": n * 8, "points": points, "build_points_per_s": round(points / build),
                   "rollups_init_and_backfill_s": round(time.perf_counter() - t0, 2),
                   "influxql_raw": _compare([*conn, "--raw"], end_s),
                   "influxql_rollups": _compare(conn, end_s)}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        influx.stop()
        shutil.rmtree(root, ignore_errors=True)
    largest = rows[-1]
    figure = largest["influxql_rollups"]["wall_s"]
    return {
        "name": "compare_rollups",
        "figure": figure,
        "unit": "s",
        "goal": f"<= {GOAL_S:g} s at 1,000 hosts x 8 GPUs x 1 h on InfluxDB 1.6 from rollups",
        "holds": figure <= GOAL_S and largest["hosts"] >= 1000 and "error" not in largest["influxql_rollups"],
        "detail": {"rows": rows},
    }


def _differences(a: dict, b: dict, path: str = "doc") -> list[str]:
    """Where two compare documents differ (numbers beyond relative 1e-9), `source` left out."""
    import math

    if isinstance(a, dict) and isinstance(b, dict):
        if sorted(a) != sorted(b):
            return [f"{path}: keys {sorted(set(a) ^ set(b))}"]
        return [d for k in a if not (path == "doc" and k == "source") for d in _differences(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} against {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _differences(x, y, f"{path}[{i}]")]
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return [] if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9) else [f"{path}: {a} against {b}"]
    return [] if a == b else [f"{path}: {a!r} against {b!r}"]


def run_rollups_vm(quick: bool = False, sizes: tuple[int, ...] | None = None, jobs: int = 2) -> dict:
    """compare over PromQL from the recording rules (vmalert replay) against raw (`--raw`), VictoriaMetrics."""
    servers = _servers()
    sizes = sizes or ((10,) if quick else (10, 100, 1000))
    root = Path(tempfile.mkdtemp(prefix="gpuagent-bench-vmrollups-"))
    vm = servers.VictoriaMetricsServer(servers.find_binary(servers.VICTORIA_METRICS, "victoria-metrics"), root / "vm")
    rows = []
    try:
        vm.start()
        end_s = int(time.time()) // STEP_S * STEP_S - 60
        for n in sizes:
            db = f"vmrollups{n}"
            points, build = _build(vm.url, db, n, end_s, jobs)
            vm.export(f'{{__name__="gpu_power_power_w",db="{db}"}}', min_samples=n * 8 * (DURATION_S // STEP_S))
            t0 = time.perf_counter()
            result = _cli("rollups", "backfill", "--promql-url", vm.url, "--since", f"{DURATION_S + 3600}s",
                          "--timeout", QUERY_TIMEOUT)
            if result.exit_code != 0:
                raise RuntimeError(result.output[-2000:])
            backfill_s = time.perf_counter() - t0
            vm.export('{__name__="gpuagent:gpu_power_power_count:1m"}', min_samples=n * 8 * 50)
            prom = ["--promql-url", vm.url, "--where", f'db="{db}"']
            docs = {}
            row = {"hosts": n, "gpus": n * 8, "points": points, "build_points_per_s": round(points / build),
                   "rollups_backfill_s": round(backfill_s, 2),
                   "promql_raw": _compare([*prom, "--raw"], end_s, docs, "raw"),
                   "promql_rollups": _compare(prom, end_s, docs, "rollups")}
            if len(docs) == 2:
                row["source"] = {k: docs["rollups"]["source"].get(k) for k in ("kind", "resolution", "series_level")}
                row["pieces"] = [p["level"] for p in docs["rollups"]["source"].get("pieces", [])]
                row["differences"] = _differences(docs["rollups"], docs["raw"])[:10]
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        vm.stop()
        shutil.rmtree(root, ignore_errors=True)
    largest = rows[-1]
    figure = largest["promql_rollups"]["wall_s"]
    return {
        "name": "compare_rollups_vm",
        "figure": figure,
        "unit": "s",
        "goal": f"<= {GOAL_S:g} s at 1,000 hosts x 8 GPUs x 1 h on VictoriaMetrics from the recording rules, equal to raw",
        "holds": (figure <= GOAL_S and largest["hosts"] >= 1000 and "error" not in largest["promql_rollups"]
                  and largest.get("differences") == []),
        "detail": {"rows": rows},
    }


if __name__ == "__main__":
    args = sys.argv[1:]
    work, vm_only, rollups = "--work" in args, "--vm-only" in args, "--rollups" in args
    sizes = tuple(int(a) for a in args if not a.startswith("--")) or None
    result = (run_work(sizes=sizes, vm_only=vm_only) if work
              else (run_rollups_vm(sizes=sizes) if vm_only else run_rollups(sizes=sizes)) if rollups
              else run(sizes=sizes))
    print(json.dumps(result, indent=2))
