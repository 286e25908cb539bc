"""Simulated work (gpuagent.sim.work): the `gpu_work` points `sim fleet --scenario inference|training`
writes beside the GPU readings. What the throughput model concludes is not tested; its points are."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from gpuagent.sim.fleet_backfill import plan_hosts, simulate_host
from gpuagent.sim.profile import BUILTIN_NAMES, load_profile
from gpuagent.sim.work import MEMORY_EFFICIENCY, WORKLOADS, gpus_needed, served, step, units_per_second
from tests.lineprotocol_parser import parse_line


class Point:
    def __init__(self, line: str):
        _, self.tags, self.fields, self.time_ns = parse_line(line)


SPECS = ["l40s:4", "h100-sxm:4", "a100-sxm4:4", "rtx4090:4"]
PROFILE_OF = {
    "NVIDIA L40S": "l40s",
    "NVIDIA H100 80GB HBM3": "h100-sxm",
    "NVIDIA A100-SXM4-80GB": "a100-sxm4",
    "NVIDIA GeForce RTX 4090": "rtx4090",
}
PROFILE_OF_NAME = {v: k for k, v in PROFILE_OF.items()}
STEPS = 60


def _work_points(scenario: str, collectors=("power",)):
    plans = plan_hosts(4, SPECS, 0, (STEPS - 1) * 10**10, 10, 2, scenario, tuple(collectors))
    points = []
    for plan in plans:
        for body in simulate_host(plan, None, keep=True):
            points += [Point(line) for line in body.splitlines() if line.startswith("gpu_work,")]
    return points


@pytest.mark.parametrize("scenario", ["inference", "training"])
def test_every_workload_runs_on_every_model_where_it_fits(scenario):
    points = _work_points(scenario)
    seen = defaultdict(set)
    pieces = defaultdict(set)
    for p in points:
        seen[p.tags["workload"]].add(p.tags["model"])
        pieces[(p.tags["host"], p.tags["work_id"])].add((p.tags["model"], p.tags["uuid"], p.tags["workload"]))
        assert {"host", "gpu", "uuid", "model", "pci_bus_id", "workload", "unit", "source", "work_id"} <= set(p.tags)
    assert set(seen) == {w.name for w in WORKLOADS[scenario]}
    by_name = {w.name: w for w in WORKLOADS[scenario]}
    for piece in pieces.values():  # on GPUs of one model, as many as hold the weights and cache
        (model,), (workload,) = {m for m, _, _ in piece}, {w for _, _, w in piece}
        assert len(piece) == gpus_needed(load_profile(PROFILE_OF[model]), by_name[workload]), piece
    for w in WORKLOADS[scenario]:
        on_one = {m for m, name in PROFILE_OF.items() if gpus_needed(load_profile(name), w) == 1}
        assert on_one <= seen[w.name], (w.name, seen[w.name])
    if scenario == "inference":  # 80.7 GB: two L40S, H100 or A100 hold it, two RTX 4090s (24 GB) do not
        assert seen["llama-3.1-70b"] == {"NVIDIA L40S", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"}


def test_intensity_follows_the_weights_data_type():
    fp8 = {w.name: w for w in WORKLOADS["inference"]}["llama-3.1-70b"]
    fp16 = served("llama-3.1-70b", "tokens_out", "vllm", 7.0e10, "fp16", 64, 1024, 327_680, "decode")
    assert fp8.precision == "fp8" and math.isclose(fp8.intensity, 2 * fp16.intensity, rel_tol=1e-12)
    assert math.isclose(fp16.memory_bytes, 2 * fp8.memory_bytes, rel_tol=1e-12)
    # 2 FLOP per weight per token; weights once and the batch's cache per step
    assert fp8.flops_per_unit == 2 * 7.0e10
    assert math.isclose(fp8.memory_bytes, 7.0e10 + 64 * 1024 * 327_680 / 2)
    h100 = load_profile("h100-sxm")
    assert gpus_needed(h100, fp8) == 2 and gpus_needed(load_profile("rtx4090"), fp8) == 4


def test_decode_is_held_by_the_dram_not_the_sm_clock():
    for name in ("l40s", "h100-sxm", "a100-sxm4", "rtx4090"):
        p = load_profile(name)
        decode, prefill = (w for w in WORKLOADS["inference"] if w.name in ("llama-3.1-8b", "bert-base"))
        assert units_per_second(p, decode, clock_ratio=0.7) == units_per_second(p, decode)
        s = step(p, decode)
        dram_gbps = p["throughput"]["dram_gbps"]
        rate = decode.batch * dram_gbps * 1e9 * MEMORY_EFFICIENCY / decode.memory_bytes
        assert math.isclose(units_per_second(p, decode), rate, rel_tol=1e-12) and s.dram_share > s.tensor_share
        assert math.isclose(units_per_second(p, prefill, clock_ratio=0.7), 0.7 * units_per_second(p, prefill))


def test_the_gpu_readings_follow_the_work():
    """Each GPU's NVML and GPM readings as its work's step says (gpuagent.sim.load.LoadModel.run): a
    decode keeps the GPU busy with DRAM at the step's share of the busy time and few tensor cycles;
    the encoder's prefill the other way round."""
    plans = plan_hosts(4, SPECS, 0, (STEPS - 1) * 10**10, 10, 2, "inference", ("memory",))
    share = defaultdict(lambda: defaultdict(float))
    work_of = {}
    for plan in plans:
        for body in simulate_host(plan, None, keep=True):
            for line in body.splitlines():
                p = Point(line)
                if line.startswith("gpu_work,"):
                    work_of[(p.tags["host"], p.tags["uuid"])] = (p.tags["model"], p.tags["workload"], p.fields["gpus"])
                elif line.startswith("gpu_memory,") and "gpu_util_pct" in p.fields:
                    s = share[(p.tags["host"], p.tags["uuid"])]
                    for f in ("gpu_util_pct", "memory_util_pct", "dram_bw_util_pct", "tensor_active_pct"):
                        s[f] += p.fields.get(f) or 0.0
                    s["n"] += 1
    by_name = {w.name: w for w in WORKLOADS["inference"]}
    assert len(work_of) == 16
    for gpu, (model, workload, gpus) in work_of.items():
        s, w = share[gpu], by_name[workload]
        expected = step(load_profile(PROFILE_OF[model]), w, gpus)
        busy = s["gpu_util_pct"]
        # NVML memory busy time: the DRAM share of the busy time, ±10 % (the model's wobble)
        assert abs(s["memory_util_pct"] / busy / expected.dram_share - 1) <= 0.1, (gpu, workload)
        if w.phase == "decode":
            assert busy / s["n"] > 75 and expected.dram_share == MEMORY_EFFICIENCY
        if model == "NVIDIA H100 80GB HBM3":  # GPM: bandwidth and tensor activity, also per busy time
            assert abs(s["dram_bw_util_pct"] / busy / expected.dram_share - 1) <= 0.1, (gpu, workload)
            assert abs(s["tensor_active_pct"] / busy / expected.tensor_share - 1) <= 0.05, (gpu, workload)


