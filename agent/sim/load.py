"""Deterministic load model: utilisation, power, clocks, temperature, energy over time.

The model is a function of (profile, seed, GPU index, scenario, time). Demand is
drawn at knots every ``STEP_S`` seconds from a seeded hash (no RNG state, so
any time can be evaluated in any order for a given seed) and interpolated
linearly between knots. From the demand:

- power = min(demand, enforced limit) at every knot; interpolation keeps it
  at or below the limit at every instant;
- clocks drop with (limit / demand) ** 0.4 when the demand exceeds the cap, and
  the SW power-cap clock-event reason (0x4) is set;
- temperature follows a first-order lag of the power (time constant from the
  profile), so it trails power changes;
- energy is the exact integral of the piecewise-linear power (reported in mJ),
  so sampling power at the knots and integrating reproduces it;
- the time spent with each clock-event reason set is exact too: every
  condition behind a reason is linear in time between two knots, so the part
  of an interval where it holds is one sub-interval, found in closed form.

State is carried forward knot by knot (constant memory for long runs); it is
computed lazily when a reading is asked for, at most once per clock tick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuagent.errors import AgentError

SCENARIOS = ("idle", "training", "inference", "mixed")
STEP_S = 1.0
_MASK64 = (1 << 64) - 1

REASON_IDLE = 0x1
REASON_SW_POWER_CAP = 0x4
REASON_SW_THERMAL = 0x20
# Reasons with a time counter (NVML_FI_DEV_CLOCKS_EVENT_REASON_*): SW power cap, sync boost,
# SW/HW thermal slowdown, HW power brake. The model only ever sets the power-cap and SW thermal
# bits, so the other counters stay at 0 (a healthy card).
REASON_SYNC_BOOST = 0x10
REASON_HW_THERMAL = 0x40
REASON_HW_POWER_BRAKE = 0x80

# Shares of "GPU busy" time spent in each kind of work (GPM metrics), per scenario.
WORK_MIX = {
    "idle": {
        "occupancy": 0.0,
        "tensor": 0.0,
        "hmma": 0.0,
        "imma": 0.0,
        "dfma": 0.0,
        "fp16": 0.0,
        "fp32": 0.0,
        "fp64": 0.0,
        "integer": 0.0,
        "dram": 0.0,
        "sm": 0.0,
    },
    "training": {
        "occupancy": 0.55,
        "tensor": 0.62,
        "hmma": 0.58,
        "imma": 0.02,
        "dfma": 0.0,
        "fp16": 0.14,
        "fp32": 0.11,
        "fp64": 0.004,
        "integer": 0.07,
        "dram": 0.48,
        "sm": 0.93,
    },
    "inference": {
        "occupancy": 0.34,
        "tensor": 0.41,
        "hmma": 0.30,
        "imma": 0.10,
        "dfma": 0.0,
        "fp16": 0.09,
        "fp32": 0.12,
        "fp64": 0.0,
        "integer": 0.10,
        "dram": 0.72,
        "sm": 0.81,
    },
}


def check_scenario(scenario: str | None) -> str:
    scenario = scenario or "mixed"
    if scenario not in SCENARIOS:
        raise AgentError(f"unknown simulator scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    return scenario


def device_scenario(scenario: str, seed: int, index: int) -> str:
    """'mixed' gives each GPU one of training / inference / idle, deterministically."""
    if scenario != "mixed":
        return scenario
    return ("training", "inference", "training", "idle")[(index + seed) % 4]


def _span(*conditions: tuple[float, float]) -> tuple[float, float]:
    """The sub-interval [lo, hi] of [0, 1] where every ``v0 + (v1 - v0) * f >= 0`` holds."""
    lo, hi = 0.0, 1.0
    for v0, v1 in conditions:
        d = v1 - v0
        if d == 0:
            if v0 < 0:
                return 0.0, 0.0
            continue
        root = -v0 / d
        if d > 0:
            lo = max(lo, root)
        else:
            hi = min(hi, root)
    return (lo, hi) if hi > lo else (0.0, 0.0)


def _within(span: tuple[float, float], f: float) -> float:
    """How much of [0, f] lies in ``span``."""
    return max(0.0, min(span[1], f) - span[0])


def _hash01(seed: int, index: int, channel: int, k: int) -> float:
    """splitmix64 of the inputs, as a float in [0, 1)."""
    z = (seed * 0x9E3779B97F4A7C15 + index * 0xBF58476D1CE4E5B9 + channel * 0x94D049BB133111EB + k) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    z ^= z >> 31
    return (z >> 11) / float(1 << 53)


@dataclass(slots=True)
class Knot:
    k: int
    util: float  # GPU busy, %
    mem_util: float  # DRAM busy, %
    demand_w: float
    power_w: float
    temp_c: float
    energy_j: float  # at this knot
    util_s: float  # integral of util (%·s) up to this knot
    mem_util_s: float
    cap_s: float = 0.0  # seconds with the SW power-cap reason set, up to this knot
    thermal_s: float = 0.0  # seconds with the SW thermal-slowdown reason set
    # The part [lo, hi] of the interval (previous knot -> this one, as 0..1) where each holds.
    cap_span: tuple[float, float] = (0.0, 0.0)
    thermal_span: tuple[float, float] = (0.0, 0.0)


@dataclass(slots=True)
class LoadState:
    """Every dynamic reading at one instant."""

    t: float
    util: float
    mem_util: float
    power_w: float
    demand_w: float
    energy_j: float
    temp_c: float
    util_s: float
    mem_util_s: float
    sm_clock: int
    graphics_clock: int
    mem_clock: int
    video_clock: int
    reasons: int
    pstate: int
    capped: bool
    mem_used_bytes: int
    fan_pct: int | None
    pcie_gen: int
    pcie_tx_kbps: int
    pcie_rx_kbps: int
    # Seconds spent with each time-counted reason bit set since t=0 (bit -> seconds).
    reason_s: dict[int, float]


class LoadModel:
    def __init__(self, profile: dict, seed: int, index: int, scenario: str | None):  # None: "mixed"
        self.profile = profile
        self.seed = int(seed)
        self.index = int(index)
        self.scenario = device_scenario(check_scenario(scenario), self.seed, self.index)
        self.mix = WORK_MIX[self.scenario]
        self.phase: str | None = None  # the work it serves (run()), else the scenario's shape
        load = profile.get("load") or {}
        power = profile["power_w"]
        self.limit_w = float(power["limit"])
        self.idle_w = float(power.get("idle") or self.limit_w * 0.1)
        demand = dict(load.get("demand_w") or {})
        # An imported capture's runs (gpuagent.sim.capture_import): the idle scenario replays the
        # idle run as captured, no wobble; a load scenario moves between it and the loaded run.
        captured = profile.get("captured") or {}
        self.captured_idle = captured.get("idle") if self.scenario == "idle" else None
        self.captured_load = captured.get("load")
        if self.captured_load and self.captured_load.get("power_w") is not None:
            for name in ("training", "inference"):
                demand[name] = float(self.captured_load["power_w"])
        self.peak_demand_w = float(
            demand.get(
                self.scenario,
                {
                    "idle": self.idle_w,
                    "training": self.limit_w * 1.08,
                    "inference": self.limit_w * 0.7,
                }[self.scenario],
            )
        )
        temps = profile.get("temperature_c") or {}
        self.temp_idle = float(temps.get("idle", 30))
        self.temp_max = float(temps.get("max", 80))
        self.slowdown_c = float(temps.get("slowdown", 200))
        self.tau_s = float(load.get("thermal_tau_s", 45))
        self._decay = math.exp(-STEP_S / self.tau_s)
        mem = profile["memory"]
        self.total_bytes = int(mem["total_mib"]) << 20
        self.reserved_bytes = int(mem.get("reserved_mib", 0)) << 20
        frac = (load.get("memory_used_frac") or {}).get(self.scenario)
        used_load = (self.captured_load or {}).get("memory_used_mib")
        if frac is None and used_load is not None and self.scenario != "idle":
            frac = (used_load << 20) / max(1, self.total_bytes - self.reserved_bytes)
        if frac is None:
            frac = {"idle": 0.0, "training": 0.85, "inference": 0.55}[self.scenario]
        self.mem_frac = float(frac)
        self.pcie_kbps = float(load.get("pcie_kbps", 4_000_000))
        clocks = profile["clocks_mhz"]
        self.max_clk = clocks["max"]
        if self.captured_load:  # a busy card runs at the loaded run's clocks
            self.max_clk = {
                k: v if v is not None else clocks["max"][k]
                for k, v in {**clocks["max"], **(self.captured_load.get("clocks") or {})}.items()
            }
        self.idle_clk = clocks["idle"]
        pcie = profile["pcie"]
        self.pcie_gen_active = int(pcie.get("current_gen", pcie["max_gen"]))
        self.pcie_gen_idle = int(pcie.get("idle_gen", self.pcie_gen_active))
        self.fan = profile.get("fan_pct")
        self.fan_by_temp = not captured  # an import's fan moves with its runs' temperatures
        pstates = profile.get("pstate") or {}
        self.pstate_idle = pstates.get("idle")
        self.pstate_active = pstates.get("active")
        self.supported_reasons = int(profile.get("clocks_event_reasons_supported", 0x1FF))
        self.datacenter_p0 = profile.get("architecture") in ("Hopper", "Ampere", "Blackwell")
        # Training jobs pause for checkpoints; each GPU gets its own period and phase.
        self.period_s = 240 + int(_hash01(self.seed, self.index, 90, 0) * 240)
        self.phase_s = int(_hash01(self.seed, self.index, 91, 0) * self.period_s)
        self.energy_offset_j = 3.6e6 * (1 + 20 * _hash01(self.seed, self.index, 92, 0))  # since driver load
        self._a: Knot | None = None
        self._b: Knot | None = None

    def run(self, phase: str, dram_share: float, tensor_share: float, memory_frac: float) -> None:
        """The GPU serves work (gpuagent.sim.work): its readings follow the engine step's shares of
        the busy time. `decode` keeps the GPU busy (a token per sequence per step, requests always
        queued), `prefill` is busy as requests come; DRAM busy time and GPM DRAM bandwidth are the
        step's DRAM share, GPM tensor activity its math's share, the SMs active 90 % of the busy time
        and their occupancy a quarter plus a fifth of the tensor share; a compute-bound step (tensor
        share >= the DRAM's) draws up to 95 % of the power limit, a memory-bound one the profile's
        inference demand."""
        self.phase = phase
        fp16 = self.mix["hmma"] / max(self.mix["tensor"], 1e-9)  # the template's FP16 share of the tensor work
        self.mix = {
            **WORK_MIX["inference"],
            "dram": dram_share,
            "tensor": tensor_share,
            "hmma": tensor_share * fp16,
            "imma": 0.0,
            "sm": 0.9,
            "occupancy": 0.25 + 0.2 * tensor_share,
        }
        if tensor_share >= dram_share and not self.captured_load:
            self.peak_demand_w = 0.95 * self.limit_w
        self.mem_frac = float(memory_frac)
        self._a = self._b = None  # the knots follow the new shape from t = 0

    # -- demand at knots --------------------------------------------------
    def _util_at(self, k: int) -> tuple[float, float]:
        t = k * STEP_S
        r = _hash01(self.seed, self.index, 1, k)
        if self.captured_idle is not None:
            util = self.captured_idle.get("util") or {}
            return float(util.get("gpu") or 0), float(util.get("memory") or 0)
        if self.scenario == "idle":
            util = 0.0 if r < 0.9 else r * 3
            return util, 0.0
        if self.scenario == "training":
            in_pause = ((t + self.phase_s) % self.period_s) < 15
            util = 8 + 20 * r if in_pause else 96 + 4 * r
        elif self.phase == "decode":  # a decode server's steps run back to back while requests wait
            wave = math.sin(2 * math.pi * (t + self.phase_s) / 600.0)
            util = 88 + 8 * wave + 6 * (r - 0.5)
        else:  # inference: a daily-ish wave of requests plus bursts
            wave = math.sin(2 * math.pi * (t + self.phase_s) / 600.0)
            util = 45 + 28 * wave + 25 * (r - 0.5)
        util = min(100.0, max(0.0, util))
        mem_util = min(100.0, util * self.mix["dram"] * (0.9 + 0.2 * _hash01(self.seed, self.index, 2, k)))
        return util, mem_util

    def _demand(self, k: int, util: float) -> float:
        if self.captured_idle is not None:
            return self.idle_w  # the captured idle draw, as captured
        wobble = 0.96 + 0.08 * _hash01(self.seed, self.index, 3, k)
        return (
            self.idle_w + (self.peak_demand_w - self.idle_w) * (util / 100.0) * wobble
            if util > 0
            else self.idle_w * wobble
        )

    def _temp_target(self, power_w: float) -> float:
        span = max(1.0, self.limit_w - self.idle_w)
        return self.temp_idle + (self.temp_max - self.temp_idle) * (power_w - self.idle_w) / span

    def _first(self) -> Knot:
        util, mem_util = self._util_at(0)
        demand = self._demand(0, util)
        power = min(demand, self.limit_w)
        temp = self._temp_target(power)
        return Knot(0, util, mem_util, demand, power, temp, self.energy_offset_j, 0.0, 0.0)

    def _next(self, a: Knot) -> Knot:
        k = a.k + 1
        util, mem_util = self._util_at(k)
        demand = self._demand(k, util)
        power = min(demand, self.limit_w)
        target = self._temp_target(a.power_w)
        temp = target + (a.temp_c - target) * self._decay
        energy = a.energy_j + (a.power_w + power) * 0.5 * STEP_S
        util_s = a.util_s + (a.util + util) * 0.5 * STEP_S
        mem_util_s = a.mem_util_s + (a.mem_util + mem_util) * 0.5 * STEP_S
        cap_span, thermal_span = self._reason_spans(a, util, demand, power, temp)
        return Knot(
            k,
            util,
            mem_util,
            demand,
            power,
            temp,
            energy,
            util_s,
            mem_util_s,
            a.cap_s + (cap_span[1] - cap_span[0]) * STEP_S,
            a.thermal_s + (thermal_span[1] - thermal_span[0]) * STEP_S,
            cap_span,
            thermal_span,
        )

    def _reason_spans(self, a: Knot, util: float, demand: float, power: float, temp: float):
        """Where between knot ``a`` and the next one the power-cap / SW thermal bits are set.

        The same conditions as ``state()`` (all linear in time between knots): active
        (util >= 5), demand above the limit, power held within 2 % of it; temperature at or
        above the slowdown threshold. A reason the card does not report never counts.
        """
        cap = (0.0, 0.0)
        if self.supported_reasons & REASON_SW_POWER_CAP:
            lim = self.limit_w
            cap = _span(
                (a.util - 5.0, util - 5.0),
                (a.demand_w - lim, demand - lim),
                (a.power_w - lim * 0.98, power - lim * 0.98),
            )
        thermal = (0.0, 0.0)
        if self.supported_reasons & REASON_SW_THERMAL:
            thermal = _span((a.temp_c - self.slowdown_c, temp - self.slowdown_c))
        return cap, thermal

    def _knots_for(self, t: float) -> tuple[Knot, Knot]:
        k = int(t // STEP_S)
        a = self._a
        if a is None or k < a.k:  # first use, or time went backwards: replay from 0
            a = self._first()
            b = self._next(a)
        else:
            assert self._b is not None  # set with _a
            b = self._b
        while b.k <= k:
            a, b = b, self._next(b)
        self._a, self._b = a, b
        return a, b

    # -- readings at an instant -------------------------------------------
    def state(self, t: float) -> LoadState:
        t = max(0.0, t)
        a, b = self._knots_for(t)
        f = (t - a.k * STEP_S) / STEP_S
        util = a.util + (b.util - a.util) * f
        mem_util = a.mem_util + (b.mem_util - a.mem_util) * f
        power = a.power_w + (b.power_w - a.power_w) * f
        demand = a.demand_w + (b.demand_w - a.demand_w) * f
        energy = a.energy_j + (a.power_w + power) * 0.5 * f * STEP_S
        util_s = a.util_s + (a.util + util) * 0.5 * f * STEP_S
        mem_util_s = a.mem_util_s + (a.mem_util + mem_util) * 0.5 * f * STEP_S
        temp = a.temp_c + (b.temp_c - a.temp_c) * f
        capped = demand > self.limit_w and power >= self.limit_w * 0.98  # held at the cap
        active = util >= 5.0
        reasons = 0
        mx, idle = self.max_clk, self.idle_clk
        if active:
            scale = (self.limit_w / demand) ** 0.4 if capped else 1.0
            sm = max(idle["sm"], int(mx["sm"] * scale / 15) * 15)
            gr = max(idle["graphics"], int(mx["graphics"] * scale / 15) * 15)
            mem_clk = mx["memory"]
            video = mx["video"]
            if capped:
                reasons |= REASON_SW_POWER_CAP
        else:
            sm, gr, mem_clk, video = idle["sm"], idle["graphics"], idle["memory"], idle["video"]
            reasons |= REASON_IDLE
        if temp >= self.slowdown_c:
            reasons |= REASON_SW_THERMAL
        if self.captured_idle is not None:  # the idle run's clocks and P-state, whatever its util
            sm, gr, mem_clk, video = idle["sm"], idle["graphics"], idle["memory"], idle["video"]
            active = False
            reasons = REASON_IDLE if util < 5.0 else 0
            if temp >= self.slowdown_c:
                reasons |= REASON_SW_THERMAL
        reasons &= self.supported_reasons
        if active and self.pstate_active is not None:
            pstate = int(self.pstate_active)
        elif not active and self.pstate_idle is not None:
            pstate = int(self.pstate_idle)
        else:
            pstate = 0 if (active or self.datacenter_p0) else 8
        usable = self.total_bytes - self.reserved_bytes
        if self.captured_idle is not None and self.captured_idle.get("memory_used_mib") is not None:
            used = int(self.captured_idle["memory_used_mib"]) << 20
        elif self.mem_frac > 0:
            wiggle = 0.98 + 0.02 * _hash01(self.seed, self.index, 5, int(t // 60))
            used = int(usable * self.mem_frac * wiggle)
        else:
            used = 0
        fan = None
        if self.fan:
            lo, hi = self.fan.get("idle", 30), self.fan.get("max", 80)
            if self.fan_by_temp:
                fan = int(lo + (hi - lo) * min(1.0, max(0.0, (temp - 45) / 30)))
            else:  # between the captured idle and loaded runs' speeds, as their temperatures
                span = self.temp_max - self.temp_idle
                frac = (temp - self.temp_idle) / span if span else 0.0
                fan = int(round(lo + (hi - lo) * min(1.0, max(0.0, frac))))
        pcie_tx = int(self.pcie_kbps * util / 100 * (0.12 if self.scenario == "training" else 0.35))
        pcie_rx = int(self.pcie_kbps * util / 100 * (0.2 if self.scenario == "training" else 0.5)) + 240
        return LoadState(
            t=t,
            util=util,
            mem_util=mem_util,
            power_w=power,
            demand_w=demand,
            energy_j=energy,
            temp_c=temp,
            util_s=util_s,
            mem_util_s=mem_util_s,
            sm_clock=sm,
            graphics_clock=gr,
            mem_clock=mem_clk,
            video_clock=video,
            reasons=reasons,
            pstate=pstate,
            capped=capped,
            mem_used_bytes=used,
            fan_pct=fan,
            pcie_gen=self.pcie_gen_active if active else self.pcie_gen_idle,
            pcie_tx_kbps=pcie_tx + 100,
            pcie_rx_kbps=pcie_rx,
            reason_s={
                REASON_SW_POWER_CAP: a.cap_s + _within(b.cap_span, f) * STEP_S,
                REASON_SYNC_BOOST: 0.0,
                REASON_SW_THERMAL: a.thermal_s + _within(b.thermal_span, f) * STEP_S,
                REASON_HW_THERMAL: 0.0,
                REASON_HW_POWER_BRAKE: 0.0,
            },
        )


def process_samples(state: LoadState, used: list[int]) -> list[tuple[int, int, int, int]]:
    """Per-process utilisation (SM %, memory %, encoder %, decoder %) at one instant: the GPU's
    busy and memory-busy shares split over its processes by the memory each holds, as the
    driver's per-process samples add up to about the device's. No simulated workload uses the
    video engines, so encoder and decoder stay 0 (as the device-level codec readings do)."""
    total = sum(used)
    out = []
    for nbytes in used:
        share = nbytes / total if total > 0 else 1.0 / max(1, len(used))
        out.append((int(round(state.util * share)), int(round(state.mem_util * share)), 0, 0))
    return out
