"""The health verdict, each rule driven through the simulator's fault modifiers on its manual clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuagent.context import AgentContext
from gpuagent.errors import AgentError
from gpuagent.plugins.health import GpuLostError, HealthCollector
from gpuagent.plugins.health.catalog import ACTION_VERDICTS, CATALOG_PATH, VERDICTS, load_catalog
from gpuagent.sim.profile import load_profile

README = Path(__file__).resolve().parents[1] / "README.md"


class Run:
    """A health collector on a simulated fleet; ``at(t)`` moves the clock to t and collects."""

    def __init__(self, machine, clock, acc, **options):
        self.machine, self.clock, self.acc = machine, clock, acc
        config = HealthCollector.Config(event_wait="100ms", **options)
        self.collector = HealthCollector(config, AgentContext(hostname="testhost", gpus=machine.gpus))
        self.collector.collect(acc)  # t=0: registers for XID events

    def at(self, t: float) -> dict[int, dict]:
        self.clock.set(t)
        self.acc.clear()
        try:
            self.collector.collect(self.acc)
        except GpuLostError:
            pass
        return {
            int(p.tags["gpu"]): dict(p.fields) for p in self.acc.by_measurement("gpu_health") if "verdict" in p.fields
        }

    def close(self):
        self.collector.close()


@pytest.fixture
def run(simulated_fleet, sim_clock, recording_accumulator):
    runs = []

    def start(spec, **options):
        runs.append(Run(simulated_fleet(spec), sim_clock, recording_accumulator, **options))
        return runs[-1]

    yield start
    for r in runs:
        r.close()


def verdicts(fields):
    return {gpu: f["verdict"] for gpu, f in fields.items()}


def test_healthy_h100_sxm_board_is_ok_with_its_fabric_and_remapper_fields(run):
    r = run("h100-sxm:2")
    got = r.at(10)
    assert verdicts(got) == {0: "ok", 1: "ok"}
    f = got[0]
    assert f["verdict_reason"] == "No fault evidence."
    assert f["recovery_action"] == 0
    assert (f["row_remap_banks_max"], f["row_remap_banks_none"]) == (2560, 0)  # the H100 capture
    assert (f["fabric_state"], f["fabric_status"], f["fabric_clique_id"]) == ("completed", 0, 0)
    assert f["nvlink_crc_errors_total"] == 0 and f["pcie_errors_total"] == 0


def test_xid_79_makes_that_gpu_lost_and_the_others_stay_ok(run):
    r = run("h100-sxm:3@xid=1:79:1s")
    assert verdicts(r.at(2)) == {0: "ok", 1: "lost", 2: "ok"}
    again = r.at(12)  # every run, not once
    assert again[1]["verdict"] == "lost" and again[1]["lost"] is True
    assert again[1]["verdict_reason"].startswith("XID 79 (GPU has fallen off the bus) at ")
    assert "; it answers GPU_IS_LOST since" in again[1]["verdict_reason"]


def test_xid_48_is_not_ok(run):
    got = run("h100-sxm:2@xid=0:48:1s").at(2)
    assert got[0]["verdict"] == "reset_required"
    assert got[0]["verdict_reason"].startswith("XID 48 (Double-bit ECC error: reset the GPU")
    assert got[1]["verdict"] == "ok"


@pytest.mark.parametrize("code", [13, 31, 43, 45, 8, 94])
def test_an_applications_xid_is_at_most_degraded(run, code):
    r = run(f"h100-sxm:1@xid=0:{code}:1s@xid=0:{code}:2s@xid=0:{code}:3s")
    got = r.at(4)[0]
    assert got["verdict"] in ("ok", "degraded"), got
    if got["verdict"] == "degraded":
        assert f"XID {code}" in got["verdict_reason"] and "x3" in got["verdict_reason"]


def test_an_xid_verdict_decays_after_the_window_and_says_so(run):
    r = run("h100-sxm:1@xid=0:48:1s")
    assert r.at(2)[0]["verdict"] == "reset_required"
    assert r.at(900)[0]["verdict"] == "reset_required"  # 899 s after the event: inside 15 min
    after = r.at(902)[0]
    assert after["verdict"] == "ok"
    assert "XID 48 at" in after["verdict_reason"] and "expired after the 15 min window" in after["verdict_reason"]
    assert after["xid_events_total"] == 1  # the counter stays a counter


def test_the_xid_window_is_configurable(run):
    r = run("h100-sxm:1@xid=0:95:1s", xid_window="1m")
    assert r.at(2)[0]["verdict"] == "reset_required"  # received at 2 s: the window runs from then
    assert r.at(61)[0]["verdict"] == "reset_required"
    assert r.at(63)[0]["verdict"] == "ok"


def test_an_expired_xid_does_not_release_a_verdict_other_evidence_holds(run):
    r = run("h100-sxm:1@xid=0:48:1s@remap=0:pending:1s")
    assert r.at(2)[0]["verdict_reason"].count(";") == 1  # XID 48 and the pending remapping
    held = r.at(1000)[0]
    assert held["verdict"] == "reset_required"
    assert held["verdict_reason"].startswith("Row remapping pending;")
    assert "expired" in held["verdict_reason"]


@pytest.mark.parametrize(
    "action, verdict",
    [
        ("none", "ok"),
        ("reset", "reset_required"),
        ("reboot", "reboot_required"),
        ("drain_p2p", "drain"),
        ("drain_and_reset", "drain"),
    ],
)
def test_nvml_recovery_action(run, action, verdict):
    got = run(f"h100-sxm:1@recovery=0:{action}:5s").at(6)[0]
    assert got["verdict"] == verdict
    if verdict != "ok":
        assert got["verdict_reason"].startswith("NVML recovery action:")


def test_a_recovery_action_this_agent_does_not_know_is_degraded_naming_the_code(run):
    got = run("h100-sxm:1@recovery=0:42:1s").at(2)[0]
    assert (got["verdict"], got["recovery_action"]) == ("degraded", 42)
    assert "NVML recovery action 42" in got["verdict_reason"]


def test_an_xid_code_the_catalogue_does_not_know_is_degraded_naming_the_code(run):
    got = run("h100-sxm:1@xid=0:999:1s").at(2)[0]
    assert got["verdict"] == "degraded"
    assert "XID 999 (not in the XID catalogue)" in got["verdict_reason"]


def test_row_remapping_pending_then_reset_then_failure(run):
    r = run("h100-sxm:1@remap=0:pending:10s@reset=0:20s@remap=0:failure:30s")
    pending = r.at(11)[0]
    assert (pending["verdict"], pending["remapped_rows_pending"]) == ("reset_required", True)
    assert pending["row_remap_banks_high"] == 1 and pending["row_remap_banks_max"] == 2559
    applied = r.at(21)[0]
    assert (applied["verdict"], applied["remapped_rows_pending"]) == ("ok", False)
    assert applied["remapped_rows_uncorrectable"] == 1
    failed = r.at(31)[0]
    assert (failed["verdict"], failed["remapped_rows_failure"]) == ("drain", True)
    assert failed["row_remap_banks_none"] == 1
    assert failed["verdict_reason"] == "Row remapping failed."


def test_retired_pages_pending_on_a_pre_ampere_card_needs_a_reboot(run, tmp_path):
    profile = load_profile("a100-sxm4")  # made a Volta card: page retirement instead of row remapping
    profile.update(name="v100-test", product_name="Tesla V100-SXM2-32GB", architecture="Volta")
    profile.update(retired_pages=True, remapped_rows=False, gpm=False, mig=None)
    profile["unsupported"] = [s for s in profile.get("unsupported", []) if "RetiredPages" not in s]
    path = tmp_path / "v100.json"
    path.write_text(json.dumps(profile))
    r = run(f"{path}:1@retired=0:5s")
    assert r.at(2)[0]["verdict"] == "ok"
    got = r.at(6)[0]
    assert (got["verdict"], got["retired_pages_pending"]) == ("reboot_required", True)
    assert "remapped_rows_pending" not in got


def test_uncorrectable_ecc_growth_is_degraded_until_the_error_window_passes(run):
    r = run("h100-sxm:1@ecc=0:2:15s", error_window="5m")
    assert r.at(10)[0]["verdict"] == "ok"
    got = r.at(20)[0]
    assert got["verdict"] == "degraded"
    assert got["verdict_reason"] == "2 uncorrectable ECC errors in the last 5 min (threshold 1)."
    r.at(200)
    assert r.at(330)[0]["verdict"] == "ok"  # no growth in the last 5 min


def test_pcie_replays_faster_than_the_threshold_are_degraded(run):
    slow = run("h100-sxm:2@pcie_replay=0:1/m@pcie_replay=1:1")
    slow.at(60)
    got = slow.at(200)
    assert got[0]["verdict"] == "ok"  # 3 replays in 200 s
    assert got[1]["verdict"] == "degraded"  # 200 replays
    assert "PCIe replays" in got[1]["verdict_reason"]


def test_pcie_error_counters_where_the_driver_has_them(run):
    r = run("h100-sxm:1@pcie_err=0:2,l40s:1")
    r.at(10)
    got = r.at(100)
    assert got[0]["verdict"] == "degraded" and got[0]["pcie_errors_total"] == 200
    assert "PCIe errors" in got[0]["verdict_reason"]
    assert "pcie_errors_total" not in got[1] and got[1]["verdict"] == "ok"  # Ada: no such fields


def test_nvlink_errors_are_judged_per_link(run):
    r = run("h100-sxm:2@nvlink_crc=0:5:2@nvlink_recovery=1:3:1/m@nvlink_replay=1:4:2")
    r.at(10)
    got = r.at(70)
    assert got[0]["verdict"] == "degraded"
    assert "NVLink crc errors on link 5" in got[0]["verdict_reason"]
    assert got[0]["nvlink_crc_errors_total"] == 140
    assert got[1]["verdict"] == "degraded"
    assert "NVLink recovery errors on link 3" in got[1]["verdict_reason"]
    assert "NVLink replay errors on link 4" in got[1]["verdict_reason"]
    assert "link 5" not in got[1]["verdict_reason"]


@pytest.mark.parametrize(
    "state, verdict, words",
    [
        ("not_started", "degraded", "registration not started"),
        ("in_progress", "degraded", "registration in progress"),
        ("failed", "drain", "registration failed"),
        ("unhealthy", "degraded", "route unhealthy"),
        ("degraded_bw", "degraded", "degraded bandwidth"),
        ("completed", "ok", None),
    ],
)
def test_nvswitch_fabric_state(run, state, verdict, words):
    got = run(f"h100-sxm:1@fabric=0:{state}:5s").at(6)[0]
    assert got["verdict"] == verdict
    if words:
        assert f"NVSwitch fabric {words}" in got["verdict_reason"]


def test_no_fabric_fields_without_an_nvswitch(run):
    got = run("h100-pcie:1").at(1)[0]
    assert got["verdict"] == "ok" and not any(k.startswith("fabric_") for k in got)


def test_a_lost_gpu_that_answers_again_is_picked_up_and_judged_afresh(run):
    r = run("h100-sxm:2@xid=1:48:1s@xid=1:79:2s@reset=1:60s")
    assert r.at(3)[1]["verdict"] == "lost"
    assert r.collector.context.gpus[1].lost
    back = r.at(61)[1]
    assert back["lost"] is False and back["verdict"] == "ok"  # the reset settled XIDs 48 and 79
    assert not r.collector.context.gpus[1].lost
    r.machine.inject_xid(1, 13, at=62)  # its XIDs are watched again
    assert r.at(63)[1]["verdict"] == "degraded"


def test_gpu_try_recover_keeps_a_lost_gpu_lost_until_it_answers(simulated_fleet, sim_clock):
    machine = simulated_fleet("h100-sxm:1@lost=0:1s@reset=0:10s")
    gpu = machine.gpus[0]
    sim_clock.set(2)
    gpu.mark_lost("GPU is lost")
    assert gpu.try_recover() is False and gpu.lost
    sim_clock.set(11)
    assert gpu.try_recover() is True and not gpu.lost
    assert gpu.uuid.startswith("GPU-") and gpu.tags["uuid"] == gpu.uuid


@pytest.mark.parametrize(
    "fault",
    ["recovery=0:bogus:1s", "fabric=0:weird", "remap=0:maybe:1s", "nvlink_crc=0:x:1", "pcie_replay=0:fast"],
)
def test_bad_health_modifiers_are_one_line_errors(simulated_fleet, fault):
    with pytest.raises(AgentError) as info:
        simulated_fleet(f"h100-sxm:1@{fault}")
    assert "\n" not in str(info.value) and "h100-sxm:1@" in str(info.value)


def test_the_catalogue_names_its_source_and_every_action_has_a_verdict():
    doc = json.loads(CATALOG_PATH.read_text())
    assert "docs.nvidia.com/deploy/xid-errors" in doc["source"] and doc["retrieved"]
    catalog = load_catalog()
    assert {e.action for e in catalog.entries.values()} <= set(ACTION_VERDICTS)
    assert catalog.get(48).mnemonic == "ROBUST_CHANNEL_GPU_ECC_DBE"


def test_the_readme_has_the_rule_table_naming_every_verdict():
    text = README.read_text()
    table = text[text.index("## Verdict rules") :]
    for verdict in VERDICTS:
        assert f"`{verdict}`" in table
    for action in ACTION_VERDICTS:
        assert action in table


def test_inspect_shows_the_verdict_and_reason_per_gpu(simulated_fleet, sim_clock):
    import jsonschema

    from gpuagent.commands import facts
    from gpuagent.commands.inspect import render_text
    from gpuagent.gpus.nvml import NvmlSession
    from gpuagent.plugin_host import load_host

    machine = simulated_fleet("h100-sxm:3@recovery=1:reboot:1s@lost=2:1s")
    sim_clock.set(2)
    session = NvmlSession(gpus=machine.gpus, simulated=True, machine=machine, spec=machine.spec)
    session.driver_version = session.nvml_version = "595.80"
    session.cuda_driver_version = 13020
    doc = facts.gather(session, hostname="testhost", plugins=load_host(entry_points=False))
    got = [(g["index"], g["health"]["verdict"]) for g in doc["gpus"]]
    assert got == [(0, "ok"), (1, "reboot_required"), (2, "lost")]
    assert doc["gpus"][1]["health"]["reason"] == "NVML recovery action: node reboot."
    jsonschema.validate(doc, facts.schema())
    text = render_text(doc)
    assert "Health: reboot_required: NVML recovery action: node reboot." in text
    assert "Health: ok: No fault evidence." in text


def test_a_gpu_back_after_a_reset_is_read_by_every_collector_without_a_restart(simulated_fleet, sim_clock):
    from gpuagent.plugins.power import PowerCollector
    from gpuagent.service.scheduler import Scheduler

    machine = simulated_fleet("h100-sxm:2@lost=1:15s@reset=1:35s")
    context = AgentContext(hostname="testhost", gpus=machine.gpus)
    health = HealthCollector(HealthCollector.Config(event_wait="100ms"), context)
    power = PowerCollector(PowerCollector.Config(), context)
    scheduler = Scheduler(context, [(health, 10.0, 5.0), (power, 10.0, 5.0)], [], agent_interval=10.0)
    seen = {}
    try:
        for t in (0, 10, 20, 30, 40, 50):
            sim_clock.set(t)
            points = scheduler.run_once()
            seen[t] = (
                next(
                    p.fields["verdict"]
                    for p in points
                    if p.measurement == "gpu_health" and p.tags["gpu"] == "1" and "verdict" in p.fields
                ),
                any(p.measurement == "gpu_power" and p.tags["gpu"] == "1" for p in points),
            )
    finally:
        scheduler.close()
    assert seen[10] == ("ok", True)
    assert seen[20] == ("lost", False) and seen[30] == ("lost", False)
    assert seen[40][0] == "ok" and seen[50] == ("ok", True)  # back, in health and in power


def _growth_keeping_every_sample(samples, window):
    """The growth rule with every sample kept (the definition CounterWindow must match)."""
    kept, out = [], []
    for t, value in samples:
        if kept and value < kept[-1][1]:
            kept.clear()
        kept.append((t, value))
        while len(kept) > 1 and kept[1][0] <= t - window:
            kept.pop(0)
        out.append(value - kept[0][1])
    return out


def test_counter_window_keeps_only_changes_and_measures_the_same_growth():
    """An NVLink error counter read every second for an error window of 900 s: a counter that
    never moves keeps one sample (not 900 for each of 54 links of 8 GPUs), and the growth it
    reports equals the rule's over every sample, resets and slow growth included."""
    import random

    from gpuagent.plugins.health.verdict import CounterWindow

    still = CounterWindow()
    for t in range(3000):
        assert still.add(float(t), 4, 900.0) == 0
    assert len(still.samples) == 1

    rng = random.Random(7)
    for _ in range(20):
        value, samples = rng.randrange(100), []
        for t in range(2000):
            step = rng.random()
            if step < 0.05:
                value += rng.randrange(1, 50)
            elif step < 0.052:
                value = rng.randrange(10)  # a reset (driver reload, GPU reset)
            samples.append((t * 0.7, value))
        window = rng.choice([10.0, 60.0, 900.0])
        counter = CounterWindow()
        got = [counter.add(t, v, window) for t, v in samples]
        assert got == _growth_keeping_every_sample(samples, window)
        assert len(counter.samples) < 2000 * 0.2  # changes only


