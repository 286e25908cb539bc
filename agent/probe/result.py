"""A probe run's result: the curve, its knees, the JSON document and the gpu_l2_probe points."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuagent.pipeline.accumulator import Accumulator
from gpuagent.pipeline.metric import Point
from gpuagent.probe.knee import Knee, find_knees, largest_drop
from gpuagent.probe.sweep import Backend, SweepResult, run_sweep
from gpuagent.schema.measurements import GPU_L2_PROBE

MEASUREMENT = GPU_L2_PROBE
STEP_NS = 1_000_000  # curve points 1 ms apart: distinct even where a store keeps milliseconds only


@dataclass
class ProbeResult:
    method: str  # backend: numpy-cpu, cupy, torch, simulated
    device: str
    sweep: SweepResult
    knees: list[Knee]
    started_ns: int
    gpu_tags: dict[str, str] = field(default_factory=dict)  # empty for a CPU run
    reported_cache_bytes: dict[str, int] = field(default_factory=dict)  # {"L2": …} or {"L2": …, "L3": …}
    reported_source: str = ""  # where reported_cache_bytes came from

    @property
    def knee(self) -> Knee | None:
        """The summary knee: the largest drop (for a GPU: where L2 stops helping)."""
        return largest_drop(self.knees)

    def as_json(self) -> dict:
        knee = self.knee
        gpu = None
        if self.gpu_tags:
            gpu = {
                "index": int(self.gpu_tags["gpu"]),
                "uuid": self.gpu_tags.get("uuid"),
                "model": self.gpu_tags.get("model"),
            }
        return {
            "device": self.device,
            "method": self.method,
            "gpu": gpu,
            "sizes": self.sweep.sizes,
            "bandwidth_gbps": [round(b, 3) for b in self.sweep.bandwidth_gbps],
            "knee_bytes": knee.bytes if knee else None,
            "bw_below_gbps": round(knee.bw_below_gbps, 3) if knee else None,
            "bw_above_gbps": round(knee.bw_above_gbps, 3) if knee else None,
            "ratio": round(knee.ratio, 3) if knee else None,
            "knees": [
                {
                    "bytes": k.bytes,
                    "bw_below_gbps": round(k.bw_below_gbps, 3),
                    "bw_above_gbps": round(k.bw_above_gbps, 3),
                    "ratio": round(k.ratio, 3),
                }
                for k in self.knees
            ],
            "reported_cache_bytes": self.reported_cache_bytes,
            "reported_source": self.reported_source,
            "rounds": self.sweep.rounds,
            "duration_s": round(self.sweep.duration_s, 3),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_ns / 1e9)),
        }

    def to_points(self, default_tags: Mapping[str, str] | None = None) -> list[Point]:
        """The gpu_l2_probe points (docs/probe.md): a summary and one point per knee at t0, curve
        point i at t0 + (i+1) ms."""
        if not self.gpu_tags:
            raise ValueError("a CPU probe has no GPU identity; it is not written as gpu_l2_probe")
        acc = Accumulator(default_tags)
        t0 = self.started_ns - self.started_ns % STEP_NS
        knee = self.knee
        acc.add_fields(
            MEASUREMENT,
            {
                "l2_effective_bytes": knee.bytes if knee else None,
                "l2_bw_gbps": knee.bw_below_gbps if knee else None,
                "dram_bw_gbps": knee.bw_above_gbps if knee else None,
                "l2_dram_ratio": knee.ratio if knee else None,
                "reported_l2_bytes": self.reported_cache_bytes.get("L2"),
                "knee_found": knee is not None,
                "knees": len(self.knees),
                "steps": len(self.sweep.sizes),
                "method": self.method,
                "duration_s": self.sweep.duration_s,
            },
            tags=self.gpu_tags,
            time_ns=t0,
        )
        # Every knee the curve has (a CPU's L2 and L3; an H100's near L2 partition, its far one,
        # DRAM), each its own series (tag ``knee``, 0 = smallest working set) at t0.
        for i, k in enumerate(self.knees):
            acc.add_fields(
                MEASUREMENT,
                {
                    "knee_bytes": k.bytes,
                    "knee_bw_below_gbps": k.bw_below_gbps,
                    "knee_bw_above_gbps": k.bw_above_gbps,
                    "knee_ratio": k.ratio,
                    "knee_largest": k is knee,
                },
                tags={**self.gpu_tags, "knee": str(i)},
                time_ns=t0,
            )
        for i, (size, bw) in enumerate(zip(self.sweep.sizes, self.sweep.bandwidth_gbps, strict=True)):
            acc.add_fields(
                MEASUREMENT,
                {"working_set_bytes": size, "bandwidth_gbps": bw, "step": i},
                tags=self.gpu_tags,
                time_ns=t0 + (i + 1) * STEP_NS,
            )
        return acc.points


def run_probe(
    backend: Backend,
    sizes: list[int],
    rounds: int = 7,
    seed: int = 0,
    gpu_tags: Mapping[str, str] | None = None,
    reported_cache_bytes: Mapping[str, int] | None = None,
    reported_source: str = "",
) -> ProbeResult:
    started = time.time_ns()
    try:
        sweep = run_sweep(backend, sizes, rounds=rounds, seed=seed)
    finally:
        backend.close()
    return ProbeResult(
        method=backend.name,
        device=backend.device,
        sweep=sweep,
        knees=find_knees(sweep.sizes, sweep.bandwidth_gbps),
        started_ns=started,
        gpu_tags=dict(gpu_tags or {}),
        reported_cache_bytes=dict(reported_cache_bytes or {}),
        reported_source=reported_source,
    )
