"""Simulator requests of issues 4 and 5: clock-event reason time counters, PCIe replay rollovers,
the machine's call counter, NVLink refused in MIG mode, XIDs tied to a MIG instance."""

from __future__ import annotations

import json

import pynvml
import pytest

from gpuagent.errors import AgentError
from gpuagent.sim import ManualClock, SimMachine, load_profile
from gpuagent.sim.load import LoadModel

REASON_FIELDS = {
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP: pynvml.nvmlClocksEventReasonSwPowerCap,
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST: pynvml.nvmlClocksEventReasonSyncBoost,
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN: (pynvml.nvmlClocksEventReasonSwThermalSlowdown),
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN: (pynvml.nvmlClocksEventReasonHwThermalSlowdown),
    pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN: (pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown),
}
CAP = pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP
THERMAL = pynvml.NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN
NA32 = 0xFFFFFFFF


def handles():
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


def fields(handle, ids):
    """field id -> (return code, value, value type)."""
    out = {}
    for fid, fv in zip(ids, pynvml.nvmlDeviceGetFieldValues(handle, ids), strict=True):
        value = fv.value.ullVal if fv.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG else fv.value.uiVal
        out[fid] = (
            fv.nvmlReturn,
            value if fv.nvmlReturn == pynvml.NVML_SUCCESS else None,
            fv.valueType,
        )
    return out


def capped_profile(tmp_path, name: str, limit_w: float) -> str:
    profile = load_profile(name)
    profile["name"] = f"{name}-capped"
    profile["power_w"]["limit"] = limit_w
    path = tmp_path / f"{name}-capped.json"
    path.write_text(json.dumps(profile))
    return str(path)


# -- 1. clock-event reason time counters ------------------------------------------------


def test_nvml_field_ids_are_the_ones_in_pynvml():
    assert sorted(REASON_FIELDS) == [74, 76, 269, 270, 271]
    assert pynvml.NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER == 95


@pytest.mark.parametrize(
    "profile",
    [
        "l40s",
        "l40s-vgpu",
        "a100-sxm4",
        "a100-sxm4-mig",
        "h100-pcie",
        "h100-sxm",
        "h100-sxm-mig",
        "h200",
    ],
)
def test_reason_counters_answered_as_ull_ns_on_datacenter_cards(profile, simulated_fleet, sim_clock):
    simulated_fleet(profile, scenario="training")
    sim_clock.advance(30)
    (h,) = handles()
    got = fields(h, list(REASON_FIELDS))
    for fid, (code, value, kind) in got.items():
        assert code == pynvml.NVML_SUCCESS, fid
        assert kind == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        assert 0 <= value <= 30 * 10**9, fid
    # the model never sets sync boost, HW thermal or HW power brake: a healthy card
    for fid in (76, 270, 271):
        assert got[fid][1] == 0


def test_reason_counters_on_geforce_as_the_captures_show(simulated_fleet, sim_clock, tmp_path):
    # RTX 2080 SUPER / 4080 SUPER (595, 610) and RTX 3080 (XML v13) captures: the five
    # "Clocks Event Reasons Counters" have values (0 us or more), not N/A; supported 0x1FF.
    simulated_fleet("rtx4090:1", scenario="training")
    sim_clock.advance(30)
    (h,) = handles()
    for fid, (code, value, _) in fields(h, list(REASON_FIELDS)).items():
        assert code == pynvml.NVML_SUCCESS and value >= 0, fid
    assert pynvml.nvmlDeviceGetSupportedClocksEventReasons(h) == 0x1FF
    # a profile can still say the card refuses them; the rest of the batch still answers
    profile = load_profile("rtx4090")
    profile["clocks_event_reason_counters"] = False
    path = tmp_path / "no-counters.json"
    path.write_text(json.dumps(profile))
    simulated_fleet(str(path), scenario="training")
    (h,) = handles()
    for fid, (code, _, _) in fields(h, list(REASON_FIELDS)).items():
        assert code == pynvml.NVML_ERROR_NOT_SUPPORTED, fid
    assert fields(h, [pynvml.NVML_FI_DEV_POWER_INSTANT])[pynvml.NVML_FI_DEV_POWER_INSTANT][0] == 0


def test_profile_key_overrides_the_default(simulated_fleet, tmp_path):
    profile = load_profile("rtx4090")
    profile["architecture"] = "Pascal"  # no counters by default
    profile["clocks_event_reason_counters"] = True
    path = tmp_path / "4090-counters.json"
    path.write_text(json.dumps(profile))
    simulated_fleet(str(path))
    (h,) = handles()
    assert fields(h, [CAP])[CAP][0] == pynvml.NVML_SUCCESS


