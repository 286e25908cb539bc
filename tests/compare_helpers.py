"""What the compare tests share: the simulated fleet they write, one compare run as JSON, and one rule
for "the same compare document" (InfluxDB and PromQL alike)."""

from __future__ import annotations

import json
import math


def assert_same(a, b, path="doc"):
    """Equal documents: numbers within relative 1e-9, everything else exactly."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert sorted(a) == sorted(b), f"{path}: keys {sorted(set(a) ^ set(b))}"
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: {len(a)} items against {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{i}]")
    elif isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), f"{path}: {a} (rollups) against {b} (raw)"
    else:
        assert a == b, f"{path}: {a!r} (rollups) against {b!r} (raw)"


def sim_fleet_args(
    url: str, database: str, *, hosts: int, duration_s: int, step_s: int, end_s: int, seed: int, specs: tuple[str, ...]
) -> list[str]:
    """`gpuagent sim fleet` writing `hosts` hosts of `specs` for `duration_s` up to `end_s`, one job."""
    args = ["sim", "fleet", "--url", url, "--database", database, "--hosts", str(hosts),
            "--duration", f"{duration_s}s", "--step", f"{step_s}s", "--end", str(end_s),
            "--seed", str(seed), "--jobs", "1"]  # fmt: skip
    for spec in specs:
        args += ["--spec", spec]
    return args


def compare_json(cli, connection: list[str], start_ns: int, end_ns: int, *extra) -> dict:
    """`gpuagent compare --format json` over [start, end) on `connection` (its --url/--promql-url options)."""
    result = cli("compare", *connection, "--start", f"{start_ns / 1e9:.3f}", "--end", f"{end_ns / 1e9:.3f}",
                 "--format", "json", *extra)  # fmt: skip
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


SCRAPED_MEASUREMENTS = ("gpu_power", "gpu_clocks", "gpu_memory", "gpu_p2p", "gpu_mig", "gpu_vgpu", "gpu_health")


def openmetrics(server, db: str, end_s: int, ms: bool = False) -> str:
    """Every point of `db` as OpenMetrics (ms: Prometheus text with ms timestamps, no # EOF), named as
    the prometheus sink names it: what a Prometheus scraping the fleet's agents would hold (the
    compare corpus and tests/compare/test_compare_promql.py load it; a change shows in the corpus)."""
    from gpuagent.plugins.prometheus.exposition import label_name
    from gpuagent.plugins.prometheus.naming import metric_for

    families: dict[str, tuple[str, list[str]]] = {}
    for m in SCRAPED_MEASUREMENTS:
        for series in server.query(f'SELECT * FROM "{m}" WHERE time <= {end_s * 10**9} GROUP BY *', db=db):
            tags = {label_name(k): v for k, v in series["tags"].items() if v != ""}
            for values in series["values"]:
                row = dict(zip(series["columns"], values, strict=True))
                t = row.pop("time") / 1e9
                for field, value in row.items():
                    if value is None:
                        continue
                    spec = metric_for("gpuagent", m, field, isinstance(value, str))
                    labels = dict(tags)
                    if isinstance(value, str):
                        labels[spec.label], value = value, 1.0
                    family = spec.name.removesuffix("_total") if spec.kind == "counter" else spec.name
                    kind = "gauge" if spec.kind == "info" else spec.kind
                    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                    stamp = f"{round(t * 1000)}" if ms else f"{t:.3f}"
                    families.setdefault(family, (kind, []))[1].append(
                        f"{spec.name}{{{text}}} {float(value) * spec.scale!r} {stamp}"
                    )
    out = []
    for family, (kind, lines) in families.items():
        out.append(f"# TYPE {family} {kind}")
        out.extend(lines)
    return "\n".join(out) + ("\n" if ms else "\n# EOF\n")
