"""gpustat's new_query() against our collection of the same facts, per GPU.

Same simulated fleet, same process: gpustat reads name, temperature, fan,
utilisation, memory, power and processes (with psutil per process); we run
the power, memory and processes collectors (plus clocks for the name-level
facts gpustat also prints), which read a superset.
"""

from __future__ import annotations

from bench.common import build_agent, median_cpu
from gpuagent.pipeline.accumulator import Accumulator
from gpuagent.pipeline.metric import to_lines

SPEC = "h100-sxm:8"
OURS = ["power", "memory", "processes"]


def _import_gpustat():
    """gpustat patches pynvml's functions on import (nvmlDeviceGetMemoryInfo loses its
    version argument); undo that so both sides call the same, unpatched pynvml."""
    import pynvml

    saved = dict(vars(pynvml))
    import gpustat

    for name, value in saved.items():
        if getattr(pynvml, name, None) is not value:
            setattr(pynvml, name, value)
    return gpustat


def run(quick: bool = False) -> dict:
    gpustat = _import_gpustat()

    n = 20 if quick else 100
    agent = build_agent(SPEC, collectors=OURS)
    try:
        gpus = len(agent.context.gpus)
        tags = agent.context.default_tags

        def ours():
            acc = Accumulator(tags)
            for c in agent.collectors:
                c.collect(acc)
            to_lines(acc.points)

        def theirs():
            gpustat.new_query()

        ours_cpu = median_cpu(ours, n)
        theirs_cpu = median_cpu(theirs, n)
    finally:
        agent.close(flush_timeout=1)
    ratio = ours_cpu / theirs_cpu
    return {
        "name": "gpustat",
        "figure": round(ratio, 2),
        "unit": "× gpustat",
        "goal": "≤ 0.5",
        "holds": ratio <= 0.5,
        "detail": {
            "spec": SPEC,
            "ours_ms_per_gpu": round(ours_cpu * 1000 / gpus, 3),
            "gpustat_ms_per_gpu": round(theirs_cpu * 1000 / gpus, 3),
            "gpustat_version": getattr(gpustat, "__version__", "?"),
        },
    }
