"""Health faults for the simulator: what the health verdict reads, driven on the machine's clock.

SPEC modifiers (GPU numbers count within the SPEC item; TIME as in gpuagent.sim.faults;
RATE is errors per second, or ``N/m`` / ``N/h`` per minute / hour; counters grow from TIME, 0 s
by default, and only grow):

    remap=GPU:pending|failure:TIME       a row remapping pending (until a reset) or failed (for good)
    recovery=GPU:ACTION:TIME             NVML_FI_DEV_GET_GPU_RECOVERY_ACTION answers ACTION from TIME
                                         (none, reset, reboot, drain_p2p, drain_and_reset, or a number)
    retired=GPU:TIME                     a retired page pending (pre-Ampere cards with page retirement)
    ecc=GPU:COUNT:TIME                   COUNT uncorrectable ECC errors at TIME
    pcie_replay=GPU:RATE[:TIME]          PCIe replays (NVML_FI_DEV_PCIE_REPLAY_COUNTER)
    pcie_err=GPU:RATE[:TIME]             PCIe correctable errors (NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS)
    nvlink_crc=GPU:LINK:RATE[:TIME]      NVLink CRC errors on one link (NVML_FI_DEV_NVLINK_ERROR_DL_CRC)
    nvlink_replay=GPU:LINK:RATE[:TIME]   NVLink replays (NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY)
    nvlink_recovery=GPU:LINK:RATE[:TIME] NVLink recoveries (NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY)
    fabric=GPU:STATE[:TIME]              NVSwitch fabric registration: not_started, in_progress,
                                         completed, failed, unhealthy, degraded_bw
    reset=GPU:TIME                       the GPU is reset: a lost GPU answers again, a pending row
                                         remapping is applied, the recovery action returns to none

XID 79 itself makes a GPU answer GPU_IS_LOST (see SimMachine.inject_xid). The state lives on
the machine (``machine.health_faults``), one DeviceHealth per GPU, read by the fake library's
health, PCIe, NVLink and field-value calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pynvml

from gpuagent.errors import AgentError

RECOVERY_ACTIONS = {
    "none": pynvml.NVML_GPU_RECOVERY_ACTION_NONE,
    "reset": pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET,
    "gpu_reset": pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET,
    "reboot": pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT,
    "node_reboot": pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT,
    "drain_p2p": pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P,
    "drain_and_reset": pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET,
}

# Fabric states a fault can set: (state, status, health mask); bit layout from nvml.h
# (NVML_GPU_FABRIC_HEALTH_MASK_*: 2-bit fields, 1 = TRUE, 2 = FALSE, 0 = not supported).
_UNHEALTHY_ROUTE = (
    pynvml.NVML_GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE << pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY
)
_DEGRADED_BW = (
    pynvml.NVML_GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE << pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW
)
FABRIC_STATES = {
    "not_started": (pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED, pynvml.NVML_SUCCESS, 0),
    "in_progress": (pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS, pynvml.NVML_SUCCESS, 0),
    # the H100 capture: State Completed, Status Success, health fields all N/A (mask 0)
    "completed": (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_SUCCESS, 0),
    "failed": (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_ERROR_UNKNOWN, 0),
    "unhealthy": (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_SUCCESS, _UNHEALTHY_ROUTE),
    "degraded_bw": (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_SUCCESS, _DEGRADED_BW),
}

# Counter keys for rate faults: (kind, link); link None for PCIe.
RATE_KINDS = ("pcie_replay", "pcie_err", "nvlink_crc", "nvlink_replay", "nvlink_recovery")


@dataclass
class DeviceHealth:
    """The health faults scheduled on one simulated GPU (times in machine seconds)."""

    remaps: list[tuple[float, str]] = field(default_factory=list)  # (at, "pending" | "failure")
    recovery: list[tuple[float, int]] = field(default_factory=list)  # (at, action)
    retired: list[float] = field(default_factory=list)
    ecc: list[tuple[float, int]] = field(default_factory=list)  # (at, uncorrectable errors)
    rates: list[tuple[str, int | None, float, float]] = field(default_factory=list)  # kind, link, /s, from
    fabric: list[tuple[float, str]] = field(default_factory=list)
    resets: list[float] = field(default_factory=list)

    def _last_reset(self, now: float) -> float | None:
        done = [r for r in self.resets if r <= now]
        return max(done) if done else None

    def remap_pending(self, now: float) -> bool:
        reset = self._last_reset(now)
        return any(k == "pending" and at <= now and (reset is None or at > reset) for at, k in self.remaps)

    def remap_failure(self, now: float) -> bool:
        return any(k == "failure" and at <= now for at, k in self.remaps)

    def remapped(self, now: float) -> int:
        """Rows remapped for uncorrectable errors: the pending remappings a reset has applied."""
        reset = self._last_reset(now)
        return sum(1 for at, k in self.remaps if k == "pending" and reset is not None and at <= reset)

    def recovery_action(self, now: float) -> int:
        reset = self._last_reset(now)
        current = [(at, a) for at, a in self.recovery if at <= now and (reset is None or at > reset)]
        return max(current)[1] if current else pynvml.NVML_GPU_RECOVERY_ACTION_NONE

    def retired_pending(self, now: float) -> bool:
        return any(at <= now for at in self.retired)  # a retirement waits for a reboot, not a reset

    def ecc_uncorrected(self, now: float) -> int:
        return sum(n for at, n in self.ecc if at <= now)

    def count(self, kind: str, link: int | None, now: float) -> int:
        return int(
            sum(rate * (now - start) for k, lk, rate, start in self.rates if k == kind and lk == link and now > start)
        )

    def fabric_state(self, now: float) -> str | None:
        current = [(at, s) for at, s in self.fabric if at <= now]
        return max(current)[1] if current else None


def health_of(machine: Any, gpu: int) -> DeviceHealth:
    """GPU ``gpu``'s DeviceHealth (created on first use: a machine without health faults has none)."""
    table = machine.health_faults
    state = table.get(gpu)
    if state is None:
        state = table[gpu] = DeviceHealth()
    return state


