"""CPU per collection cycle on h100-sxm:8, against the same NVML calls made bare.

The floor is the NVML call sequence itself: each collector's pynvml calls in
one run are recorded, then replayed straight through pynvml with no agent
around them. agent / bare is what the agent adds on top of the calls it
cannot avoid. A cycle is one [agent] interval in steady state: a collector
on a slower default interval (pcie 30 s, p2p 300 s) counts in proportion
(interval / its interval), as it does on a running node. The host collector
(psutil, no NVML) is left out of both sides.
"""

from __future__ import annotations

import functools
import threading

import pynvml

from bench.common import bench_spec, build_agent, median_cpu
from gpuagent.accumulator import Accumulator
from gpuagent.metric import to_lines

SPEC = "h100-sxm:8"


def _recording(calls: list):
    main = threading.current_thread()
    originals = {}
    for name in dir(pynvml):
        fn = getattr(pynvml, name)
        if not name.startswith("nvml") or not callable(fn) or name in ("nvmlInit", "nvmlShutdown"):
            continue

        @functools.wraps(fn)
        def wrapper(*args, __fn=fn, **kwargs):
            # Only the collecting thread: the health collector's XID waiter is not part of a cycle.
            if threading.current_thread() is main:
                calls.append((__fn, args, kwargs))
            return __fn(*args, **kwargs)

        originals[name] = fn
        setattr(pynvml, name, wrapper)
    return originals


def _replayer(calls):
    def bare():
        for fn, args, kwargs in calls:
            try:
                fn(*args, **kwargs)
            except pynvml.NVMLError:
                pass

    return bare


def run(quick: bool = False) -> dict:
    n = 20 if quick else 100
    spec = bench_spec(SPEC)  # GPUAGENT_BENCH_REAL=1: the real GPUs
    agent = build_agent(spec)
    tags = agent.context.default_tags
    cycle_s = agent.config.agent.interval
    per_collector = {}
    agent_total = bare_total = calls_total = points_total = 0.0
    try:
        for runner in agent.scheduler.runners:
            c = runner.collector
            if c.name == "host":
                continue

            def collect(c=c):
                acc = Accumulator(tags)
                c.collect(acc)
                to_lines(acc.points)
                return acc

            # Warm the static caches: they are read once per device, not per cycle.
            collect()
            collect()
            calls: list = []
            originals = _recording(calls)
            try:
                points = len(collect().points)
            finally:
                for name, fn in originals.items():
                    setattr(pynvml, name, fn)
            weight = min(1.0, cycle_s / runner.interval)
            a = median_cpu(collect, n)
            b = median_cpu(_replayer(calls), n)
            per_collector[c.name] = {
                "agent_ms": round(a * 1000, 3), "bare_ms": round(b * 1000, 3),
                "calls": len(calls), "points": points, "weight": round(weight, 3),
            }
            agent_total += weight * a
            bare_total += weight * b
            calls_total += weight * len(calls)
            points_total += weight * points
    finally:
        agent.close(flush_timeout=1)
    ratio = agent_total / bare_total
    return {
        "name": "cycle",
        "figure": round(ratio, 2),
        "unit": "× bare NVML",
        "goal": "≤ 1.3",
        "holds": ratio <= 1.3,
        "detail": {
            "spec": spec or f"real NVML ({len(agent.context.gpus)} GPUs)",
            "agent_ms_per_cycle": round(agent_total * 1000, 3),
            "bare_ms_per_cycle": round(bare_total * 1000, 3),
            "nvml_calls_per_cycle": round(calls_total),
            "points_per_cycle": round(points_total),
            "collectors": per_collector,
        },
    }
