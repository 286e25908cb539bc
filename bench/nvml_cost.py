"""nvidia-smi as exporters fork it, against our in-process collection of the same facts.

Telegraf's nvidia_smi input forks `nvidia-smi -q -x` every interval; simpler
exporters fork `nvidia-smi --query-gpu=…` for name, temperature, utilisation,
memory and power. Each fork pays for a process start, the driver's
initialisation and the formatting. We read the same facts in-process with the
power and memory collectors on the already-open NVML session.

CPU per collection of every GPU: nvidia-smi's user + system time (the child's
rusage) against this thread's CPU time for one collection (thread_time counts
user and system too). Wall time is in the detail. It needs a real driver and
nvidia-smi: elsewhere the row says what is missing and `holds` is None (not
measured, neither met nor missed).
"""

from __future__ import annotations

import resource
import shutil
import statistics
import subprocess
import time

from bench.common import build_agent, median_cpu
from gpuagent.errors import NvmlUnavailable
from gpuagent.pipeline.accumulator import Accumulator
from gpuagent.pipeline.metric import to_lines

NAME = "nvidia_smi"
QUERY = "name,temperature.gpu,utilization.gpu,memory.used,memory.total,power.draw"
COMMANDS = {
    "query_gpu": ["--query-gpu=" + QUERY, "--format=csv"],
    "q_x": ["-q", "-x"],
}
# power_w, temperature_c; fb_used/total_bytes, gpu_util_pct; the name is in the tags
OURS = ["power", "memory"]
GOAL = 0.1  # ours / `nvidia-smi --query-gpu` (the cheaper fork), CPU per collection


def not_measured(reason: str) -> dict:
    return {
        "name": NAME,
        "figure": "n/a",
        "unit": "",
        "goal": f"≤ {GOAL} × nvidia-smi --query-gpu CPU",
        "holds": None,
        "detail": {"reason": reason},
    }


def fork_cost(argv: list[str], n: int) -> tuple[float, float]:
    """Median (CPU seconds of the child, wall seconds) of running argv n times (after one warm-up)."""
    cpu, wall = [], []
    for i in range(n + 1):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)
        t1 = time.perf_counter()
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            lines = proc.stderr.decode(errors="replace").strip().splitlines() or [f"exit {proc.returncode}"]
            raise RuntimeError(f"{' '.join(argv)} failed: {lines[0]}")
        if i:  # the first run warms the page cache and the driver
            cpu.append((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
            wall.append(t1 - t0)
    return statistics.median(cpu), statistics.median(wall)


def run(quick: bool = False) -> dict:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return not_measured("no nvidia-smi on PATH (needs a machine with an NVIDIA driver)")
    n_fork, n_ours = (5, 50) if quick else (20, 200)
    try:
        agent = build_agent(None, collectors=OURS)  # None: real NVML, never the simulator
    except NvmlUnavailable as exc:
        return not_measured(f"NVML unavailable: {exc}")
    try:
        gpus = len(agent.context.gpus)
        if not gpus:
            return not_measured("NVML reports no GPU")
        tags = agent.context.default_tags

        def ours():
            acc = Accumulator(tags)
            for c in agent.collectors:
                c.collect(acc)
            to_lines(acc.points)
            return acc

        points = len(ours().points)
        ours_cpu = median_cpu(ours, n_ours)
        t0 = time.perf_counter()
        ours()
        ours_wall = time.perf_counter() - t0
        try:
            forks = {key: fork_cost([smi, *args], n_fork) for key, args in COMMANDS.items()}
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            return not_measured(str(exc))
    finally:
        agent.close(flush_timeout=1)
    query_cpu, query_wall = forks["query_gpu"]
    qx_cpu, qx_wall = forks["q_x"]
    ratio = ours_cpu / query_cpu if query_cpu > 0 else float("inf")
    ms = lambda s: round(s * 1000, 3)  # noqa: E731
    return {
        "name": NAME,
        "figure": round(ratio, 4),
        "unit": "× nvidia-smi --query-gpu CPU",
        "goal": f"≤ {GOAL}",
        "holds": ratio <= GOAL,
        "detail": {
            "gpus": gpus,
            "ours_cpu_ms": ms(ours_cpu),
            "ours_wall_ms": ms(ours_wall),
            "ours_points": points,
            "query_gpu_cpu_ms": ms(query_cpu),
            "query_gpu_wall_ms": ms(query_wall),
            "q_x_cpu_ms": ms(qx_cpu),
            "q_x_wall_ms": ms(qx_wall),
            "ratio_ours_over_q_x": round(ours_cpu / qx_cpu, 4) if qx_cpu > 0 else None,
            "query": QUERY,
        },
    }
