"""The one NVML error policy (gpuagent.gpus.gpu): lost, permanent, transient; counted, logged once."""

from __future__ import annotations

import json
import logging

import pynvml
import pytest

from gpuagent.commands import facts
from gpuagent.gpus.gpu import NvmlErrors, current_collector
from gpuagent.gpus.nvml_read import Field, FieldReader
from gpuagent.plugins.clocks import ClocksCollector
from gpuagent.plugins.power import AVERAGED_FIELDS as POWER_FIELDS
from gpuagent.testing import make_collector


def parse(stdout: str) -> list[tuple[str, dict[str, str], str]]:
    """(measurement, tags, fields text) of each line-protocol line (tags without escapes)."""
    out = []
    for line in stdout.splitlines():
        head, _, rest = line.replace("\\ ", "_").partition(" ")
        measurement, *tags = head.split(",")
        out.append((measurement, dict(t.split("=", 1) for t in tags), rest))
    return out


# -- the done-when commands ----------------------------------------------------------------


def test_deprecated_applications_clocks_cost_only_their_fields(invoke):
    result = invoke("run", "--once", "--test", "--simulate", "l40s:2@force=nvmlDeviceGetApplicationsClock:DEPRECATED")
    assert result.exit_code == 0, result.output
    clocks = [(tags, fields) for m, tags, fields in parse(result.stdout) if m == "gpu_clocks"]
    assert sorted(tags["gpu"] for tags, _ in clocks) == ["0", "1"]
    for _, fields in clocks:
        assert "sm_clock_mhz=" in fields and "max_sm_clock_mhz=" in fields and "memory_clock_mhz=" in fields
        assert "applications_graphics_clock_mhz" not in fields and "applications_memory_clock_mhz" not in fields
    # --test folds the per-call series into the collector's line (agent/service/measurement.md).
    counted = [
        fields for m, tags, fields in parse(result.stdout) if m == "gpuagent" and tags.get("collector") == "clocks"
    ]
    # Refused for good: asked once per GPU and clock type, counted as such.
    assert len(counted) == 1 and 'nvml_errors="nvmlDeviceGetApplicationsClock:DEPRECATED(4)"' in counted[0]
    assert "nvml_errors_total=4i" in counted[0]


@pytest.mark.parametrize("symbol", ["nvmlDeviceGetUUID", "nvmlDeviceGetHandleByIndex_v2"])
@pytest.mark.slow
def test_a_gpu_that_cannot_be_opened_is_reported_and_the_others_run(invoke, symbol):
    result = invoke("run", "--once", "--test", "--simulate", f"h100-sxm:3@force={symbol}:NO_PERMISSION:1")
    assert result.exit_code == 0, result.output
    lines = parse(result.stdout)
    power = sorted(tags["gpu"] for m, tags, _ in lines if m == "gpu_power")
    assert power == ["0", "2"]
    unavailable = [(tags, f) for m, tags, f in lines if m == "gpuagent" and tags.get("gpu") == "1"]
    assert len(unavailable) == 1
    assert "gpu_available=false" in unavailable[0][1]
    assert symbol.removesuffix("_v2") in unavailable[0][1] and "NO_PERMISSION" in unavailable[0][1]
    agent = [f for m, tags, f in lines if m == "gpuagent" and set(tags) == {"host"}]
    assert "gpus=2i" in agent[0] and "gpus_unavailable=1i" in agent[0]
    assert "Traceback" not in result.output


def test_inspect_shows_the_unavailable_gpu(invoke):
    result = invoke("inspect", "--json", "--simulate", "h100-sxm:3@force=nvmlDeviceGetUUID:NO_PERMISSION:1")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    import jsonschema

    jsonschema.validate(doc, facts.schema())
    assert doc["host"]["gpu_count"] == 3
    by_index = {g["index"]: g for g in doc["gpus"]}
    assert by_index[1]["available"] is False and "nvmlDeviceGetUUID" in by_index[1]["unavailable_reason"]
    assert by_index[0]["available"] is True and by_index[0]["gpu_memory"]["fb_total_bytes"]
    human = invoke("inspect", "--simulate", "h100-sxm:3@force=nvmlDeviceGetUUID:NO_PERMISSION:1")
    assert "UNAVAILABLE" in human.stdout and "NO_PERMISSION" in human.stdout


def test_a_refused_init_is_one_line(invoke):
    result = invoke("run", "--once", "--test", "--simulate", "l40s:1@force=nvmlInitWithFlags:DRIVER_NOT_LOADED")
    assert result.exit_code != 0
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


# -- the policy, call by call ----------------------------------------------------------------


