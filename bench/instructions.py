"""Instructions per collection cycle under valgrind: the agent against the same NVML calls bare.

CPU time on a shared 2-core machine moves by ±20 % from one minute to the next; instruction
counts do not, so this is the A/B for a change to the agent's hot path (it is not a row of
`python -m bench`: three runs under callgrind take about three minutes).

    python -m bench.instructions [CYCLES]

Three child processes run the same start-up, warm-up and one recorded cycle (bench/cycle.py's
recording); then CYCLES weighted cycles (a collector on a 30 s interval every third cycle, p2p
every thirtieth, as bench/cycle.py weighs them) of the agent's collectors, or of their recorded
calls replayed bare, or none. Per cycle: agent = (A - Z) / CYCLES, bare = (B - Z) / CYCLES.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys

SPEC = "h100-sxm:8"


def _child(mode: str, cycles: int) -> None:
    logging.disable(logging.WARNING)
    from bench.common import build_agent
    from bench.cycle import _recording, _replayer, _restore
    from gpuagent.gpus.nvml_read import current_tick
    from gpuagent.pipeline.accumulator import Accumulator
    from gpuagent.pipeline.metric import to_lines

    agent = build_agent(SPEC)
    tags = agent.context.default_tags
    cycle_s = agent.config.agent.interval
    runners = [r for r in agent.scheduler.runners if r.collector.name != "host"]
    every = {r.collector.name: max(1, round(r.interval / cycle_s)) for r in runners}

    def collect(r, tick):
        token = current_tick.set(tick)
        try:
            acc = Accumulator(tags)
            r.collector.collect(acc)
            to_lines(acc.points)
        finally:
            current_tick.reset(token)

    for warm in range(3):
        for r in runners:
            collect(r, ("warm", warm))
    replays = {}
    for r in runners:
        calls: list = []
        saved = _recording(calls)
        try:
            collect(r, "recorded")
        finally:
            _restore(saved)
        replays[r.collector.name] = _replayer(calls)
    for i in range(cycles):
        for r in runners:
            if i % every[r.collector.name] == 0:
                collect(r, i) if mode == "agent" else replays[r.collector.name]()
    os._exit(0)  # no clean-up: the three runs differ only in the loop


def _instructions(mode: str, cycles: int) -> int:
    done = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-m",
            "bench.instructions",
            "--child",
            mode,
            str(cycles),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count from valgrind: {done.stderr[-300:]}")
    return int(found.group(1).replace(",", ""))


def run(cycles: int = 30) -> dict:
    if shutil.which("valgrind") is None:
        return {"name": "instructions", "figure": "n/a", "holds": None, "detail": {"reason": "no valgrind on PATH"}}
    a, b, z = (_instructions(mode, n) for mode, n in (("agent", cycles), ("bare", cycles), ("bare", 0)))
    agent, bare = (a - z) / cycles, (b - z) / cycles
    return {
        "name": "instructions",
        "figure": round(agent / bare, 3),
        "unit": "× bare NVML (instructions)",
        "holds": None,  # a measuring tool; the goal is judged on CPU time by the cycle row
        "detail": {
            "spec": SPEC,
            "cycles": cycles,
            "agent_minstr_per_cycle": round(agent / 1e6, 2),
            "bare_minstr_per_cycle": round(bare / 1e6, 2),
            "overhead_minstr_per_cycle": round((agent - bare) / 1e6, 2),
        },
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]))
    else:
        print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else 30), indent=2))
