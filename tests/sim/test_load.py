"""The load model through pynvml: determinism, power cap, clocks, energy, temperature."""

import pynvml
import pytest

from gpuagent.errors import AgentError
from gpuagent.sim import SimMachine
from gpuagent.sim.clock import ManualClock


def handles():
    return [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]


def readings(h):
    return (
        pynvml.nvmlDeviceGetPowerUsage(h),
        pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
        pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used,
        pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
    )


def series(simulated_fleet, sim_clock, spec, seed, scenario, steps=40):
    simulated_fleet(spec, seed=seed, scenario=scenario)
    out = []
    for _ in range(steps):
        sim_clock.advance(7.5)
        out.append([readings(h) for h in handles()])
    return out


def test_deterministic_for_a_seed(simulated_fleet):
    a = series(simulated_fleet, ManualClock(), "h100-sxm:2,l40s:1", 7, "mixed")
    b = series(simulated_fleet, ManualClock(), "h100-sxm:2,l40s:1", 7, "mixed")
    c = series(simulated_fleet, ManualClock(), "h100-sxm:2,l40s:1", 8, "mixed")
    assert a == b
    assert a != c


def test_unknown_scenario_is_an_agent_error():
    with pytest.raises(AgentError, match="scenario 'gaming'"):
        SimMachine("l40s", scenario="gaming")


@pytest.mark.parametrize("spec", ["h100-sxm:2", "l40s:2", "rtx4090:1", "a100-sxm4:1", "h200:1"])
def test_power_never_above_enforced_limit_and_capping_sets_reason(simulated_fleet, sim_clock, spec):
    simulated_fleet(spec, seed=2, scenario="training")
    hs = handles()
    limits = [pynvml.nvmlDeviceGetEnforcedPowerLimit(h) for h in hs]
    capped_seen = 0
    for _ in range(1200):
        sim_clock.advance(0.75)
        for h, limit in zip(hs, limits, strict=True):
            power = pynvml.nvmlDeviceGetPowerUsage(h)
            assert power <= limit
            reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
            if reasons & pynvml.nvmlClocksEventReasonSwPowerCap:
                capped_seen += 1
                assert power >= limit * 0.98
                assert pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) < pynvml.nvmlDeviceGetMaxClockInfo(
                    h, pynvml.NVML_CLOCK_SM
                )
    assert capped_seen > 0  # training demand exceeds the cap on these cards


def test_energy_is_monotonic_and_the_integral_of_power(simulated_fleet, sim_clock):
    simulated_fleet("h100-sxm:1,l40s:1", seed=5, scenario="inference")
    hs = handles()
    e0 = [pynvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in hs]
    p_prev = [pynvml.nvmlDeviceGetPowerUsage(h) for h in hs]
    integral = [0.0 for _ in hs]
    last = list(e0)
    dt = 0.5
    for _ in range(2400):  # 20 minutes
        sim_clock.advance(dt)
        for i, h in enumerate(hs):
            p = pynvml.nvmlDeviceGetPowerUsage(h)
            integral[i] += (p + p_prev[i]) / 2 * dt  # mW * s = mJ
            p_prev[i] = p
            e = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
            assert e >= last[i]
            last[i] = e
    for i in range(len(hs)):
        measured = last[i] - e0[i]
        assert measured == pytest.approx(integral[i], rel=0.01)


def test_temperature_lags_power(simulated_fleet, sim_clock):
    machine = simulated_fleet("h100-sxm:1", seed=1, scenario="training")
    (h,) = handles()
    model = machine.devices[0].model
    # find the start of a checkpoint pause: power falls at once, temperature follows slowly
    prev_power = pynvml.nvmlDeviceGetPowerUsage(h)
    for _ in range(2 * model.period_s):
        sim_clock.advance(1)
        power = pynvml.nvmlDeviceGetPowerUsage(h)
        if power < prev_power * 0.5:
            break
        prev_power = power
    else:
        pytest.fail("no pause found")
    t_start = pynvml.nvmlDeviceGetTemperature(h, 0)
    sim_clock.advance(2)
    t_soon = pynvml.nvmlDeviceGetTemperature(h, 0)
    sim_clock.advance(10)
    t_later = pynvml.nvmlDeviceGetTemperature(h, 0)
    assert t_start - t_soon < t_start - t_later  # still falling well after the power dropped
    assert t_soon > t_later


def test_idle_scenario(simulated_fleet, sim_clock):
    simulated_fleet("l40s:1,h100-sxm:1", scenario="idle")
    sim_clock.advance(60)
    for h in handles():
        assert pynvml.nvmlDeviceGetUtilizationRates(h).gpu <= 3
        assert pynvml.nvmlDeviceGetPowerUsage(h) < pynvml.nvmlDeviceGetEnforcedPowerLimit(h) * 0.2
        assert pynvml.nvmlDeviceGetCurrentClocksEventReasons(h) & pynvml.nvmlClocksEventReasonGpuIdle
        assert pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used == 0


def test_training_keeps_memory_busy(simulated_fleet, sim_clock):
    simulated_fleet("a100-sxm4:1", scenario="training")
    sim_clock.advance(100)
    (h,) = handles()
    mem = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert mem.used > mem.total * 0.7
    assert pynvml.nvmlDeviceGetPerformanceState(h) == 0


def test_state_is_evaluated_once_per_tick(simulated_fleet, sim_clock):
    machine = simulated_fleet("h100-sxm:1", scenario="training")
    (h,) = handles()
    calls = []
    model = machine.devices[0].model
    original = model.state
    model.state = lambda t: calls.append(t) or original(t)
    sim_clock.advance(1)
    for _ in range(10):
        pynvml.nvmlDeviceGetPowerUsage(h)
        pynvml.nvmlDeviceGetClockInfo(h, 1)
    assert len(calls) == 1
