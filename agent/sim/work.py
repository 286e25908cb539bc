"""Simulated work: `gpu_work` points beside a simulated fleet's GPU readings (`sim fleet --scenario`).

A roofline throughput model (docs/simulator.md): per workload a size (its working set), a batch,
the math per unit and its arithmetic intensity (FLOP per byte moved); per profile the published
dense tensor rate and DRAM bandwidth (the profile's `throughput` block) and its L2 size. A batch
takes max(math / peak rate, bytes / bandwidth), the bandwidth being the L2's when the working set
fits in the L2, else the DRAM's. Each step's units are that rate × the step × the GPU's simulated
busy share and SM clock against its max, so a capped or idle card does less work.

It exists so that `gpuagent compare` can be tried on work and tested against the raw points;
nothing asserts what the model concludes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

# Share of the roofline a real kernel mix reaches (one figure for every card: the model compares
# cards, it does not predict one).
EFFICIENCY = 0.6


@dataclass(frozen=True)
class Workload:
    name: str
    unit: str
    source: str
    flops_per_unit: float  # math per unit of work (FLOP)
    intensity: float  # FLOP per byte moved to or from memory
    batch: int  # units per batch
    working_set_bytes: int  # bytes a batch touches repeatedly (weights, activations, KV cache)
    precision: str = "fp16"
    gpus: int = 1  # a tensor-parallel server spans several GPUs: one piece of work on each


# Three workloads per scenario, each run on every model of the fleet.
WORKLOADS = {
    "inference": (
        # Decoding an 8B-parameter model: 2 FLOP per weight per token (1.6e10); the 16 GB of FP16 weights
        # are read once per step of a batch of 32 sequences: 32 × 1.6e10 FLOP / 16 GB = 32 FLOP per byte.
        Workload("llama-3.1-8b", "tokens_out", "vllm", 1.6e10, 32.0, 32, 16_000_000_000),
        # A 70B model in FP8 over two GPUs (tensor parallel): the work is counted once, on both.
        Workload("llama-3.1-70b", "tokens_out", "vllm", 1.4e11, 64.0, 64, 35_000_000_000, "fp8", 2),
        # An encoder that fits in a large L2: activations and weights of a small model at batch 8.
        Workload("bert-base", "requests", "triton", 2.2e10, 12.0, 8, 60_000_000),
    ),
    "training": (
        Workload("resnet50", "samples", "job", 2.5e10, 80.0, 256, 2_000_000_000),
        Workload("gpt-1.3b", "samples", "job", 1.6e13, 150.0, 16, 30_000_000_000),
        Workload("bert-large-finetune", "steps", "job", 4.0e13, 40.0, 1, 80_000_000),
    ),
}


def units_per_second(profile: dict, w: Workload) -> float:
    """The model's full-speed rate of one GPU of the profile on workload `w` (units/s)."""
    tp = profile.get("throughput") or {}
    tflops = (tp.get("tensor_tflops") or {}).get(w.precision) or (tp.get("tensor_tflops") or {}).get("fp16")
    if not tflops or not tp.get("dram_gbps"):
        return 0.0
    l2 = profile.get("l2_cache_bytes") or 0
    bandwidth = (tp.get("l2_gbps") or tp["dram_gbps"]) if w.working_set_bytes <= l2 else tp["dram_gbps"]
    batch_flops = w.flops_per_unit * w.batch / w.gpus
    seconds = max(batch_flops / (tflops * 1e12), batch_flops / w.intensity / (bandwidth * 1e9))
    return EFFICIENCY * w.batch / seconds


@dataclass
class _Piece:
    workload: Workload
    gpus: list[int]  # local GPU indexes
    work_id: str
    start_step: int
    restart_step: int | None
    rate: float  # units/s at full speed, the slowest of its GPUs (a tensor-parallel step waits)
    total: float = 0.0


def _h(*parts) -> int:
    return int.from_bytes(hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest(), "big")


class WorkSim:
    """The pieces of work of one simulated host and their counters, stepped with the history."""

    def __init__(self, machine, scenario: str, seed: int, host_index: int, steps: int):
        workloads = WORKLOADS[scenario]
        devices = machine.devices
        n = len(devices)
        self.machine = machine
        self.pieces: list[_Piece] = []
        j, w = 0, host_index
        while j < n:
            # Round-robin from the host's index, so that every workload lands on every model of a fleet.
            fits = [workloads[(w + k) % len(workloads)] for k in range(len(workloads))]
            wl = next((x for x in fits if x.gpus <= n - j), None)
            if wl is None:
                break
            slot = len(self.pieces)
            gpus = list(range(j, j + wl.gpus))
            rate = min(units_per_second(devices[g].profile, wl) for g in gpus)
            # Some work starts a few steps into the history (so the work's time is not the GPU's time),
            # and some server restarts once, two thirds in (its counter starts again from 0).
            start = (host_index + slot) % 3 * 6
            restart = steps * 2 // 3 if _h(seed, slot, "restart") % 3 == 0 else None
            self.pieces.append(
                _Piece(wl, gpus, f"{_h(seed, slot) % 90000 + 10000}", min(start, steps - 1), restart, rate)
            )
            j += wl.gpus
            w += 1

    def lines(self, k: int, step_s: float, t_ns: int, gpu_tags: list[dict[str, str]]) -> list[str]:
        """Line protocol of every piece of work at step `k` (its counter advanced by the step)."""
        from gpuagent.pipeline.metric import serialize

        out = []
        for p in self.pieces:
            if k < p.start_step:
                continue
            if p.restart_step is not None and k == p.restart_step:
                p.total = 0.0  # the server restarted: its counter starts again
            elif k > p.start_step:
                pace = 1.0
                for g in p.gpus:
                    s = self.machine.devices[g].state()
                    max_sm = self.machine.devices[g].clocks["max"]["sm"]
                    pace = min(pace, s.util / 100.0 * min(1.0, s.sm_clock / max_sm))
                p.total += p.rate * step_s * pace
            for g in p.gpus:
                tags = {
                    **gpu_tags[g],
                    "workload": p.workload.name,
                    "unit": p.workload.unit,
                    "source": p.workload.source,
                    "work_id": p.work_id,
                }
                fields = {"units_total": int(p.total), "gpus": len(p.gpus)}
                slices = mig_slices(self.machine.devices[g])
                if not slices:
                    out.append(serialize("gpu_work", tags, fields, t_ns))
                for mig_tags, share in slices:
                    # One server per MIG slice, doing the slice's share of the GPU's work; tagged and
                    # charged as the work collector does (plugins/work: mig_uuid, gpu_share).
                    out.append(
                        serialize(
                            "gpu_work",
                            {**tags, **mig_tags, "work_id": f"{p.work_id}/{mig_tags['gi_id']}"},
                            {**fields, "units_total": int(p.total * share), "gpu_share": share},
                            t_ns,
                        )
                    )
        return out


def mig_slices(device) -> list[tuple[dict[str, str], float]]:
    """A MIG-enabled GPU's devices: their tags (as plugins/mig names them) and their share of the
    GPU (compute slices / max_devices, as plugins/mig.shared_devices rounds it)."""
    total = (device.mig or {}).get("max_devices") if device.mig_enabled else None
    if not total:
        return []
    return [
        (
            {"gi_id": str(m.gi_id), "ci_id": str(m.ci_id), "mig_uuid": m.uuid.decode(), "mig_profile": m.profile},
            round(m.slices / total, 6),
        )
        for m in device.mig_devices
    ]
