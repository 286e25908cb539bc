"""processes collector on the simulator: one point per process per GPU, vanished processes, MIG."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import psutil
import pytest
from captures import capture_names

from gpuagent.plugins.processes import ProcessesCollector
from gpuagent.testing import IDENTITY_TAGS as IDENTITY
from gpuagent.testing import assert_no_sentinels as assert_clean
from gpuagent.testing import make_collector

collector = functools.partial(make_collector, cls=ProcessesCollector)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: the pid no longer exists
    assert not psutil.pid_exists(child.pid)
    return child.pid


@pytest.mark.parametrize("profile", ["l40s", "h100-sxm", "rtx4090"])
def test_one_point_per_process_per_gpu(profile, simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet(f"{profile}:2", scenario="inference")  # two processes on each GPU
    sim_clock.advance(30)
    collector(machine).collect(recording_accumulator)
    points = recording_accumulator.by_measurement("gpu_process")
    me, parent = psutil.Process(os.getpid()), psutil.Process(os.getppid())
    assert sorted((p.tags["gpu"], p.tags["pid"]) for p in points) == sorted(
        (gpu, str(pid)) for gpu in ("0", "1") for pid in (me.pid, parent.pid)
    )
    for p in points:
        assert IDENTITY | {"pid"} <= set(p.tags)
        assert "gi_id" not in p.tags and "ci_id" not in p.tags
        assert_clean(p.fields)
        proc = me if p.tags["pid"] == str(me.pid) else parent
        assert p.fields["name"] == proc.name() and p.fields["user"] == proc.username()
        assert p.fields["used_memory_bytes"] > 0 and p.fields["type"] == "C"
    # The processes' memory adds up to what the GPU has in use.
    used = sum(p.fields["used_memory_bytes"] for p in points if p.tags["gpu"] == "0")
    assert used == machine.devices[0].state().mem_used_bytes


def test_vanished_process_is_still_written_with_its_reason(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s", scenario="inference")
    gone = dead_pid()
    machine.process_pids = [gone, os.getpid()]
    sim_clock.advance(30)
    collector(machine).collect(recording_accumulator)
    points = {p.tags["pid"]: p for p in recording_accumulator.by_measurement("gpu_process")}
    assert set(points) == {str(gone), str(os.getpid())}
    lost = points[str(gone)]
    assert lost.fields["attribution_missing"] == "pid_vanished"
    assert "name" not in lost.fields and lost.fields["used_memory_bytes"] > 0
    assert "attribution_missing" not in points[str(os.getpid())].fields
    counts = recording_accumulator.by_measurement("gpu_attribution")
    assert counts[0].fields == {"pid_vanished_total": 1}


def test_idle_gpu_has_no_process_points(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s", scenario="idle")
    sim_clock.advance(30)
    collector(machine).collect(recording_accumulator)
    assert recording_accumulator.by_measurement("gpu_process") == []


def test_mig_processes_carry_their_instance(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("h100-sxm-mig", scenario="training")
    sim_clock.advance(30)
    collector(machine).collect(recording_accumulator)
    points = recording_accumulator.by_measurement("gpu_process")
    assert len(points) == len(machine.devices[0].mig_devices) == 2
    instances = {(p.tags["gi_id"], p.tags["ci_id"]) for p in points}
    assert instances == {(str(m.gi_id), str(m.ci_id)) for m in machine.devices[0].mig_devices}


@pytest.mark.parametrize("graphics, bound", [(True, 6), (False, 5)])
def test_nvml_calls_per_cycle(graphics, bound, simulated_fleet, nvml_calls, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s", scenario="training")
    processes = collector(machine, graphics=graphics)
    calls = nvml_calls()
    sim_clock.advance(10)
    processes.collect(recording_accumulator)
    # Compute list: size query + fill (a process is running); graphics list: size query only.
    assert sum(calls.values()) <= bound, dict(calls)
    assert ("nvmlDeviceGetGraphicsRunningProcesses_v3" in calls) is graphics
    assert len(recording_accumulator.by_measurement("gpu_process")) == 1


@pytest.mark.parametrize("capture", capture_names())
def test_processes_on_captured_profiles(capture, captured_run, recording_accumulator):
    profile = captured_run(capture, collector)
    points = recording_accumulator.by_measurement("gpu_process")
    assert points, "a training GPU has processes"
    # The loaded run's processes, with the memory the capture shows ("N/A" on Windows: left out).
    stated = {q["pid"]: q["used_mib"] for q in (profile.get("captured") or {}).get("load", {}).get("processes", [])}
    for p in points:
        assert p.tags["model"] == profile["product_name"]
        assert_clean(p.fields)
        if stated.get(int(p.tags["pid"]), 1) is None:
            assert "used_memory_bytes" not in p.fields
        else:
            assert p.fields["used_memory_bytes"] > 0


def test_process_names_are_remembered_per_process_and_forgotten_when_gone():
    import subprocess
    import sys

    from gpuagent.plugins.processes import ProcessNames

    names = ProcessNames()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        first = names(child.pid)
        assert first["name"].startswith("python")
        assert names(child.pid) is first  # same process: no second /proc look-up
    finally:
        child.kill()
        child.wait()
    assert names(child.pid) is None  # ended: skipped, and forgotten
    assert child.pid not in names._known


def test_a_pid_proc_does_not_show_is_named_by_nvml(simulated_fleet, sim_clock, recording_accumulator):
    """Another PID namespace's process (or a simulated one): NVML's nvmlSystemGetProcessName
    names it, once while it stays listed; /proc's name wins where the process is visible."""
    machine = simulated_fleet("l40s", scenario="inference")
    hidden = dead_pid()
    machine.process_pids = [hidden, os.getpid()]
    machine.process_names[hidden] = b"/opt/jobs/train"
    sim_clock.advance(30)
    c = collector(machine)
    c.collect(recording_accumulator)
    points = {p.tags["pid"]: p for p in recording_accumulator.by_measurement("gpu_process")}
    assert points[str(hidden)].fields["name"] == "/opt/jobs/train"
    assert points[str(os.getpid())].fields["name"] == psutil.Process().name()
    before = machine.calls["nvmlSystemGetProcessName"]
    sim_clock.advance(30)
    c.collect(recording_accumulator)
    assert machine.calls["nvmlSystemGetProcessName"] == before  # remembered, not asked each cycle
    # inspect's one-off read lists the same processes with the same names
    listed = {p["pid"]: p for p in c.read_gpu(machine.gpus[0])["gpu_process"]["points"]}
    assert listed[hidden]["name"] == "/opt/jobs/train" and listed[hidden]["type"] == "C"
    assert listed[hidden]["used_memory_bytes"] > 0
