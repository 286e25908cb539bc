"""Fault injection: XID events through event sets, lost GPUs, forced errors."""

import ctypes
import json
import os

import pynvml
import pytest

from gpuagent.errors import AgentError
from gpuagent.gpus.gpu import GpuLost
from gpuagent.sim.faults import parse_fault, parse_seconds
from gpuagent.sim.profile import load_profile


def handles():
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


def xid_set(hs):
    es = pynvml.nvmlEventSetCreate()
    for h in hs:
        pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    return es


def test_xid_from_spec_delivered_after_its_time(simulated_fleet, sim_clock):
    simulated_fleet("h100-sxm:4@xid=1:79:20s@xid=3:48:1m")
    hs = handles()
    es = xid_set(hs)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait(es, 0)
    sim_clock.advance(21)
    data = pynvml.nvmlEventSetWait_v2(es, 100)
    assert data.eventType == pynvml.nvmlEventTypeXidCriticalError
    assert data.eventData == 79
    # the GPU now answers GPU_IS_LOST (as after an XID 79 on hardware): compare handles, not UUIDs
    assert ctypes.cast(data.device, ctypes.c_void_p).value == ctypes.cast(hs[1], ctypes.c_void_p).value
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetUUID(hs[1])
    # The lost GPU's event set then answers GPU_IS_LOST once (nvml.h lists it for the wait).
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlEventSetWait_v2(es, 0)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 0)  # delivered once
    sim_clock.advance(60)
    data = pynvml.nvmlEventSetWait_v2(es, 0)
    assert (data.eventData, pynvml.nvmlDeviceGetUUID(data.device)) == (
        48,
        pynvml.nvmlDeviceGetUUID(hs[3]),
    )
    pynvml.nvmlEventSetFree(es)


def test_inject_xid_programmatically_only_to_registered_gpus(simulated_fleet, sim_clock):
    machine = simulated_fleet("l40s:2")
    a, b = handles()
    es = xid_set([a])
    machine.inject_xid(1, 31)  # GPU 1 is not registered
    machine.inject_xid(0, 13, at=5)
    sim_clock.advance(1)
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(es, 0)
    sim_clock.advance(5)
    assert pynvml.nvmlEventSetWait_v2(es, 0).eventData == 13


def test_register_unsupported_event_types_on_geforce(simulated_fleet):
    simulated_fleet("rtx4090:1")
    (h,) = handles()
    es = pynvml.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeDoubleBitEccError, es)
    supported = pynvml.nvmlDeviceGetSupportedEventTypes(h)
    assert supported & pynvml.nvmlEventTypeXidCriticalError
    pynvml.nvmlDeviceRegisterEvents(h, supported, es)


def test_lost_gpu_answers_gpu_is_lost_for_every_call_others_keep_answering(simulated_fleet, sim_clock):
    machine = simulated_fleet("h100-sxm:3@lost=1:30s", scenario="training")
    hs = handles()
    es = xid_set(hs)
    sim_clock.advance(29)
    assert pynvml.nvmlDeviceGetPowerUsage(hs[1]) > 0
    sim_clock.advance(2)
    calls = [
        lambda h: pynvml.nvmlDeviceGetPowerUsage(h),
        lambda h: pynvml.nvmlDeviceGetName(h),
        lambda h: pynvml.nvmlDeviceGetUUID(h),
        lambda h: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),
        lambda h: pynvml.nvmlDeviceGetClockInfo(h, 0),
        lambda h: pynvml.nvmlDeviceGetFanSpeed(h),  # even a NOT_SUPPORTED call
        lambda h: pynvml.nvmlDeviceGetP2PStatus(h, hs[0], 1),
        lambda h: pynvml.nvmlDeviceGetNvLinkState(h, 0),
        lambda h: pynvml.nvmlDeviceGetComputeRunningProcesses(h),
    ]
    for call in calls:
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call(hs[1])
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetP2PStatus(hs[0], hs[1], 1)  # a lost peer
    for h in (hs[0], hs[2]):
        assert pynvml.nvmlDeviceGetPowerUsage(h) > 0
        assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    # the fall off the bus is an XID 79
    data = pynvml.nvmlEventSetWait_v2(es, 0)
    assert data.eventData == 79
    # Gpu.query turns it into GpuLost and remembers
    gpu = machine.gpus[1]
    with pytest.raises(GpuLost):
        gpu.query(pynvml.nvmlDeviceGetPowerUsage)
    assert gpu.lost and not machine.gpus[0].lost


def test_force_from_spec_and_programmatic(simulated_fleet):
    machine = simulated_fleet("l40s:2@force=nvmlDeviceGetPowerUsage:NOT_SUPPORTED:1")
    a, b = handles()
    assert pynvml.nvmlDeviceGetPowerUsage(a) > 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetPowerUsage(b)
    assert machine.gpus[1].query(pynvml.nvmlDeviceGetPowerUsage) is None
    machine.force("nvmlDeviceGetTemperature", "UNKNOWN")
    for h in (a, b):
        with pytest.raises(pynvml.NVMLError_Unknown):
            pynvml.nvmlDeviceGetTemperature(h, 0)
    machine.force("nvmlDeviceGetTemperature", 0)  # SUCCESS clears it
    assert pynvml.nvmlDeviceGetTemperature(a, 0) > 0
    machine.force("nvmlSystemGetDriverVersion", pynvml.NVML_ERROR_NO_PERMISSION)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pynvml.nvmlSystemGetDriverVersion()
    machine.clear_forced()
    assert pynvml.nvmlSystemGetDriverVersion() == "595.80"