def test_one_call_answering_gpu_is_lost_every_cycle_keeps_the_gpu_lost_without_flapping(run, caplog):
    """Issue 28, item 12: the identity calls answer, one call keeps answering GPU_IS_LOST; before,
    each cycle took the GPU back (WARNING) and lost it again (ERROR) and the verdict read ok."""
    import logging

    r = run("h100-sxm:2")
    r.machine.force("nvmlDeviceGetRemappedRows", "GPU_IS_LOST", gpu=1)
    with caplog.at_level(logging.WARNING, logger="gpuagent"):
        seen = [verdicts(r.at(t)).get(1) for t in range(1, 11)]
    assert seen == ["lost"] * 10
    assert r.collector.context.gpus[1].lost and not r.collector.context.gpus[0].lost
    lost_lines = [m for m in caplog.messages if "GPU 1" in m and "is lost" in m]
    assert len(lost_lines) == 1, caplog.messages
    assert not [m for m in caplog.messages if "answers again" in m]
    r.machine.force("nvmlDeviceGetRemappedRows", "SUCCESS", gpu=1)  # the call answers again
    assert verdicts(r.at(11)) == {0: "ok", 1: "ok"}


def test_a_gpu_that_flaps_must_answer_for_a_while_before_it_is_read_again(run, caplog, monkeypatch):
    """Lost, back, lost again within a minute: it is held lost until it has answered for HOLD_S
    (doubling at each relapse), not taken back on its first answer."""
    import logging
    import time

    r = run("h100-sxm:2")
    monkeypatch.setattr("gpuagent.gpus.gpu.HOLD_S", 0.3)  # answering asked after the first relapse (10 s by default)
    with caplog.at_level(logging.WARNING, logger="gpuagent"):
        r.machine.force("nvmlDeviceGetRemappedRows", "GPU_IS_LOST", gpu=1)
        assert verdicts(r.at(1))[1] == "lost"
        r.machine.force("nvmlDeviceGetRemappedRows", "SUCCESS", gpu=1)
        assert verdicts(r.at(2))[1] == "ok"  # the first time, taken back at once
        r.machine.force("nvmlDeviceGetRemappedRows", "GPU_IS_LOST", gpu=1)
        assert verdicts(r.at(3))[1] == "lost"  # a relapse
        r.machine.force("nvmlDeviceGetRemappedRows", "SUCCESS", gpu=1)
        assert [verdicts(r.at(t))[1] for t in (4, 5, 6)] == ["lost"] * 3  # answering, not for long enough
        time.sleep(0.4)
        assert verdicts(r.at(7))[1] == "ok"
    messages = [m for m in caplog.messages if "GPU 1" in m]
    assert sum("is lost" in m for m in messages) == 2 and sum("answers again" in m for m in messages) == 2, messages
    assert any("is lost again" in m and "before it is read again" in m for m in messages)


def test_a_verdict_is_judged_again_only_when_its_evidence_or_the_time_can_move_it(run, monkeypatch):
    r = run("h100-sxm:1@ecc=0:2:15s", error_window="5m")
    judged = []
    judge = r.collector._judge
    monkeypatch.setattr(r.collector, "_judge", lambda *args: judged.append(args[1]) or judge(*args))
    assert r.at(5)[0]["verdict"] == r.at(10)[0]["verdict"] == "ok"
    assert judged == []  # the evidence of t=0, nothing moving: the verdict kept
    assert r.at(20)[0]["verdict"] == "degraded"  # the count grew: judged
    assert r.at(30)[0]["verdict"] == r.at(200)[0]["verdict"] == "degraded"
    assert len(judged) == 3  # the window holds the growth: judged every run while it does
    got = r.at(330)[0]
    assert got["verdict"] == "ok" and got["verdict_reason"] == "No fault evidence."
    assert r.at(340)[0]["verdict_reason"] == "No fault evidence."
    assert len(judged) == 4  # the growth left the window: the verdict kept again
