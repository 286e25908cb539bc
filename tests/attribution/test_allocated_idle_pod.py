"""Idle allocations for pods: a container the kubelet gave a GPU (over real gRPC) that runs
nothing on it is flagged allocated_idle once [collectors.processes] idle_after has passed, on
the simulator's clock (a computing GPU: plugins/processes/tests/test_allocated_idle.py)."""

from __future__ import annotations

from gpuagent.plugins.processes import ProcessesCollector
from gpuagent.testing import make_collector


def test_a_pod_holding_an_idle_gpu_is_flagged_after_idle_after(
    pod_resources_server, simulated_fleet, sim_clock, recording_accumulator
):
    machine = simulated_fleet("l40s:2", scenario="idle")
    uuids = [d.uuid.decode() for d in machine.devices]
    pod_resources_server.pods = [("ml", "notebook", [("jupyter", "nvidia.com/gpu", [uuids[1]])])]
    collector = make_collector(
        machine, cls=ProcessesCollector, kubelet_socket=str(pod_resources_server.socket), idle_after="10m"
    )
    seen = []
    for _ in range(4):  # t = 0, 5, 10, 15 min
        recording_accumulator.points.clear()
        collector.collect(recording_accumulator)
        (job,) = recording_accumulator.by_measurement("gpu_job")
        seen.append((job.tags["gpu"], job.tags["k8s_pod"], job.fields["idle_s"], job.fields["allocated_idle"]))
        sim_clock.advance(300)
    assert seen == [
        ("1", "notebook", 0.0, False),
        ("1", "notebook", 300.0, False),
        ("1", "notebook", 600.0, True),
        ("1", "notebook", 900.0, True),
    ]
    # The kubelet takes the GPU back and gives it again: the idle time starts afresh.
    pod_resources_server.pods = []
    recording_accumulator.points.clear()
    collector.collect(recording_accumulator)
    assert recording_accumulator.by_measurement("gpu_job") == []
    pod_resources_server.pods = [("ml", "notebook", [("jupyter", "nvidia.com/gpu", [uuids[1]])])]
    recording_accumulator.points.clear()
    collector.collect(recording_accumulator)
    (job,) = recording_accumulator.by_measurement("gpu_job")
    assert (job.fields["idle_s"], job.fields["allocated_idle"]) == (0.0, False)
