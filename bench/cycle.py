"""CPU per collection cycle on h100-sxm:8, against the same NVML calls made bare.

The floor is the NVML call sequence itself: one cycle's pynvml calls are
recorded, then replayed straight through pynvml with no agent around them.
agent / bare is what the agent adds on top of the calls it cannot avoid.
The host collector (psutil, no NVML) is left out of both sides.
"""

from __future__ import annotations

import functools
import threading

import pynvml

from bench.common import build_agent, median_cpu
from gpuagent.accumulator import Accumulator
from gpuagent.metric import to_lines

SPEC = "h100-sxm:8"


def _record(fn_names):
    calls = []
    main = threading.current_thread()
    originals = {}
    for name in fn_names:
        fn = getattr(pynvml, name)

        @functools.wraps(fn)
        def wrapper(*args, __fn=fn, **kwargs):
            if threading.current_thread() is main:
                calls.append((__fn, args, kwargs))
            return __fn(*args, **kwargs)

        originals[name] = fn
        setattr(pynvml, name, wrapper)
    return calls, originals


def run(quick: bool = False) -> dict:
    n = 30 if quick else 200
    agent = build_agent(SPEC)
    collectors = [c for c in agent.collectors if c.name != "host"]
    tags = agent.context.default_tags

    def cycle():
        acc = Accumulator(tags)
        for c in collectors:
            c.collect(acc)
        to_lines(acc.points)
        return acc

    try:
        # Warm the static caches first: they are read once per device, not per cycle.
        cycle()
        cycle()
        names = [n for n in dir(pynvml) if n.startswith("nvml") and callable(getattr(pynvml, n)) and n not in ("nvmlInit", "nvmlShutdown")]
        calls, originals = _record(names)
        try:
            points = len(cycle().points)
        finally:
            for name, fn in originals.items():
                setattr(pynvml, name, fn)
        ncalls = len(calls)

        def bare():
            for fn, args, kwargs in calls:
                try:
                    fn(*args, **kwargs)
                except pynvml.NVMLError:
                    pass

        agent_cpu = median_cpu(cycle, n)
        bare_cpu = median_cpu(bare, n)
    finally:
        agent.close(flush_timeout=1)
    ratio = agent_cpu / bare_cpu
    return {
        "name": "cycle",
        "figure": round(ratio, 2),
        "unit": "× bare NVML",
        "goal": "≤ 1.3",
        "holds": ratio <= 1.3,
        "detail": {
            "spec": SPEC,
            "agent_ms_per_cycle": round(agent_cpu * 1000, 3),
            "bare_ms_per_cycle": round(bare_cpu * 1000, 3),
            "nvml_calls_per_cycle": ncalls,
            "points_per_cycle": points,
        },
    }