def calls(machine, gpu: int, symbol: str) -> int:
    return machine.calls_by_gpu[gpu][symbol]


@pytest.mark.parametrize("code", ["NOT_SUPPORTED", "DEPRECATED", "FUNCTION_NOT_FOUND", "NO_PERMISSION"])
def test_a_permanent_refusal_is_not_asked_again(simulated_fleet, code):
    machine = simulated_fleet("l40s:1")
    machine.force("nvmlDeviceGetPowerUsage", code)
    gpu = machine.gpus[0]
    assert [gpu.query(pynvml.nvmlDeviceGetPowerUsage) for _ in range(3)] == [None] * 3
    assert gpu.query(pynvml.nvmlDeviceGetPowerUsage) is None
    assert calls(machine, 0, "nvmlDeviceGetPowerUsage") == 1
    assert gpu.refused(pynvml.nvmlDeviceGetPowerUsage)
    ((_, call, number, count, gpus),) = gpu.errors.snapshot()
    assert (call, number, count, gpus) == ("nvmlDeviceGetPowerUsage", getattr(pynvml, f"NVML_ERROR_{code}"), 1, 1)


@pytest.mark.parametrize("code", ["TIMEOUT", "UNKNOWN", "NO_DATA", "INSUFFICIENT_RESOURCES", "INVALID_ARGUMENT", "999"])
def test_a_transient_refusal_is_asked_again_next_time(simulated_fleet, code):
    machine = simulated_fleet("l40s:1")
    machine.force("nvmlDeviceGetPowerUsage", code)
    gpu = machine.gpus[0]
    assert gpu.query(pynvml.nvmlDeviceGetPowerUsage) is None
    assert gpu.query(pynvml.nvmlDeviceGetPowerUsage) is None
    assert calls(machine, 0, "nvmlDeviceGetPowerUsage") == 2
    machine.clear_forced()
    assert gpu.query(pynvml.nvmlDeviceGetPowerUsage) > 0  # answers again once the driver does
    assert gpu.errors.snapshot()[0][3] == 2


def test_not_found_is_an_answer_not_a_refusal(simulated_fleet):
    machine = simulated_fleet("l40s:1")
    machine.force("nvmlDeviceGetPowerUsage", "NOT_FOUND")
    gpu = machine.gpus[0]
    assert gpu.query(pynvml.nvmlDeviceGetPowerUsage) is None
    assert gpu.query(pynvml.nvmlDeviceGetPowerUsage) is None
    assert calls(machine, 0, "nvmlDeviceGetPowerUsage") == 2
    assert gpu.errors.snapshot() == []


def test_lost_gpu_takes_the_lost_path(simulated_fleet):
    from gpuagent.gpus.gpu import GpuLost

    machine = simulated_fleet("l40s:2")
    machine.force("nvmlDeviceGetPowerUsage", "GPU_IS_LOST", gpu=1)
    with pytest.raises(GpuLost):
        machine.gpus[1].query(pynvml.nvmlDeviceGetPowerUsage)
    assert machine.gpus[1].lost and not machine.gpus[0].lost
    assert machine.gpus[0].query(pynvml.nvmlDeviceGetPowerUsage) > 0


def test_refusals_are_logged_once_per_gpu_call_and_code(simulated_fleet, caplog):
    machine = simulated_fleet("l40s:2")
    machine.force("nvmlDeviceGetPowerUsage", "UNKNOWN")
    machine.force("nvmlDeviceGetFanSpeed", "NO_PERMISSION")
    clocks = make_collector(machine, ClocksCollector)
    with caplog.at_level(logging.DEBUG, logger="gpuagent.gpus.gpu"):
        for _ in range(3):
            for gpu in machine.gpus:
                gpu.query(pynvml.nvmlDeviceGetPowerUsage)
                gpu.query(pynvml.nvmlDeviceGetFanSpeed)
    logged = [r.getMessage() for r in caplog.records if r.name == "gpuagent.gpus.gpu"]
    assert len(logged) == 4, logged  # 2 GPUs x 2 (call, code)
    assert sum("nvmlDeviceGetPowerUsage" in m for m in logged) == 2
    assert clocks  # the collector machinery plays no part in logging