def test_power_cap_time_grows_exactly_while_the_bit_is_set(simulated_fleet, sim_clock, tmp_path):
    # A 250 W cap on an L40S under training: capped most of the time, never during the
    # checkpoint pauses; 0.25 s steps see the bit flip between knots.
    simulated_fleet(capped_profile(tmp_path, "l40s", 250), scenario="training")
    (h,) = handles()
    step = 0.25
    last = fields(h, [CAP])[CAP][1]
    last_set = bool(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h) & pynvml.nvmlClocksEventReasonSwPowerCap)
    set_steps = clear_steps = 0
    for _ in range(int(600 / step)):
        sim_clock.advance(step)
        now = fields(h, [CAP])[CAP][1]
        is_set = bool(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h) & pynvml.nvmlClocksEventReasonSwPowerCap)
        grew = now - last
        assert 0 <= grew <= step * 1e9 + 1  # monotonic, never faster than time
        if last_set and is_set:
            set_steps += 1
            assert grew > 0.5 * step * 1e9  # (the bit may drop and come back within a step)
        elif not last_set and not is_set:
            clear_steps += 1
            assert grew < 0.5 * step * 1e9
        last, last_set = now, is_set
    assert set_steps > 1000 and clear_steps > 10  # both phases were seen
    assert 0.5 * 600e9 < last < 600e9


def test_reason_time_is_deterministic_and_independent_of_sampling():
    # Same (profile, seed, index, scenario, t) -> same counter, however often it was sampled.
    profile = load_profile("h100-sxm")
    profile["power_w"]["limit"] = 500
    coarse = LoadModel(profile, seed=4, index=1, scenario="training")
    fine = LoadModel(profile, seed=4, index=1, scenario="training")
    for t in range(1, 50):
        fine.state(t * 7.3)
    a, b = coarse.state(357.7), fine.state(357.7)
    assert a.reason_s == b.reason_s
    assert a.reason_s[pynvml.nvmlClocksEventReasonSwPowerCap] > 0
    # and replaying from zero (time going backwards) gives the same answer
    fine.state(10.0)
    assert fine.state(357.7).reason_s == a.reason_s


def test_idle_gpu_accumulates_no_power_cap_time(simulated_fleet, sim_clock):
    simulated_fleet("h100-sxm:1", scenario="idle")
    sim_clock.advance(120)
    (h,) = handles()
    assert fields(h, [CAP])[CAP][1] == 0


def test_sw_thermal_time_counts_above_the_slowdown_threshold():
    # An L40S whose slowdown threshold sits below its loaded temperature: the SW thermal bit
    # is set once it warms up, and the counter tracks it.
    profile = load_profile("l40s")
    profile["temperature_c"]["slowdown"] = profile["temperature_c"]["idle"] + 10
    model = LoadModel(profile, seed=0, index=0, scenario="training")
    seen = 0.0
    prev = model.state(0.0)
    for k in range(1, 1201):
        st = model.state(k * 0.5)
        grew = (
            st.reason_s[pynvml.nvmlClocksEventReasonSwThermalSlowdown]
            - prev.reason_s[pynvml.nvmlClocksEventReasonSwThermalSlowdown]
        )
        assert 0 <= grew <= 0.5 + 1e-9
        if prev.reasons & st.reasons & pynvml.nvmlClocksEventReasonSwThermalSlowdown:
            assert grew > 0.25
            seen += 1
        prev = st
    assert seen > 100


# -- 2. PCIe replay rollovers ------------------------------------------------------------


@pytest.mark.parametrize("profile", ["l40s", "rtx4090", "h100-sxm", "a100-sxm4-mig"])
def test_replay_rollover_counter_answered_zero_with_the_replay_counter(profile, simulated_fleet):
    machine = simulated_fleet(profile)
    machine.add_pcie_replays(0, 7)
    (h,) = handles()
    replay, rollover = (
        pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
        pynvml.NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER,
    )
    got = fields(h, [replay, rollover])
    assert got[replay][:2] == (pynvml.NVML_SUCCESS, 7)
    assert got[rollover] == (pynvml.NVML_SUCCESS, 0, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT)


# -- 3. call counter -------------------------------------------------------------------


def test_machine_counts_the_c_symbols_it_receives(simulated_fleet):
    machine = simulated_fleet("l40s:2,h100-sxm-mig:1")
    machine.reset_calls()
    hs = handles()
    assert machine.calls == {"nvmlDeviceGetCount_v2": 1, "nvmlDeviceGetHandleByIndex_v2": 3}
    before = machine.calls
    for _ in range(3):
        pynvml.nvmlDeviceGetPowerUsage(hs[0])
    pynvml.nvmlDeviceGetTemperature(hs[1], pynvml.NVML_TEMPERATURE_GPU)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetFanSpeed(hs[1])  # refused calls count too
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(hs[2], 0)
    pynvml.nvmlDeviceGetMemoryInfo(mig)  # a MIG handle counts on its GPU
    gi = pynvml.nvmlDeviceGetGpuInstanceById(hs[2], 1)
    pynvml.nvmlGpuInstanceGetInfo(gi)  # so does a GPU-instance handle
    delta = machine.calls - before  # snapshots: the difference is the calls in between
    assert delta == {
        "nvmlDeviceGetPowerUsage": 3,
        "nvmlDeviceGetTemperature": 1,
        "nvmlDeviceGetFanSpeed": 1,
        "nvmlDeviceGetMigDeviceHandleByIndex": 1,
        "nvmlDeviceGetMemoryInfo": 1,
        "nvmlDeviceGetGpuInstanceById": 1,
        "nvmlGpuInstanceGetInfo": 1,
    }
    per_gpu = machine.calls_by_gpu
    assert per_gpu[0] == {"nvmlDeviceGetPowerUsage": 3}
    assert per_gpu[1] == {"nvmlDeviceGetTemperature": 1, "nvmlDeviceGetFanSpeed": 1}
    assert per_gpu[2] == {
        "nvmlDeviceGetMigDeviceHandleByIndex": 1,
        "nvmlDeviceGetMemoryInfo": 1,
        "nvmlDeviceGetGpuInstanceById": 1,
        "nvmlGpuInstanceGetInfo": 1,
    }
    machine.reset_calls()
    assert not machine.calls and not any(machine.calls_by_gpu)


