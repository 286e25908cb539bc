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
