"""health collector on simulated fleets: ECC and memory repair counters, XID events, lost GPUs."""

from __future__ import annotations

import threading

import pydantic
import pytest

from gpuagent.context import AgentContext
from gpuagent.plugin_host import PluginHost
from gpuagent.plugins.health import XID_DESCRIPTIONS, GpuLostError, HealthCollector, xid_description
from gpuagent.plugins.vgpu import VgpuCollector
from gpuagent.service.scheduler import Scheduler

INTERVAL = 10.0


def make(machine, **options):
    config = HealthCollector.Config(event_wait="100ms", **options)
    return HealthCollector(config, AgentContext(hostname="testhost", gpus=machine.gpus))


def health_fields(acc, gpu):
    return [p.fields for p in acc.by_measurement("gpu_health") if p.tags["gpu"] == str(gpu)]


def test_ecc_and_row_remapping_on_datacenter_cards_none_on_geforce(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("h100-sxm:1,rtx4090:1")
    collector = make(machine)
    try:
        collector.collect(recording_accumulator)
    finally:
        collector.close()
    [h100] = health_fields(recording_accumulator, 0)
    assert h100["lost"] is False
    assert h100["ecc_enabled"] is True
    for name in ("corrected", "uncorrected"):
        for counter in ("volatile", "aggregate"):
            assert h100[f"ecc_{name}_{counter}_total"] >= 0
    assert h100["remapped_rows_correctable"] >= 0 and h100["remapped_rows_uncorrectable"] >= 0
    assert isinstance(h100["remapped_rows_pending"], bool) and isinstance(h100["remapped_rows_failure"], bool)
    assert "retired_pages_sbe" not in h100  # Hopper remaps rows instead of retiring pages
    assert h100["xid_events_total"] == 0
    [geforce] = health_fields(recording_accumulator, 1)
    assert geforce["lost"] is False
    assert not any(k.startswith(("ecc_", "remapped_", "retired_")) for k in geforce)


def test_xid_79_then_lost_gpu_while_the_others_keep_reporting(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("l40s-vgpu:4")
    machine.lose_gpu(1, at=15.0)  # XID 79 at t=15 s, GPU_IS_LOST from then on
    context = AgentContext(hostname="testhost", gpus=machine.gpus)
    health = HealthCollector(HealthCollector.Config(event_wait="100ms"), context)
    vgpu = VgpuCollector(VgpuCollector.Config(), context)
    scheduler = Scheduler(context, [(health, INTERVAL, 5.0), (vgpu, INTERVAL, 5.0)], [], agent_interval=INTERVAL)
    cycles = []
    try:
        for _ in range(5):  # t = 0, 10, 20, 30, 40
            cycles.append((sim_clock.now(), scheduler.run_once()))
            sim_clock.advance(INTERVAL)
    finally:
        scheduler.close()

    def points(cycle, measurement, gpu=None, **has):
        return [
            p
            for p in cycle
            if p.measurement == measurement
            and (gpu is None or p.tags.get("gpu") == str(gpu))
            and all(k in p.fields for k in has)
        ]

    for t, cycle in cycles:
        xids = points(cycle, "gpu_health", xid=True)
        if t < 15:
            assert not xids
            assert len(points(cycle, "gpu_health", 1, ecc_enabled=True)) == 1
        elif t == 20:  # the first run after the event: within one interval
            assert [(p.tags["gpu"], p.fields["xid"]) for p in xids] == [("1", 79)]
            assert xids[0].fields["xid_description"] == "GPU has fallen off the bus"
            assert xids[0].tags["uuid"] == machine.gpus[1].uuid
            lost = points(cycle, "gpu_health", 1, lost=True)
            assert [p.fields["lost"] for p in lost] == [True]
        else:  # afterwards GPU 1 is silent in every collector but health, whose verdict stays `lost`
            assert not xids
            assert [(p.measurement, p.fields["verdict"]) for p in cycle if p.tags.get("gpu") == "1"] == [
                ("gpu_health", "lost")
            ]
        for gpu in (0, 2, 3):  # the others report every cycle, in every collector
            assert len(points(cycle, "gpu_health", gpu, ecc_enabled=True)) == 1, (t, gpu)
            assert points(cycle, "gpu_health", gpu, ecc_enabled=True)[0].fields["lost"] is False
            assert points(cycle, "gpu_vgpu", gpu, virtualization_mode=True), (t, gpu)
    assert machine.gpus[1].lost and not any(g.lost for g in machine.gpus if g.index != 1)

    # The agent's own measurement counts the loss once, and says why.
    own = [p for p in cycles[-1][1] if p.measurement == "gpuagent" and p.tags.get("collector") == "health"]
    assert own[0].fields["errors_total"] == 1
    assert "GPU 1" in own[0].fields["last_error"] and machine.gpus[1].uuid in own[0].fields["last_error"]
    later_health = [p for _t, c in cycles[3:] for p in c if p.measurement == "gpu_health" and p.tags["gpu"] == "1"]
    assert [p.fields["lost"] for p in later_health] == [True, True]
    assert not any("lost_reason" in p.fields for p in later_health)  # NVML's message once


def test_lost_gpu_found_by_another_collector_is_an_error_once(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("l40s:2")
    collector = make(machine, xid_events=False)
    machine.lose_gpu(0)
    machine.gpus[0].mark_lost("GPU is lost")  # e.g. the power collector ran first
    with pytest.raises(GpuLostError, match="GPU 0"):
        collector.collect(recording_accumulator)
    assert [f["lost"] for f in health_fields(recording_accumulator, 0)] == [True]
    assert [f["lost"] for f in health_fields(recording_accumulator, 1)] == [False]
    recording_accumulator.clear()
    collector.collect(recording_accumulator)  # no second error; the verdict is reported every run
    assert [(f["lost"], f["verdict"]) for f in health_fields(recording_accumulator, 0)] == [(True, "lost")]
    assert len(health_fields(recording_accumulator, 1)) == 1


def test_xid_on_a_live_gpu_is_counted(simulated_fleet, sim_clock, recording_accumulator):
    machine = simulated_fleet("h100-sxm:2")
    collector = make(machine)
    try:
        collector.collect(recording_accumulator)
        machine.inject_xid(0, 48, at=sim_clock.now() + 1)
        machine.inject_xid(0, 94, at=sim_clock.now() + 2)
        sim_clock.advance(INTERVAL)
        recording_accumulator.clear()
        collector.collect(recording_accumulator)
    finally:
        collector.close()
    xids = [
        (p.tags["gpu"], p.fields["xid"], p.fields["xid_description"])
        for p in recording_accumulator.by_measurement("gpu_health")
        if "xid" in p.fields
    ]
    assert xids == [("0", 48, "Double-bit ECC error"), ("0", 94, "Contained ECC error")]
    assert health_fields(recording_accumulator, 0)[-1]["xid_events_total"] == 2
    assert health_fields(recording_accumulator, 1)[-1]["xid_events_total"] == 0


def test_close_stops_the_event_thread_promptly(simulated_fleet, recording_accumulator):
    machine = simulated_fleet("l40s:2")
    collector = HealthCollector(HealthCollector.Config(event_wait="200ms"), AgentContext("testhost", gpus=machine.gpus))
    collector.collect(recording_accumulator)
    assert any(t.name == "health-xid-events" for t in threading.enumerate())
    # How fast close() returns is the host's business; that it returns and the thread is gone is
    # ours (the join below only turns a hang into a failure).
    closer = threading.Thread(target=collector.close)
    closer.start()
    closer.join(30)
    assert not closer.is_alive(), "close() did not return"
    assert not any(t.name == "health-xid-events" and t.is_alive() for t in threading.enumerate())


def test_xid_table_covers_the_common_codes():
    for code in (13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120):
        assert code in XID_DESCRIPTIONS and XID_DESCRIPTIONS[code]
    assert "catalogue" in xid_description(99999)


def test_config_is_validated():
    assert HealthCollector.Config(event_wait="250ms").event_wait == 0.25
    with pytest.raises(pydantic.ValidationError, match="event_wiat"):
        HealthCollector.Config(event_wiat="1s")


def test_is_a_builtin_plugin():
    assert PluginHost(load_entry_points=False).load().collectors["health"] is HealthCollector


def test_a_gpu_near_its_thermal_limit_is_degraded(simulated_fleet, tmp_path, recording_accumulator):
    """The thermal margin (nvmlDeviceGetMarginTemperature, Ada and newer) at or below
    thermal_margin_c degrades the verdict; an Ampere card has no margin and no such finding."""
    import json

    from gpuagent.sim.profile import load_profile

    hot = load_profile("h100-sxm")
    hot["temperature_c"].update({"idle": 85, "max": 86, "gpu_max": 87})
    path = tmp_path / "hot-h100.json"
    path.write_text(json.dumps(hot))
    machine = simulated_fleet(f"{path}:1,h100-sxm:1,a100-sxm4:1", scenario="idle")
    collector = make(machine)
    try:
        collector.collect(recording_accumulator)
    finally:
        collector.close()
    [near] = health_fields(recording_accumulator, 0)
    assert near["thermal_margin_c"] == 2
    assert near["verdict"] == "degraded" and "Thermal margin 2 °C" in near["verdict_reason"]
    [cool] = health_fields(recording_accumulator, 1)
    assert cool["thermal_margin_c"] > 3 and cool["verdict"] == "ok"
    [ampere] = health_fields(recording_accumulator, 2)
    assert "thermal_margin_c" not in ampere and ampere["verdict"] == "ok"


def test_margin_and_remap_banks_every_30_s_and_the_verdict_between(
    simulated_fleet, sim_clock, tmp_path, recording_accumulator
):
    """Issue 42: the thermal margin and the row-remapper histogram are asked every 30 s on the
    scheduler's ticks (the histogram also on a run whose remapped rows changed); the verdict
    judges the latest margin in between, so a hot GPU stays degraded on every run."""
    import json

    from gpuagent.gpus.nvml_read import current_tick
    from gpuagent.sim.profile import load_profile

    hot = load_profile("h100-sxm")
    hot["temperature_c"].update({"idle": 85, "max": 86, "gpu_max": 87})
    path = tmp_path / "hot-h100.json"
    path.write_text(json.dumps(hot))
    machine = simulated_fleet(f"{path}:1", scenario="idle")
    collector = make(machine)
    calls = ("nvmlDeviceGetMarginTemperature", "nvmlDeviceGetRowRemapperHistogram")
    asked = []
    try:
        for tick in range(5):  # t = 0, 10, 20, 30, 40; a row remapped before the last
            if tick == 4:
                machine.add_ecc_errors(0, uncorrected=1)
            before = machine.calls
            token = current_tick.set(("test", tick))
            try:
                collector.collect(recording_accumulator)
            finally:
                current_tick.reset(token)
            asked.append(tuple((machine.calls - before)[c] for c in calls))
            sim_clock.advance(10)
    finally:
        collector.close()
    points = health_fields(recording_accumulator, 0)
    assert asked == [(1, 1), (0, 0), (0, 0), (1, 1), (0, 1)]
    assert [("thermal_margin_c" in p, "row_remap_banks_max" in p) for p in points] == [
        (True, True),
        (False, False),
        (False, False),
        (True, True),
        (False, True),
    ]
    assert points[-1]["remapped_rows_uncorrectable"] > points[0]["remapped_rows_uncorrectable"]
    assert [p["verdict"] for p in points[:4]] == ["degraded"] * 4  # the last has an ECC error too
    assert all("Thermal margin 2 °C" in p["verdict_reason"] for p in points[:4])


def test_an_unexpected_error_in_the_event_thread_is_logged_once_then_counted(simulated_fleet, monkeypatch, caplog):
    """Issue 28, item 12: the thread retries every event_wait; a lasting unexpected error logged a
    traceback each time (two a second). Now: one traceback, then a line a minute with a count."""
    import logging
    import time

    import pynvml

    from gpuagent.plugins.health import XidWatcher

    machine = simulated_fleet("h100-sxm:2")

    def broken(event_set, timeout_ms):
        raise ValueError("a driver answer nobody expected")

    monkeypatch.setattr(pynvml, "nvmlEventSetWait_v2", broken)
    watcher = XidWatcher(machine.gpus, poll_s=0.01)
    with caplog.at_level(logging.ERROR, logger="gpuagent"):
        assert watcher.start()
        deadline = time.monotonic() + 20
        while watcher.unexpected_total < 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        watcher.stop()
    assert watcher.unexpected_total >= 20  # the thread kept going
    lines = [r for r in caplog.records if "XID event thread" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is not None, [r.getMessage() for r in lines]