def test_refusals_are_counted_under_the_running_collector():
    errors = NvmlErrors()
    token = current_collector.set("clocks")
    try:
        errors.add("nvmlDeviceGetClockInfo", pynvml.NVML_ERROR_TIMEOUT, 0)
        errors.add("nvmlDeviceGetClockInfo", pynvml.NVML_ERROR_TIMEOUT, 1)
    finally:
        current_collector.reset(token)
    errors.add("nvmlSystemGetDriverVersion", pynvml.NVML_ERROR_NO_PERMISSION, None)
    rows = {(t["collector"], t["nvml_call"], t["nvml_error"]): f for t, f in errors.points_fields()}
    assert rows[("clocks", "nvmlDeviceGetClockInfo", "TIMEOUT")] == {
        "nvml_errors_total": 2,
        "nvml_error_code": pynvml.NVML_ERROR_TIMEOUT,
        "nvml_error_gpus": 2,
        "nvml_error_permanent": False,
    }
    assert ("agent", "nvmlSystemGetDriverVersion", "NO_PERMISSION") in rows


def test_static_facts_are_not_cached_across_a_transient_refusal(simulated_fleet):
    machine = simulated_fleet("l40s:1")
    gpu = machine.gpus[0]
    machine.force("nvmlDeviceGetMaxClockInfo", "TIMEOUT")
    assert gpu.static("max_sm", pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM) is None
    machine.clear_forced()
    assert gpu.static("max_sm", pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM) > 0
    machine.force("nvmlDeviceGetMaxClockInfo", "TIMEOUT")
    assert gpu.static("max_sm", pynvml.nvmlDeviceGetMaxClockInfo, pynvml.NVML_CLOCK_SM) > 0  # cached now


# -- field-value batches: the policy per entry ------------------------------------------------


def test_each_field_value_entry_follows_the_policy(simulated_fleet):
    machine = simulated_fleet("l40s:1")
    gpu = machine.gpus[0]
    unknown_field = 0xFFF0  # no driver knows this id: the entry is refused, the others answer
    reader = FieldReader(
        {"energy_mj": Field(pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION), "mystery": Field(unknown_field)}
    )
    first = reader.read(gpu)
    assert first["energy_mj"] > 0 and "mystery" not in first
    counted = [row for row in gpu.errors.snapshot() if row[1].startswith("nvmlDeviceGetFieldValues/")]
    assert counted, gpu.errors.snapshot()
    assert reader.read(gpu)["energy_mj"] > 0


def test_a_transient_batch_error_falls_back_this_cycle_and_asks_again(simulated_fleet):
    machine = simulated_fleet("l40s:1")
    gpu = machine.gpus[0]
    machine.force("nvmlDeviceGetFieldValues", "UNKNOWN")
    readings = POWER_FIELDS.read(gpu)
    assert readings["energy_mj"] > 0  # from nvmlDeviceGetTotalEnergyConsumption this cycle
    machine.clear_forced()
    before = calls(machine, 0, "nvmlDeviceGetFieldValues")
    assert POWER_FIELDS.read(gpu)["energy_mj"] > 0
    assert calls(machine, 0, "nvmlDeviceGetFieldValues") == before + 1  # the batch is asked again


def test_a_permanently_refused_batch_is_not_asked_again(simulated_fleet):
    machine = simulated_fleet("l40s:1")
    gpu = machine.gpus[0]
    machine.force("nvmlDeviceGetFieldValues", "NOT_SUPPORTED")
    assert POWER_FIELDS.read(gpu)["energy_mj"] > 0
    assert POWER_FIELDS.read(gpu)["energy_mj"] > 0
    assert calls(machine, 0, "nvmlDeviceGetFieldValues") == 1


# -- sim record with refused calls --------------------------------------------------------------


def test_sim_record_survives_deprecated_and_refused_calls():
    from gpuagent import sim
    from gpuagent.sim.clock import ManualClock
    from gpuagent.sim.record import record

    spec = (
        "l40s-vgpu:1@force=nvmlDeviceGetApplicationsClock:DEPRECATED"
        "@force=nvmlDeviceGetDefaultApplicationsClock:DEPRECATED"
        "@force=nvmlDeviceGetBAR1MemoryInfo:NO_PERMISSION"
        "@force=nvmlVgpuInstanceGetVmID:NO_PERMISSION"
        "@force=nvmlDeviceGetFanSpeed:FUNCTION_NOT_FOUND"
    )
    sim.install(spec, clock=ManualClock())
    try:
        profile = record(0)
    finally:
        sim.uninstall()
    assert profile["clocks_mhz"]["applications"] is None
    assert profile["errors"]["nvmlDeviceGetApplicationsClock"] == "DEPRECATED"
    assert profile["errors"]["nvmlDeviceGetFanSpeed"] == "FUNCTION_NOT_FOUND"
    assert profile["virtualization"]["vgpu_instances"]  # recorded, without their VM ids
    assert profile["memory"]["total_mib"] > 0
