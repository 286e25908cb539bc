"""Shared set-up for the benchmarks: an agent built on a simulated fleet, without sending anywhere."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from gpuagent.service.runtime import Options, build


def bench_spec(default: str) -> str | None:
    """The simulated fleet to bench on, or None (real NVML) with GPUAGENT_BENCH_REAL=1 (scripts/device-check.sh)."""
    return None if os.environ.get("GPUAGENT_BENCH_REAL") == "1" else default


def build_agent(spec: str | None, collectors: list[str] | None = None, extra: str = ""):
    """An Agent on the simulated SPEC (real NVML when None) whose sink is /dev/null; only ``collectors`` enabled if given."""
    tmp = Path(tempfile.mkdtemp(prefix="gpuagent-bench-"))
    text = f'[agent]\nstate_dir = "{tmp}"\n[sinks.file]\npath = "/dev/null"\n{extra}'
    if collectors is not None:
        from gpuagent.plugin_host import load_host

        for name in load_host(entry_points=False).collectors:
            if name not in collectors:
                text += f"\n[collectors.{name}]\nenabled = false\n"
    path = tmp / "gpuagent.toml"
    path.write_text(text)
    return build(Options(config_path=path, simulate=spec))


def median_cpu(fn, n: int, warmup: int = 3) -> float:
    """Median CPU seconds of fn() on this thread (thread_time: other threads' work is not ours to count)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        t0 = time.thread_time()
        fn()
        samples.append(time.thread_time() - t0)
    return statistics.median(samples)
