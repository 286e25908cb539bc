"""The kubelet's pod-resources API over real gRPC (a server compiled from the v1 proto; no
kubelet can run here): which pod holds each GPU, and a kubelet that refuses or stalls."""

from __future__ import annotations

import logging
import socket
import sys

from gpuagent.plugins.processes import ProcessesCollector
from gpuagent.testing import make_collector


def collect(machine, acc, **config):
    collector = make_collector(machine, cls=ProcessesCollector, **config)
    collector.collect(acc)
    return collector


def test_pod_holding_a_gpu_names_its_job_point(pod_resources_server, simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s:2", scenario="training")
    uuids = [d.uuid.decode() for d in machine.devices]
    pod_resources_server.pods = [
        ("ml", "trainer-0", [("main", "nvidia.com/gpu", [uuids[1]])]),
        ("other", "cpu-only", [("c", "example.com/fpga", ["fpga0"])]),
    ]
    sim_clock.advance(10)
    collect(machine, recording_accumulator, kubelet_socket=str(pod_resources_server.socket))
    assert pod_resources_server.calls == 1  # one List per collection, not per GPU
    jobs = {p.tags["gpu"]: p for p in recording_accumulator.by_measurement("gpu_job")}
    assert set(jobs) == {"1"}  # GPU 0's process belongs to no job or pod
    held = jobs["1"]
    assert (held.tags["k8s_namespace"], held.tags["k8s_pod"], held.tags["k8s_container"]) == (
        "ml",
        "trainer-0",
        "main",
    )
    assert held.fields["energy_j"] > 0 and held.fields["processes"] == 1
    procs = {p.tags["gpu"]: p for p in recording_accumulator.by_measurement("gpu_process")}
    assert procs["1"].tags["k8s_pod"] == "trainer-0" and "k8s_pod" not in procs["0"].tags


def test_time_sliced_replica_ids_name_the_gpu(pod_resources_server, simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s", scenario="idle")  # no process yet: the pod still holds it
    uuid = machine.devices[0].uuid.decode()
    pod_resources_server.pods = [("ml", "notebook", [("jupyter", "nvidia.com/gpu", [f"{uuid}::3"])])]
    collect(machine, recording_accumulator, kubelet_socket=str(pod_resources_server.socket))
    (job,) = recording_accumulator.by_measurement("gpu_job")
    assert job.tags["k8s_pod"] == "notebook" and job.fields["processes"] == 0


def test_stalled_kubelet_is_a_counted_timeout(pod_resources_server, simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s", scenario="training")
    pod_resources_server.delay = 2.0
    sim_clock.advance(10)
    collect(
        machine,
        recording_accumulator,
        kubelet_socket=str(pod_resources_server.socket),
        kubelet_timeout=0.2,
    )
    assert len(recording_accumulator.by_measurement("gpu_process")) == 1  # still written
    (counts,) = recording_accumulator.by_measurement("gpu_attribution")
    assert counts.fields == {"kubelet_timeout_total": 1}


def test_refusing_kubelet_is_counted(tmp_path, simulated_fleet, sim_clock, recording_accumulator):
    path = tmp_path / "kubelet.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))  # a socket file nobody accepts on: connection refused
    dead.close()
    machine = simulated_fleet("l40s", scenario="training")
    sim_clock.advance(10)
    collect(machine, recording_accumulator, kubelet_socket=str(path), kubelet_timeout=1.0)
    assert len(recording_accumulator.by_measurement("gpu_process")) == 1
    (counts,) = recording_accumulator.by_measurement("gpu_attribution")
    assert counts.fields == {"kubelet_refused_total": 1}


def test_without_grpcio_the_lookup_is_skipped_with_one_log_line(
    tmp_path, monkeypatch, caplog, simulated_fleet, sim_clock, recording_accumulator
):
    path = tmp_path / "kubelet.sock"
    path.touch()
    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc -> ImportError
    machine = simulated_fleet("l40s", scenario="training")
    collector = make_collector(machine, cls=ProcessesCollector, kubelet_socket=str(path))
    with caplog.at_level(logging.WARNING, logger="gpuagent"):
        for _ in range(3):
            sim_clock.advance(10)
            collector.collect(recording_accumulator)
    lines = [r.getMessage() for r in caplog.records if "kubelet" in r.getMessage()]
    assert len(lines) == 1 and "k8s extra" in lines[0]
    assert len(recording_accumulator.by_measurement("gpu_process")) == 3
    assert recording_accumulator.by_measurement("gpu_attribution") == []


def test_time_sliced_gpu_held_by_two_pods_names_neither_on_processes(
    pod_resources_server, simulated_fleet, sim_clock, recording_accumulator
):
    machine = simulated_fleet("l40s", scenario="training")
    uuid = machine.devices[0].uuid.decode()
    pod_resources_server.pods = [
        ("ml", "a", [("c", "nvidia.com/gpu", [f"{uuid}::0"])]),
        ("ml", "b", [("c", "nvidia.com/gpu", [f"{uuid}::1"])]),
    ]
    sim_clock.advance(10)
    collect(machine, recording_accumulator, kubelet_socket=str(pod_resources_server.socket))
    (proc,) = recording_accumulator.by_measurement("gpu_process")
    assert "k8s_pod" not in proc.tags
    jobs = recording_accumulator.by_measurement("gpu_job")
    assert sorted(j.tags["k8s_pod"] for j in jobs) == ["a", "b"]


def test_mig_devices_are_matched_by_their_mig_uuid(
    pod_resources_server, simulated_fleet, sim_clock, recording_accumulator
):
    machine = simulated_fleet("h100-sxm-mig", scenario="training")  # a process per instance
    migs = machine.devices[0].mig_devices
    pod_resources_server.pods = [
        ("ml", f"pod-{m.gi_id}", [("c", "nvidia.com/mig-3g.40gb", [m.uuid.decode()])]) for m in migs
    ]
    sim_clock.advance(10)
    collect(machine, recording_accumulator, kubelet_socket=str(pod_resources_server.socket))
    procs = recording_accumulator.by_measurement("gpu_process")
    assert len(procs) == len(migs)
    for p in procs:
        assert p.tags["k8s_pod"] == f"pod-{p.tags['gi_id']}"
    jobs = recording_accumulator.by_measurement("gpu_job")
    assert sorted(j.tags["k8s_pod"] for j in jobs) == sorted(f"pod-{m.gi_id}" for m in migs)
    assert all(j.fields["processes"] == 1 for j in jobs)