def peek(machine: Any, gpu: int) -> DeviceHealth | None:
    """GPU ``gpu``'s DeviceHealth if any health fault was ever set on it (the calls' fast path)."""
    return machine.health_faults.get(gpu)


@dataclass(frozen=True)
class HealthFault:
    """One parsed health modifier; ``apply_to`` schedules it on a SimMachine."""

    kind: str
    gpu: int
    at: float = 0.0
    value: Any = None  # remap kind, recovery action, ecc count, fabric state, or rate per second
    link: int | None = None

    def apply_to(self, machine: Any) -> None:
        machine.device(self.gpu)  # refuses a GPU the machine does not have
        state = health_of(machine, self.gpu)
        if self.kind == "remap":
            state.remaps.append((self.at, self.value))
        elif self.kind == "recovery":
            state.recovery.append((self.at, self.value))
        elif self.kind == "retired":
            state.retired.append(self.at)
        elif self.kind == "ecc":
            state.ecc.append((self.at, self.value))
        elif self.kind == "fabric":
            state.fabric.append((self.at, self.value))
        elif self.kind == "reset":
            reset_gpu(machine, self.gpu, self.at)
        elif self.kind in RATE_KINDS:
            state.rates.append((self.kind, self.link, self.value, self.at))


def reset_gpu(machine: Any, gpu: int, at: float | None = None) -> None:
    """GPU ``gpu`` is reset at ``at`` (default now): a lost GPU answers again from then on."""
    dev = machine.device(gpu)
    when = machine.now() if at is None else float(at)
    health_of(machine, gpu).resets.append(when)
    if dev.lost_at is not None:
        dev.lost_until = reset_after(machine, gpu, dev.lost_at)


def reset_after(machine: Any, gpu: int, when: float) -> float | None:
    """The first reset of GPU ``gpu`` at or after ``when`` (what ends a loss), if any is scheduled."""
    state = peek(machine, gpu)
    later = [r for r in state.resets if r >= when] if state else []
    return min(later) if later else None


GRAMMAR = (
    "remap=GPU:pending|failure:TIME, recovery=GPU:ACTION:TIME, retired=GPU:TIME, ecc=GPU:COUNT:TIME, "
    "pcie_replay=GPU:RATE[:TIME], pcie_err=GPU:RATE[:TIME], nvlink_crc|nvlink_replay|nvlink_recovery="
    "GPU:LINK:RATE[:TIME], fabric=GPU:STATE[:TIME] or reset=GPU:TIME"
)
KINDS = ("remap", "recovery", "retired", "ecc", "fabric", "reset", *RATE_KINDS)


