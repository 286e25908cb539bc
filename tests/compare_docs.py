"""One rule for "the same compare document" in the rollup tests (InfluxDB and PromQL alike)."""

from __future__ import annotations

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
