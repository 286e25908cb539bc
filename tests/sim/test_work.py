"""Simulated work (gpuagent.sim.work): the `gpu_work` points `sim fleet --scenario inference|training`
writes beside the GPU readings. What the throughput model concludes is not tested; its points are."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from gpuagent.compare.fleet import DEFAULT_COLLECTORS, plan_hosts, simulate_host
from gpuagent.sim.profile import BUILTIN_NAMES, load_profile
from gpuagent.sim.work import WORKLOADS, units_per_second
from tests.lineprotocol_parser import parse_line


class Point:
    def __init__(self, line: str):
        _, self.tags, self.fields, self.time_ns = parse_line(line)


SPECS = ["l40s:4", "h100-sxm:4", "a100-sxm4:4", "rtx4090:4"]
STEPS = 60


def _work_points(scenario: str, collectors=("power",)):
    plans = plan_hosts(4, SPECS, 0, (STEPS - 1) * 10**10, 10, 2, scenario, tuple(collectors))
    points = []
    for plan in plans:
        for body in simulate_host(plan, None, keep=True):
            points += [Point(line) for line in body.splitlines() if line.startswith("gpu_work,")]
    return points


@pytest.mark.parametrize("scenario", ["inference", "training"])
def test_every_workload_runs_on_every_model(scenario):
    points = _work_points(scenario)
    seen = defaultdict(set)
    for p in points:
        seen[p.tags["workload"]].add(p.tags["model"])
        assert {"host", "gpu", "uuid", "model", "pci_bus_id", "workload", "unit", "source", "work_id"} <= set(p.tags)
    assert set(seen) == {w.name for w in WORKLOADS[scenario]}
    assert all(len(models) == 4 for models in seen.values()), seen


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


def test_work_does_not_change_the_gpu_readings():
    plan = plan_hosts(1, ["l40s:2"], 0, 30 * 10**10, 10, 1, "inference", DEFAULT_COLLECTORS)[0]
    with_work = [
        line
        for body in simulate_host(plan, None, keep=True)
        for line in body.splitlines()
        if not line.startswith("gpu_work,")
    ]
    plan.scenario = "inference"
    from gpuagent.compare import fleet

    original = fleet._work_sim
    fleet._work_sim = lambda machine, plan: None
    try:
        without = [line for body in simulate_host(plan, None, keep=True) for line in body.splitlines()]
    finally:
        fleet._work_sim = original
    assert with_work == without


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