def test_calls_before_init_and_with_bad_handles_still_count():
    machine = SimMachine("l40s:1", clock=ManualClock())
    from gpuagent import sim

    sim.install(machine)
    try:
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            pynvml.nvmlDeviceGetCount()
        assert machine.calls["nvmlDeviceGetCount_v2"] == 1
        pynvml.nvmlErrorString(pynvml.NVML_ERROR_UNINITIALIZED)
        assert machine.calls["nvmlErrorString"] == 1
        pynvml.nvmlInit()
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceGetPowerUsage(pynvml.c_nvmlDevice_t())
        assert machine.calls["nvmlDeviceGetPowerUsage"] == 1
        assert not any(machine.calls_by_gpu)  # no GPU resolved from a NULL handle
        pynvml.nvmlShutdown()
    finally:
        sim.uninstall()


# -- 4. NVLink refused in MIG mode ------------------------------------------------------


@pytest.mark.parametrize("profile", ["h100-sxm-mig", "a100-sxm4-mig"])
def test_nvlink_queries_not_supported_in_mig_mode(profile, simulated_fleet):
    simulated_fleet(f"{profile}:2")
    for h in handles():
        for call in (
            lambda h=h: pynvml.nvmlDeviceGetNvLinkState(h, 0),
            lambda h=h: pynvml.nvmlDeviceGetNvLinkVersion(h, 0),
            lambda h=h: pynvml.nvmlDeviceGetNvLinkCapability(h, 0, pynvml.NVML_NVLINK_CAP_P2P_SUPPORTED),
            lambda h=h: pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, 0),
            lambda h=h: pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, 0),
            lambda h=h: pynvml.nvmlDeviceGetNvLinkErrorCounter(h, 0, pynvml.NVML_NVLINK_ERROR_DL_REPLAY),
        ):
            with pytest.raises(pynvml.NVMLError_NotSupported):
                call()
        got = fields(h, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX])
        assert all(code == pynvml.NVML_ERROR_NOT_SUPPORTED for code, _, _ in got.values())
        # P2P over NVLink: none in MIG mode either
        other = handles()[1] if h is handles()[0] else handles()[0]
        assert (
            pynvml.nvmlDeviceGetP2PStatus(h, other, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
            == pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
        )


def test_mig_capable_gpu_with_mig_off_keeps_its_links(simulated_fleet):
    simulated_fleet("h100-sxm:1")
    (h,) = handles()
    assert pynvml.nvmlDeviceGetNvLinkState(h, 0) == pynvml.NVML_FEATURE_ENABLED


# -- 5. XIDs tied to a MIG instance ------------------------------------------------------


def xid_set(hs):
    es = pynvml.nvmlEventSetCreate()
    for h in hs:
        pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    return es


def test_inject_xid_with_mig_instance_ids(simulated_fleet, sim_clock):
    machine = simulated_fleet("h100-sxm-mig:1")
    (h,) = handles()
    es = xid_set([h])
    machine.inject_xid(0, 43, at=1, gi_id=2, ci_id=0)
    machine.inject_xid(0, 31, at=2, gi_id=1)
    machine.inject_xid(0, 79, at=3)
    sim_clock.advance(5)
    got = []
    for _ in range(3):
        data = pynvml.nvmlEventSetWait_v2(es, 0)
        got.append((data.eventData, data.gpuInstanceId, data.computeInstanceId))
    assert got == [(43, 2, 0), (31, 1, NA32), (79, NA32, NA32)]
    pynvml.nvmlEventSetFree(es)


@pytest.mark.parametrize(
    "spec, kwargs, message",
    [
        ("h100-sxm-mig:1", {"gi_id": 9}, "no MIG GPU instance 9"),
        ("h100-sxm-mig:1", {"gi_id": 1, "ci_id": 5}, "no compute instance 5"),
        ("h100-sxm-mig:1", {"ci_id": 0}, "ci_id needs gi_id"),
        ("h100-sxm:1", {"gi_id": 1}, "has none"),
    ],
)
def test_inject_xid_refuses_instances_the_gpu_does_not_have(spec, kwargs, message, simulated_fleet):
    machine = simulated_fleet(spec)
    with pytest.raises(AgentError, match=message):
        machine.inject_xid(0, 43, **kwargs)