def parse_rate(text: str) -> float:
    """Errors per second: ``2``, ``0.5``, ``30/m``, ``100/h``."""
    number, _, unit = text.strip().partition("/")
    per = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}.get(unit.strip().lower())
    rate = float(number)
    if per is None or rate < 0:
        raise ValueError(text)
    return rate / per


def recovery_action(text: str) -> int:
    name = text.strip().lower()
    if name in RECOVERY_ACTIONS:
        return RECOVERY_ACTIONS[name]
    if name.isdigit():
        return int(name)  # any number: a driver newer than this table (bad-input tests)
    raise ValueError(text)


def parse_health_fault(kind: str, parts: list[str], gpu_no, seconds) -> HealthFault | None:
    """A health modifier (``kind`` already lower-cased), or None when ``kind`` is not one.

    ``gpu_no`` and ``seconds`` are gpuagent.sim.faults' GPU-number and time parsers; a bad value
    raises ValueError or AgentError, which the caller turns into its one-line SPEC error.
    """
    if kind not in KINDS:
        return None
    n = len(parts)
    if kind == "remap" and n == 3 and parts[1] in ("pending", "failure"):
        return HealthFault("remap", gpu_no(parts[0]), seconds(parts[2]), parts[1])
    if kind == "recovery" and n == 3:
        return HealthFault("recovery", gpu_no(parts[0]), seconds(parts[2]), recovery_action(parts[1]))
    if kind in ("retired", "reset") and n == 2:
        return HealthFault(kind, gpu_no(parts[0]), seconds(parts[1]))
    if kind == "ecc" and n == 3 and parts[1].strip().isdigit():
        return HealthFault("ecc", gpu_no(parts[0]), seconds(parts[2]), int(parts[1]))
    if kind == "fabric" and n in (2, 3):
        state = parts[1].strip().lower()
        if state not in FABRIC_STATES:
            raise AgentError(f"unknown fabric state {parts[1]!r} (one of {', '.join(FABRIC_STATES)})")
        return HealthFault("fabric", gpu_no(parts[0]), seconds(parts[2]) if n == 3 else 0.0, state)
    if kind in ("pcie_replay", "pcie_err") and n in (2, 3):
        return HealthFault(kind, gpu_no(parts[0]), seconds(parts[2]) if n == 3 else 0.0, parse_rate(parts[1]))
    if kind.startswith("nvlink_") and n in (3, 4) and parts[1].strip().isdigit():
        at = seconds(parts[3]) if n == 4 else 0.0
        return HealthFault(kind, gpu_no(parts[0]), at, parse_rate(parts[2]), int(parts[1]))
    raise ValueError(kind)


def fabric_default(dev: Any) -> str | None:
    """The fabric state a card reports with no fault: Hopper and newer on an NVSwitch baseboard
    register with the fabric manager ("Completed / Success" in the H100 SXM capture); every other
    card answers NOT_SUPPORTED (the GeForce captures show the fabric fields as N/A)."""
    nvlink = dev.nvlink or {}
    arch = dev.profile.get("architecture")
    if nvlink.get("topology") == "switch" and arch in ("Hopper", "Blackwell"):
        return "completed"
    return None


# Readers for the fake library's calls (no call decorators here: symbols get their call slots
# in the order fakelib imports its area modules).
NVLINK_COUNTER_KINDS = {
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY: "nvlink_replay",
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: "nvlink_recovery",
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: "nvlink_crc",
}


def counter(m, dev, kind: str, link: int | None = None) -> int:
    state = peek(m, dev.index)
    return state.count(kind, link, m.now()) if state is not None else 0


def pcie_replays(m, dev) -> int:
    return dev.pcie_replays + counter(m, dev, "pcie_replay")


def nvlink_errors(m, dev, link: int, counter_id: int | None) -> int:
    kind = NVLINK_COUNTER_KINDS.get(counter_id)
    return counter(m, dev, kind, link) if kind else 0
