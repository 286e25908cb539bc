"""Return codes of an imported capture follow nvml.h or what the capture shows (issue 32, item 7),
and a load scenario moves between the captured idle and loaded runs."""

from __future__ import annotations

import json

import pynvml
import pytest
from captures import CAPTURES, capture_names, capture_profile

H100 = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
RTX2080 = "linux-x86_64__nvidia-geforce-rtx-2080-super__595.71.05.txt"
RTX4080 = "linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt"
L40S = "linux-x86_64__nvidia-l40s__595.80.txt"
A100 = "telegraf-a100-sxm4-v12.xml"


def _open(name, tmp_path, simulated_fleet, spec_suffix="", scenario=None):
    if not (CAPTURES / name).exists():
        pytest.skip(f"capture {name} not at {CAPTURES}")
    tmp_path.mkdir(parents=True, exist_ok=True)
    path, profile = capture_profile(name, tmp_path)
    machine = simulated_fleet(path + spec_suffix, scenario=scenario)
    return machine, profile, pynvml.nvmlDeviceGetHandleByIndex(0)


def _code(fn, *args):
    try:
        fn(*args)
    except pynvml.NVMLError as exc:
        return exc.value
    return pynvml.NVML_SUCCESS


def _field(handle, field_id):
    [fv] = pynvml.nvmlDeviceGetFieldValues(handle, [field_id])
    return fv


@pytest.mark.parametrize("name", [H100, RTX2080, L40S])
def test_power_management_mode_is_deprecated_from_590(name, tmp_path, simulated_fleet):
    _, _, h = _open(name, tmp_path, simulated_fleet)
    assert _code(pynvml.nvmlDeviceGetPowerManagementMode, h) == pynvml.NVML_ERROR_DEPRECATED


@pytest.mark.parametrize("name, supported", [(RTX2080, False), (A100, False), (H100, True), (RTX4080, True)])
def test_power_average_field_on_ampere_but_ga100_and_newer(name, supported, tmp_path, simulated_fleet):
    _, _, h = _open(name, tmp_path, simulated_fleet)
    fv = _field(h, pynvml.NVML_FI_DEV_POWER_AVERAGE)
    assert (fv.nvmlReturn == pynvml.NVML_SUCCESS) is supported


@pytest.mark.parametrize("name, boost", [(RTX2080, None), (RTX4080, None), (H100, 1980)])
def test_max_customer_boost_clock_as_the_capture_says(name, boost, tmp_path, simulated_fleet):
    _, _, h = _open(name, tmp_path, simulated_fleet)
    if boost is None:
        assert _code(pynvml.nvmlDeviceGetMaxCustomerBoostClock, h, 0) == pynvml.NVML_ERROR_NOT_SUPPORTED
    else:
        assert pynvml.nvmlDeviceGetMaxCustomerBoostClock(h, pynvml.NVML_CLOCK_GRAPHICS) == boost


def test_nvlink_inactive_links_versus_no_nvlink(tmp_path, simulated_fleet):
    # 2080 SUPER: "Unable to retrieve Nvlink information as all links are inActive";
    # 4080 SUPER: "Device does not have or support Nvlink".
    _, _, h = _open(RTX2080, tmp_path / "a", simulated_fleet)
    assert pynvml.nvmlDeviceGetNvLinkState(h, 0) == pynvml.NVML_FEATURE_DISABLED
    _, _, h = _open(RTX4080, tmp_path / "b", simulated_fleet)
    assert _code(pynvml.nvmlDeviceGetNvLinkState, h, 0) == pynvml.NVML_ERROR_NOT_SUPPORTED


def test_symbols_the_driver_exports_are_found(tmp_path, simulated_fleet):
    machine, profile, h = _open(H100, tmp_path, simulated_fleet)
    exported = set(profile["nvml_symbols"])
    for symbol in ("nvmlDeviceGetMarginTemperature", "nvmlDeviceGetFanSpeedRPM", "nvmlDeviceGetTargetFanSpeed"):
        assert symbol in exported
    assert pynvml.nvmlDeviceGetMarginTemperature(h) == 46  # "GPU T.Limit Temp : 46 C"
    # The H100 has no fan: NOT_SUPPORTED, not FUNCTION_NOT_FOUND.
    assert _code(pynvml.nvmlDeviceGetFanSpeedRPM, h) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert _code(pynvml.nvmlDeviceGetTargetFanSpeed, h, 0) == pynvml.NVML_ERROR_NOT_SUPPORTED
    tlimit = {
        pynvml.NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT: -8,
        pynvml.NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT: -2,
        pynvml.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT: 0,
        pynvml.NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT: 0,
    }
    for field_id, value in tlimit.items():
        fv = _field(h, field_id)
        assert fv.nvmlReturn == pynvml.NVML_SUCCESS and fv.value.siVal == value


@pytest.mark.parametrize("name", capture_names())
def test_every_capture_has_a_bus_width(name, tmp_path, simulated_fleet):
    if name is None:
        pytest.skip(f"no nvidia-smi captures at {CAPTURES}")
    _, _, h = _open(name, tmp_path, simulated_fleet)
    assert pynvml.nvmlDeviceGetMemoryBusWidth(h) in (160, 192, 256, 320, 384, 5120)


def test_mig_device_names_are_text(tmp_path, simulated_fleet):
    _, _, h = _open("linux-x86_64__nvidia-h100-mig__590.48.01.txt", tmp_path, simulated_fleet)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"


def test_count_above_one_gives_gpu0_the_captures_identity(tmp_path, simulated_fleet):
    machine, profile, h0 = _open(A100, tmp_path, simulated_fleet, ":3")
    uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(3)]
    buses = [pynvml.nvmlDeviceGetPciInfo_v3(pynvml.nvmlDeviceGetHandleByIndex(i)).busId for i in range(3)]
    assert uuids[0] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert buses[0] in ("00000000:01:00.0", b"00000000:01:00.0")
    assert len(set(uuids)) == 3 and len(set(buses)) == 3


def test_a_load_scenario_moves_to_the_captured_loaded_run(tmp_path, simulated_fleet, sim_clock):
    machine, profile, h = _open(H100, tmp_path, simulated_fleet, scenario="training")
    loaded = profile["captured"]["load"]
    sim_clock.advance(600)
    draws = []
    for _ in range(60):
        sim_clock.advance(1)
        draws.append(pynvml.nvmlDeviceGetPowerUsage(h) / 1000)
    # Between the captured idle draw (69.85 W) and the loaded run's (629.45 W), reaching it.
    assert min(draws) >= profile["captured"]["idle"]["power_w"] * 0.9
    assert max(draws) <= loaded["power_w"] * 1.05 and max(draws) >= loaded["power_w"] * 0.9
    assert pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) <= loaded["clocks"]["sm"]
    pids = {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
    assert pids == {p["pid"] for p in loaded["processes"]}  # memhog x2, gpu_burn
    assert json.dumps(profile["temperature_c"]["max"]) == str(loaded["temp_c"])
