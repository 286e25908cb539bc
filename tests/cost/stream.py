"""The stream of the NVML collectors on a simulated fleet, same seed and sim clock: the
"before" (a golden file written from the code before batching) and the "after" must match.

    python tests/cost/stream.py     # rewrite tests/cost/golden/*.json from the code checked out
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pynvml

GOLDEN = Path(__file__).resolve().parent / "golden"
COLLECTORS = ("clocks", "power", "memory", "pcie", "p2p", "nvlink", "mig", "vgpu")
# (spec, scenario): every built-in profile, two GPUs where the profile has peers (NVLink, P2P).
FLEETS = {
    "l40s": ("l40s:2", "training"),
    "rtx4090": ("rtx4090:1", "inference"),
    "a100-sxm4": ("a100-sxm4:2", "training"),
    "h100-pcie": ("h100-pcie:2", "mixed"),
    "h100-sxm": ("h100-sxm:4", "training"),
    "h200": ("h200:2", "training"),
    "a100-sxm4-mig": ("a100-sxm4-mig:2", "training"),
    "h100-sxm-mig": ("h100-sxm-mig:2", "mixed"),
    "l40s-vgpu": ("l40s-vgpu:2", "training"),
}
SEED = 7
STEPS = (10, 10, 30)  # sim seconds before each collection: counters and rates move between them


def _classes():
    from gpuagent.plugin_host import PluginHost

    found = PluginHost(load_entry_points=False).load().collectors
    return {name: found[name] for name in COLLECTORS}


def stream(profile: str, runs: bool = False) -> list[list]:
    """[measurement, tags, fields] of every point of every run, in run order, on ``profile``
    (with ``runs``: [measurement, tags, fields, run index])."""
    from gpuagent import sim
    from gpuagent.gpus.gpu import Gpu, current_collector
    from gpuagent.pipeline.accumulator import Accumulator
    from gpuagent.sim.clock import ManualClock
    from gpuagent.testing import make_collector

    spec, scenario = FLEETS[profile]
    clock = ManualClock()
    machine = sim.install(spec, seed=SEED, clock=clock, scenario=scenario)
    try:
        pynvml.nvmlInit()
        machine.gpus = [Gpu(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
        collectors = [make_collector(machine, cls) for cls in _classes().values()]
        # The GPM warm-up's wait moves the simulated clock (samples 100 ms or less apart are
        # refused): wherever the code keeps its `time` (gpuagent.gpus.gpm, or each collector before).
        import importlib
        from types import SimpleNamespace

        patched = []
        for name in ("gpuagent.gpus.gpm", "gpuagent.plugins.memory", "gpuagent.plugins.mig", "gpuagent.plugins.nvlink"):
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            if hasattr(module, "time"):
                patched.append((module, module.time))
                module.time = SimpleNamespace(sleep=clock.advance)
        try:  # runs on one scheduler tick share field-values batches (absent before batching)
            from gpuagent.gpus.nvml_read import current_tick
        except ImportError:
            current_tick = None
        out: list[list] = []
        for n, step in enumerate(STEPS):
            clock.advance(step)
            for c in collectors:
                token = current_collector.set(c.name)
                tick = current_tick.set(("stream", n)) if current_tick is not None else None
                try:
                    acc = Accumulator({"host": "h"}, time_ns=int(clock.now() * 1e9))
                    c.collect(acc)
                finally:
                    current_collector.reset(token)
                    if tick is not None:
                        current_tick.reset(tick)
                out.extend([p.measurement, p.tags, p.fields, *([n] if runs else [])] for p in acc.points)
        for c in collectors:
            c.close()
        for module, original in patched:
            module.time = original
        return json.loads(json.dumps(out))  # as the golden file holds it (tuples -> lists)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
        sim.uninstall()


def main() -> int:
    GOLDEN.mkdir(exist_ok=True)
    for profile in FLEETS:
        path = GOLDEN / f"{profile}.json"
        path.write_text(json.dumps(stream(profile), indent=0, sort_keys=True) + "\n")
        print(path, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
