"""Per-process utilisation, accounting and the MIG fallback, on the simulator."""

from __future__ import annotations

import functools
import os

import pytest

from gpuagent.plugins.processes import ProcessesCollector
from gpuagent.testing import make_collector

collector = functools.partial(make_collector, cls=ProcessesCollector)


def test_utilisation_per_process_adds_up_to_the_gpu(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s", scenario="inference")  # two processes, 60 % / 40 % memory
    sim_clock.advance(30)
    collector(machine).collect(recording_accumulator)
    points = recording_accumulator.by_measurement("gpu_process")
    assert len(points) == 2
    util = machine.devices[0].state().util
    assert sum(p.fields["sm_util_pct"] for p in points) == pytest.approx(util, abs=1)
    first, second = sorted(points, key=lambda p: -p.fields["used_memory_bytes"])
    assert first.fields["sm_util_pct"] >= second.fields["sm_util_pct"]
    for p in points:
        assert p.fields["enc_util_pct"] == 0 and p.fields["dec_util_pct"] == 0
        assert 0 <= p.fields["mem_util_pct"] <= 100


def test_no_new_sample_is_not_a_refusal(simulated_fleet, sim_clock, nvml_calls, recording_accumulator):
    """NOT_FOUND (nothing newer than the last sample) leaves the fields out this cycle only."""
    machine = simulated_fleet("l40s", scenario="training")
    processes = collector(machine)
    sim_clock.advance(10)
    processes.collect(recording_accumulator)
    processes.collect(recording_accumulator)  # same tick: no new sample
    sim_clock.advance(10)
    processes.collect(recording_accumulator)
    has = ["sm_util_pct" in p.fields for p in recording_accumulator.by_measurement("gpu_process")]
    assert has == [True, False, True]


def test_older_driver_falls_back_to_process_utilization(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet(
        "l40s@force=nvmlDeviceGetProcessesUtilizationInfo:FUNCTION_NOT_FOUND", scenario="training"
    )
    sim_clock.advance(10)
    collector(machine).collect(recording_accumulator)
    (point,) = recording_accumulator.by_measurement("gpu_process")
    assert point.fields["sm_util_pct"] > 50
    assert machine.calls["nvmlDeviceGetProcessUtilization"] == 2  # size query + fill


def test_accounting_stats_only_while_accounting_is_on(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s", scenario="training")
    processes = collector(machine)
    sim_clock.advance(100)
    processes.collect(recording_accumulator)
    machine.devices[0].accounting = True  # `nvidia-smi -am 1` at run time
    sim_clock.advance(100)
    processes.collect(recording_accumulator)
    off, on = recording_accumulator.by_measurement("gpu_process")
    assert not any(k.startswith("acct_") for k in off.fields)
    assert on.fields["acct_run_time_s"] == pytest.approx(200)
    assert on.fields["acct_max_memory_bytes"] == on.fields["used_memory_bytes"]
    assert 80 <= on.fields["acct_gpu_util_pct"] <= 100


def test_unprivileged_mig_gpu_lists_processes_per_mig_device(simulated_fleet, sim_clock, recording_accumulator):
    """The parent's list refused (NO_PERMISSION, as for an unprivileged agent): each MIG
    device handle gives its own instance's processes."""
    pid = os.getpid()
    machine = simulated_fleet(
        f"h100-sxm-mig@force=nvmlDeviceGetComputeRunningProcesses_v3:NO_PERMISSION:0"
        f"@force=nvmlDeviceGetGraphicsRunningProcesses_v3:NO_PERMISSION:0@proc=0:{pid}@proc=0:{pid}",
        scenario="training",
    )
    processes = collector(machine)
    for _ in range(2):  # and again: the parent's refusal is remembered, the MIG lists are not
        sim_clock.advance(10)
        processes.collect(recording_accumulator)
    points = recording_accumulator.by_measurement("gpu_process")
    migs = machine.devices[0].mig_devices
    assert len(points) == 2 * len(migs)
    assert {p.tags["gi_id"] for p in points} == {str(m.gi_id) for m in migs}
    assert all(p.tags["pid"] == str(pid) for p in points)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("l40s@proc=0", "use xid=GPU:CODE:TIME"),
        ("l40s@proc=0:abc", "PID must be a positive number"),
        ("l40s@proc=0:12:0", "MIB must be a positive number"),
        ("l40s@proc=3:12", "GPU 3 is not in this item"),
    ],
)
def test_bad_proc_modifier_is_one_line(spec, message):
    from gpuagent.errors import AgentError
    from gpuagent.sim.fleet import parse_spec

    with pytest.raises(AgentError, match=message) as info:
        parse_spec(spec)
    assert "\n" not in str(info.value)


def test_proc_modifier_shows_real_processes_with_their_memory(simulated_fleet, sim_clock, recording_accumulator):
    pid, parent = os.getpid(), os.getppid()
    machine = simulated_fleet(f"l40s:2@proc=1:{pid}:1000@proc=1:{parent}", scenario="idle")
    sim_clock.advance(10)
    collector(machine).collect(recording_accumulator)
    points = {p.tags["pid"]: p for p in recording_accumulator.by_measurement("gpu_process")}
    assert set(points) == {str(pid), str(parent)}  # GPU 0 idle: nothing; GPU 1: only the shown
    assert {p.tags["gpu"] for p in points.values()} == {"1"}
    assert points[str(pid)].fields["used_memory_bytes"] == 1000 << 20
    assert points[str(parent)].fields["used_memory_bytes"] > 0
