"""The verdict rules: evidence in, (verdict, one-sentence reason) out. Pure functions; the
collector gathers the evidence. The README's rule table is the contract for what is here.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import pynvml

from gpuagent.plugins.health.catalog import SEVERITY, xid_verdict

# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (nvml.h nvmlDeviceGpuRecoveryAction_t) -> (verdict, words).
RECOVERY_ACTIONS: dict[int, tuple[str, str]] = {
    pynvml.NVML_GPU_RECOVERY_ACTION_NONE: ("ok", "none"),
    pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET: ("reset_required", "GPU reset"),
    pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT: ("reboot_required", "node reboot"),
    pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P: ("drain", "drain peer-to-peer traffic"),
    pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET: ("drain", "drain, then reset"),
    pynvml.NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN: ("degraded", "recover the IMEX domain"),
    pynvml.NVML_GPU_RECOVERY_ACTION_BUS_RESET: ("reset_required", "bus reset"),
    pynvml.NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT: ("reboot_required", "system reboot"),
}

FABRIC_STATE_NAMES = {
    pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: "not_supported",
    pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED: "not_started",
    pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS: "in_progress",
    pynvml.NVML_GPU_FABRIC_STATE_COMPLETED: "completed",
}
# healthMask fields whose value TRUE (1) means trouble: (shift, words).
FABRIC_HEALTH_BITS = (
    (pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW, "degraded bandwidth"),
    (pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY, "route recovery in progress"),
    (pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY, "route unhealthy"),
    (pynvml.NVML_GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY, "access timeout recovery"),
)


@dataclass(frozen=True)
class Finding:
    verdict: str
    reason: str
    from_xid: bool = False


def clock_text(wall_ns: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(wall_ns / 1e9))


def decide(findings: list[Finding], notes: Sequence[str] = ()) -> tuple[str, str]:
    """The worst finding's verdict, and a sentence naming every finding (worst first) and note."""
    ranked = sorted(findings, key=lambda f: -SEVERITY[f.verdict])
    verdict = ranked[0].verdict if ranked else "ok"
    parts = [f.reason for f in ranked if f.verdict != "ok"] or ["no fault evidence"]
    parts += [f.reason for f in ranked if f.verdict == "ok"] + list(notes)
    sentence = "; ".join(parts)
    return verdict, sentence[:1].upper() + sentence[1:] + "."


def recovery_finding(action: int | None) -> Finding | None:
    if action is None or action == pynvml.NVML_GPU_RECOVERY_ACTION_NONE:
        return None
    known = RECOVERY_ACTIONS.get(action)
    if known is None:
        return Finding("degraded", f"NVML recovery action {action} (unknown to this agent)")
    return Finding(known[0], f"NVML recovery action: {known[1]}")


def xid_finding(code: int, count: int, last_wall_ns: int) -> Finding:
    verdict, words = xid_verdict(code)
    times = f" x{count}, last" if count > 1 else ""
    return Finding(verdict, f"{words}{times} at {clock_text(last_wall_ns)} UTC", from_xid=True)


def memory_findings(remap_pending, remap_failure, retired_pending) -> list[Finding]:
    out = []
    if remap_failure:
        out.append(Finding("drain", "row remapping failed"))
    if remap_pending:
        out.append(Finding("reset_required", "row remapping pending"))
    if retired_pending:
        out.append(Finding("reboot_required", "retired pages pending"))
    return out


def fabric_findings(state: int | None, status: int | None, mask: int | None, summary: int | None) -> list[Finding]:
    """Not ok unless the fabric registration completed successfully and no health field says trouble."""
    if state is None or state == pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
        return []
    if state != pynvml.NVML_GPU_FABRIC_STATE_COMPLETED:
        name = FABRIC_STATE_NAMES.get(state, f"state {state}")
        return [Finding("degraded", f"NVSwitch fabric registration {name.replace('_', ' ')}")]
    if status not in (None, pynvml.NVML_SUCCESS):
        return [Finding("drain", f"NVSwitch fabric registration failed (status {status})")]
    troubles = [words for shift, words in FABRIC_HEALTH_BITS if mask and (mask >> shift) & 0x3 == 1]
    if (
        summary
        in (
            pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY,
            pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY,
        )
        and not troubles
    ):
        troubles = ["unhealthy" if summary == pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY else "limited capacity"]
    return [Finding("degraded", f"NVSwitch fabric {', '.join(troubles)}")] if troubles else []


class CounterWindow:
    """Samples of one counter; ``growth`` is how much it grew over the last ``window`` seconds.

    Only changes are kept: a sample equal to the last adds nothing (the baseline is the value
    at or before the window's start, which an unchanged run of samples does not move). So a
    counter that never moves costs one sample however short the interval, not window/interval
    of them (900 a counter at 1 s, for every NVLink link of every GPU).
    """

    __slots__ = ("samples", "last")

    def __init__(self) -> None:
        self.samples: deque[tuple[float, int]] = deque()
        self.last: int | None = None

    def add(self, t: float, value: int, window: float) -> int:
        samples = self.samples
        if value != self.last:
            if self.last is not None and value < self.last:
                samples.clear()  # the counter was reset (driver reload, GPU reset): start again
            samples.append((t, value))
            self.last = value
        if len(samples) == 1:
            return 0
        # keep one sample at or before the window's start as the baseline
        start = t - window
        while len(samples) > 1 and samples[1][0] <= start:
            samples.popleft()
        return value - samples[0][1]

    @property
    def moving(self) -> bool:
        """Whether its growth can change with time alone (a sample beyond the baseline)."""
        return len(self.samples) > 1


class LinkCounters:
    """The per-link CounterWindows of one NVLink error kind on one GPU. A run whose counts equal
    the last run's, while every window holds a single sample, has grown nowhere: one dict
    comparison instead of a window update for each of up to 18 links."""

    __slots__ = ("windows", "last", "moving")

    def __init__(self) -> None:
        self.windows: dict[int, CounterWindow] = {}
        self.last: dict[int, int] | None = None
        self.moving = False  # some window holds more than one sample: its growth changes with time

    def growth(self, t: float, links: dict[int, int], window: float) -> dict[int, int]:
        """link -> growth over the window, for the links that grew."""
        if not self.moving and links == self.last:
            return {}
        out: dict[int, int] = {}
        moving = False
        windows = self.windows
        for link, value in links.items():
            counter = windows.get(link)
            if counter is None:
                counter = windows[link] = CounterWindow()
            grown = counter.add(t, value, window)
            if grown:
                out[link] = grown
            if len(counter.samples) > 1:
                moving = True
        self.last, self.moving = dict(links), moving
        return out


def growth_finding(what: str, growth: int, threshold: int, window_s: float) -> Finding | None:
    if threshold <= 0 or growth < threshold:
        return None
    return Finding("degraded", f"{growth} {what} in the last {window_text(window_s)} (threshold {threshold})")


def window_text(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"
