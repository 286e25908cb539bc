"""Simulated work: `gpu_work` points beside a simulated fleet's GPU readings (`sim fleet --scenario`).

A roofline throughput model (docs/simulator.md). An inference workload is a model served: its
weights (parameters × the bytes of their data type), a batch, the tokens each sequence holds in
its KV cache (decode) or brings (prefill), and the cache's bytes per token; from them one engine
step's math (2 FLOP per weight per token) and bytes (the weights read once, the batch's cache),
so its arithmetic intensity follows the data type (FP8 weights and cache: half the bytes of FP16,
twice the FLOP per byte). A training job states its math, intensity and working set. Per profile
the published dense tensor rate and DRAM bandwidth (the profile's `throughput` block), its L2 and
memory size. A step on N GPUs (tensor parallel) takes

    max(math / N / (peak rate × SM clock / max × COMPUTE_EFFICIENCY), bytes / N / (bandwidth × MEMORY_EFFICIENCY))

the bandwidth being the L2's when the step's bytes fit in the L2, else the DRAM's: a memory-bound
decode is held by the DRAM, not the SM clock. A workload runs only on GPUs of one model, on the
fewest (1, 2, 4 or 8) whose memory (90 %, vLLM's default share) holds its weights and cache.

The readings of a GPU follow its work (gpuagent.sim.load.LoadModel.run): the DRAM and tensor
shares of its busy time are those of the step (memory-bound: DRAM at MEMORY_EFFICIENCY, tensors
at the math's share of the step; compute-bound the other way round), a decode server keeps the
GPU busy, a compute-bound one draws near its power limit.

It exists so that `gpuagent compare` can be tried on work and tested against the raw points;
nothing asserts what the model concludes about cards, only that it follows what it says here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gpuagent.schema.measurements import GPU_WORK

# Share of the roofline a real kernel mix reaches: a memory-bound GEMV streams the DRAM near its
# peak, a compute-bound GEMM reaches less of the tensor peak (one figure each for every card).
MEMORY_EFFICIENCY = 0.8
COMPUTE_EFFICIENCY = 0.6
MEMORY_USABLE = 0.9  # share of a GPU's memory a server may fill (vLLM's gpu_memory_utilization default)
BYTES = {"fp16": 2, "bf16": 2, "fp8": 1}
TP_SIZES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Workload:
    """A training job as it states itself: math per unit, FLOP per byte, the bytes a batch touches."""

    name: str
    unit: str
    source: str
    flops_per_unit: float  # math per unit of work (FLOP)
    intensity: float  # FLOP per byte moved to or from memory
    batch: int  # units per batch
    working_set_bytes: int  # bytes a batch touches repeatedly (weights, activations)
    precision: str = "fp16"
    phase: str = "train"

    @property
    def memory_bytes(self) -> float:
        """The bytes the work holds in GPU memory."""
        return float(self.working_set_bytes)


@dataclass(frozen=True)
class Served(Workload):
    """A model served: everything from its weights, data type, batch and cache (see the module)."""

    params: float = 0.0  # weights
    tokens: int = 0  # per sequence: the KV cache's tokens (decode) or the request's tokens (prefill)
    cache_bytes_per_token: float = 0.0  # KV cache (or activations) per token at 2 bytes per value

    @property
    def step_units(self) -> int:
        return self.batch  # decode: a token per sequence; prefill: a request per sequence

    @property
    def step_flops(self) -> float:
        per_token = 2 * self.params
        return per_token * self.batch * (self.tokens if self.phase == "prefill" else 1)

    @property
    def step_bytes(self) -> float:
        b = BYTES[self.precision]
        return self.params * b + self.batch * self.tokens * self.cache_bytes_per_token * b / 2

    @property
    def memory_bytes(self) -> float:
        return self.step_bytes  # the weights and the batch's cache, all resident


def served(name, unit, source, params, precision, batch, tokens, cache_bytes_per_token, phase) -> Served:
    """A Served whose stated math, intensity and working set are derived from its physics."""
    w = Served(name, unit, source, 0.0, 0.0, batch, 0, precision, phase, params, tokens, cache_bytes_per_token)
    object.__setattr__(w, "flops_per_unit", w.step_flops / w.step_units)
    object.__setattr__(w, "intensity", w.step_flops / w.step_bytes)
    object.__setattr__(w, "working_set_bytes", int(w.step_bytes))
    return w


# llama-3.1: 32 layers × 8 KV heads × 128 × (K, V) × 2 bytes = 131,072 B per token (8B); 80 layers: 327,680 (70B).
WORKLOADS = {
    "inference": (
        # Decoding an 8B model in FP16, 32 sequences of 1,024 cached tokens each.
        served("llama-3.1-8b", "tokens_out", "vllm", 8.0e9, "fp16", 32, 1024, 131_072, "decode"),
        # A 70B model with FP8 weights and KV cache (vLLM --quantization fp8 --kv-cache-dtype fp8): 80.7 GB.
        served("llama-3.1-70b", "tokens_out", "vllm", 7.0e10, "fp8", 64, 1024, 327_680, "decode"),
        # An encoder, all prefill: 32 requests of 128 tokens; activations ~12 layers × 768 × 4 × 2 B per token.
        served("bert-base", "requests", "triton", 1.1e8, "fp16", 32, 128, 73_728, "prefill"),
    ),
    "training": (
        Workload("resnet50", "samples", "job", 2.5e10, 80.0, 256, 2_000_000_000),
        Workload("gpt-1.3b", "samples", "job", 1.6e13, 150.0, 16, 30_000_000_000),
        Workload("bert-large-finetune", "steps", "job", 4.0e13, 40.0, 1, 80_000_000),
    ),
}


def gpus_needed(profile: dict, w: Workload) -> int | None:
    """The fewest GPUs of the profile (1, 2, 4, 8) whose usable memory holds the work; None: not 8."""
    total = ((profile.get("memory") or {}).get("total_mib") or 0) * 2**20 * MEMORY_USABLE
    return next((n for n in TP_SIZES if total and w.memory_bytes <= n * total), None)


@dataclass(frozen=True)
class Step:
    """One engine step on one GPU of a piece of work on `gpus` of them (seconds at full clock)."""

    compute_s: float  # the step's math at the tensor peak
    memory_s: float  # its bytes at the bandwidth
    seconds: float  # what it takes: max(compute_s / COMPUTE_EFFICIENCY, memory_s / MEMORY_EFFICIENCY)
    in_l2: bool

    @property
    def dram_share(self) -> float:
        """Share of the step the DRAM moves data at its peak (from the L2: none counted)."""
        return 0.0 if self.in_l2 else self.memory_s / self.seconds

    @property
    def tensor_share(self) -> float:
        return self.compute_s / self.seconds


def step(profile: dict, w: Workload, gpus: int = 1, clock_ratio: float = 1.0) -> Step | None:
    tp = profile.get("throughput") or {}
    tflops = (tp.get("tensor_tflops") or {}).get(w.precision) or (tp.get("tensor_tflops") or {}).get("fp16")
    if not tflops or not tp.get("dram_gbps"):
        return None
    flops = w.flops_per_unit * w.batch / gpus
    nbytes = flops / w.intensity
    in_l2 = nbytes <= (profile.get("l2_cache_bytes") or 0)
    bandwidth = (tp.get("l2_gbps") or tp["dram_gbps"]) if in_l2 else tp["dram_gbps"]
    compute_s = flops / (tflops * 1e12 * max(clock_ratio, 1e-3))
    memory_s = nbytes / (bandwidth * 1e9)
    return Step(compute_s, memory_s, max(compute_s / COMPUTE_EFFICIENCY, memory_s / MEMORY_EFFICIENCY), in_l2)


def units_per_second(profile: dict, w: Workload, gpus: int | None = None, clock_ratio: float = 1.0) -> float:
    """The model's full-busy rate of a piece of work on `gpus` GPUs of the profile (the fewest that
    hold it when not given; 0 where none do), at `clock_ratio` of the max SM clock (units/s)."""
    n = gpus or gpus_needed(profile, w)
    s = step(profile, w, n, clock_ratio) if n else None
    return w.batch / s.seconds if s else 0.0


@dataclass
class _Piece:
    workload: Workload
    gpus: list[int]  # local GPU indexes, all of one model
    work_id: str
    start_step: int
    restart_step: int | None
    total: float = 0.0


def _h(*parts) -> int:
    return int.from_bytes(hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest(), "big")


def place(models: list[str], profiles: dict[str, dict], workloads, host_index: int) -> list[tuple[Workload, list[int]]]:
    """[(workload, local GPU indexes)]: per model of the host (its GPUs in index order), each workload
    once where it fits in the GPUs left (in turn from the host's index, so hosts of one model start on
    different ones), then the GPUs left take the workloads that fit on one, round-robin."""
    out = []
    by_model: dict[str, list[int]] = {}
    for i, m in enumerate(models):
        by_model.setdefault(m, []).append(i)
    for k, (model, free) in enumerate(by_model.items()):
        need = {w.name: gpus_needed(profiles[model], w) for w in workloads}
        order = [workloads[(host_index + k + j) % len(workloads)] for j in range(len(workloads))]
        free = list(free)
        for w in order:
            n = need[w.name]
            if n and n <= len(free):
                out.append((w, free[:n]))
                free = free[n:]
        singles = [w for w in order if need[w.name] == 1]
        for j, g in enumerate(free):
            if singles:
                out.append((singles[j % len(singles)], [g]))
    return out


class WorkSim:
    """The pieces of work of one simulated host and their counters, stepped with the history."""

    def __init__(self, machine, scenario: str, seed: int, host_index: int, steps: int):
        workloads = WORKLOADS[scenario]
        devices = machine.devices
        self.machine = machine
        self.pieces: list[_Piece] = []
        models = [d.name.decode() if isinstance(d.name, bytes) else str(d.name) for d in devices]
        profiles = {m: devices[i].profile for i, m in enumerate(models)}
        for slot, (wl, gpus) in enumerate(place(models, profiles, workloads, host_index)):
            # Some work starts a few steps into the history (so the work's time is not the GPU's time),
            # and some server restarts once, two thirds in (its counter starts again from 0).
            start = (host_index + slot) % 3 * 6
            restart = steps * 2 // 3 if _h(seed, slot, "restart") % 3 == 0 else None
            self.pieces.append(_Piece(wl, gpus, f"{_h(seed, slot) % 90000 + 10000}", min(start, steps - 1), restart))
            at_full = step(devices[gpus[0]].profile, wl, len(gpus))
            if at_full is None or wl.phase == "train":
                continue  # a training job keeps the training scenario's readings
            total = devices[gpus[0]].profile["memory"]["total_mib"] * 2**20
            # vLLM takes its share of the memory up front; another server holds what it needs
            held = MEMORY_USABLE if wl.source == "vllm" else wl.memory_bytes / len(gpus) / total
            for g in gpus:  # the GPU's readings follow the work's step (gpuagent.sim.load)
                devices[g].model.run(wl.phase, at_full.dram_share, at_full.tensor_share, held)

    def rate(self, p: _Piece) -> float:
        """The piece's units/s now: each GPU's rate at its SM clock × its busy share; the slowest sets it."""
        out = None
        for g in p.gpus:
            dev = self.machine.devices[g]
            s = dev.state()
            r = units_per_second(dev.profile, p.workload, len(p.gpus), s.sm_clock / dev.clocks["max"]["sm"])
            out = r * s.util / 100.0 if out is None else min(out, r * s.util / 100.0)
        return out or 0.0

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
                p.total += self.rate(p) * step_s
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
                    out.append(serialize(GPU_WORK, tags, fields, t_ns))
                for mig_tags, share in slices:
                    # One server per MIG slice, doing the slice's share of the GPU's work; tagged and
                    # charged as the work collector does (plugins/work: mig_uuid, gpu_share).
                    out.append(
                        serialize(
                            GPU_WORK,
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