def test_faults_from_profile(simulated_fleet, sim_clock, tmp_path):
    p = load_profile("l40s")
    p["faults"] = [
        {"type": "xid", "gpu": 1, "code": 94, "at": "10s"},
        {"type": "force", "symbol": "nvmlDeviceGetPcieReplayCounter", "code": "GPU_IS_LOST"},
        {"type": "lost", "gpu": 0, "at": "1h"},
    ]
    path = tmp_path / "faulty.json"
    path.write_text(json.dumps(p))
    machine = simulated_fleet(f"rtx4090:1,{path}:2")
    hs = handles()
    es = xid_set(hs)
    sim_clock.advance(11)
    data = pynvml.nvmlEventSetWait_v2(es, 0)
    assert data.eventData == 94 and pynvml.nvmlDeviceGetUUID(data.device) == pynvml.nvmlDeviceGetUUID(hs[2])
    assert pynvml.nvmlDeviceGetPcieReplayCounter(hs[0]) == 0  # the rtx4090 is not from that profile
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetPcieReplayCounter(hs[1])
    assert machine.devices[1].lost_at == 3600


@pytest.mark.parametrize("text", ["xid=1:79", "lost=a:1s", "force=x", "boom=1", "xid=0:79:soon"])
def test_bad_fault_text(text):
    with pytest.raises(AgentError, match="fault"):
        parse_fault(text, count=2)


@pytest.mark.parametrize(
    ("symbol", "hint"),
    [
        ("nvmlFoo", "e.g. nvmlDeviceGetPowerUsage"),
        ("nvmlDeviceGetPowerUsag", "did you mean nvmlDeviceGetPowerUsage?"),
        ("nvmlDeviceGetTemprature", "did you mean nvmlDeviceGetTemperature?"),
    ],
)
def test_a_fault_on_a_symbol_libnvidia_ml_lacks_is_refused(simulated_fleet, tmp_path, symbol, hint):
    """Accepted, it would force a call nothing makes, and the test using it would test nothing."""
    with pytest.raises(AgentError, match=f"bad fault .*no NVML function '{symbol}'.*{hint}"):
        parse_fault(f"force={symbol}:NOT_SUPPORTED", count=1)
    machine = simulated_fleet("l40s:1")
    with pytest.raises(AgentError, match=f"no NVML function '{symbol}'.*{hint}"):
        machine.force(symbol, "NOT_SUPPORTED")
    assert machine.forced == {}
    p = load_profile("l40s")
    p["faults"] = [{"type": "force", "symbol": symbol, "code": "UNKNOWN"}]
    path = tmp_path / "faulty.json"
    path.write_text(json.dumps(p))
    with pytest.raises(AgentError, match=f"faulty.json.*no NVML function '{symbol}'"):
        simulated_fleet(str(path))


def test_durations():
    assert parse_seconds("500ms") == 0.5
    assert parse_seconds("2m") == 120
    assert parse_seconds("1h") == 3600
    assert parse_seconds(7) == 7.0


def test_ecc_and_replay_counters(simulated_fleet):
    machine = simulated_fleet("h100-sxm:2")
    a, b = handles()
    machine.add_ecc_errors(1, corrected=5, uncorrected=1)
    machine.add_pcie_replays(1, 3)
    assert pynvml.nvmlDeviceGetTotalEccErrors(b, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC) == 5
    assert (
        pynvml.nvmlDeviceGetMemoryErrorCounter(
            b,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            pynvml.NVML_AGGREGATE_ECC,
            pynvml.NVML_MEMORY_LOCATION_DRAM,
        )
        == 1
    )
    assert pynvml.nvmlDeviceGetRemappedRows(b)[1] == 1
    assert pynvml.nvmlDeviceGetPcieReplayCounter(b) == 3
    assert pynvml.nvmlDeviceGetTotalEccErrors(a, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC) == 0


def test_a_fault_without_a_gpu_stays_in_its_spec_item(simulated_fleet):
    machine = simulated_fleet("h100-sxm:2,l40s:1@force=nvmlDeviceGetPowerUsage:NOT_SUPPORTED")
    h100a, h100b, l40s = handles()
    assert pynvml.nvmlDeviceGetPowerUsage(h100a) > 0 and pynvml.nvmlDeviceGetPowerUsage(h100b) > 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetPowerUsage(l40s)
    assert machine.gpus[0].query(pynvml.nvmlDeviceGetPowerUsage) is not None
    # A system call has no GPU to scope it to: the machine's.
    simulated_fleet("h100-sxm:1,l40s:1@force=nvmlSystemGetDriverVersion:NO_PERMISSION")
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pynvml.nvmlSystemGetDriverVersion()


def test_a_fault_on_a_symbol_no_collector_asks_is_named_in_one_line(tmp_path):
    import subprocess
    import sys

    def run(spec, level="warning"):
        return subprocess.run(
            [sys.executable, "-m", "gpuagent", "run", "--simulate", spec, "--once", "--test", "--log-level", level],
            capture_output=True, text=True, timeout=120, env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
        )  # fmt: skip

    unasked = run("l40s:2@force=nvmlDeviceGetTemperature:UNKNOWN")
    assert unasked.returncode == 0, unasked.stderr
    lines = [line for line in unasked.stderr.splitlines() if "nvmlDeviceGetTemperature" in line]
    assert len(lines) == 1 and "no collector asks it (they ask nvmlDeviceGetTemperatureV)" in lines[0]
    asked = run("l40s:2@force=nvmlDeviceGetTemperatureV:UNKNOWN", "info")  # the docs' example now
    assert "no collector asks" not in asked.stderr
    assert "DEPRECATED" not in asked.stderr  # a call the driver retired: DEBUG, not a line per GPU at start