def test_counters_grow_except_at_a_restart_and_span_their_gpus():
    points = _work_points("inference")
    series = defaultdict(list)
    for p in points:
        series[(p.tags["host"], p.tags["uuid"], p.tags["work_id"])].append(p)
    drops = 0
    for rows in series.values():
        rows.sort(key=lambda p: p.time_ns)
        values = [p.fields["units_total"] for p in rows]
        drops += sum(b < a for a, b in zip(values, values[1:], strict=False))
        assert values[-1] > 0
    assert drops > 0  # some server restarts in the history
    # A tensor-parallel piece of work: one counter, the same on each of its GPUs at each step.
    by_work = defaultdict(lambda: defaultdict(set))
    for p in points:
        by_work[(p.tags["host"], p.tags["work_id"])][p.time_ns].add((p.tags["uuid"], p.fields["units_total"]))
    spans = {p.fields["gpus"] for p in points}
    assert spans == {1, 2}
    for steps in by_work.values():
        for at in steps.values():
            assert len({v for _, v in at}) == 1


# NVIDIA's datasheet figures: dense FP16 and FP8 tensor TFLOPS, peak DRAM GB/s.
PUBLISHED = {
    "l40s": (362, 733, 864),
    "rtx4090": (165, 330, 1008),
    "a100-sxm4": (312, None, 2039),
    "h100-pcie": (756, 1513, 2039),
    "h100-sxm": (989, 1979, 3352),
    "h200": (989, 1979, 4800),
}


def test_every_builtin_profile_has_its_published_figures():
    for name in BUILTIN_NAMES:
        p = load_profile(name)
        tp = p["throughput"]
        fp16, fp8, dram = PUBLISHED[name.removesuffix("-mig").removesuffix("-vgpu")]
        assert (tp["tensor_tflops"]["fp16"], tp["tensor_tflops"]["fp8"], tp["dram_gbps"]) == (fp16, fp8, dram)
        assert "NVIDIA" in tp["source"] and "assumption" in tp["source"]
        for w in (w for ws in WORKLOADS.values() for w in ws):
            assert units_per_second(p, w) > 0


def test_docs_list_every_workload():
    text = (Path(__file__).resolve().parents[2] / "docs" / "simulator.md").read_text()
    for w in (w for ws in WORKLOADS.values() for w in ws):
        assert f"`{w.name}`" in text
    for name in ("l40s", "rtx4090", "a100-sxm4", "h100-pcie", "h100-sxm", "h200"):
        tp = json.loads(
            (Path(__file__).resolve().parents[2] / "agent" / "sim" / "profiles" / f"{name}.json").read_text()
        )["throughput"]
        assert f"| `{name}` | {tp['tensor_tflops']['fp16']} / " in text and f"| {tp['l2_gbps']} |" in text


@pytest.mark.parametrize(
    "spec", ["l40s:1,h100-sxm:1,a100-sxm4:1,rtx4090:1", "l40s:2,h100-sxm:2,a100-sxm4:2,rtx4090:2", "l40s:3,rtx4090:5"]
)
def test_any_three_hosts_of_a_spec_run_each_workload_on_each_model_that_holds_it(spec):
    counts = {PROFILE_OF_NAME[name]: int(n) for name, n in (part.split(":") for part in spec.split(","))}
    for first in range(3):
        plans = plan_hosts(first + 3, [spec], 0, 2 * 10**10, 10, 2, "inference", ("power",))[first:]
        seen = defaultdict(set)
        for plan in plans:
            for body in simulate_host(plan, None, keep=True):
                for line in body.splitlines():
                    if line.startswith("gpu_work,"):
                        p = Point(line)
                        seen[p.tags["workload"]].add(p.tags["model"])
        for w in WORKLOADS["inference"]:
            fits = {m for m, n in counts.items() if (gpus_needed(load_profile(PROFILE_OF[m]), w) or 99) <= n}
            assert seen[w.name] == fits, (spec, first, w.name)
