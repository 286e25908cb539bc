"""What one frame of `gpuagent top` shows, as plain data: the node and the fleet views fill the
same rows, so one renderer draws both."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from gpuagent.compare.health import VERDICTS
from gpuagent.schema.measurements import GPU_CLOCKS, GPU_HEALTH, GPU_MEMORY, GPU_POWER

# Short throttle words (a column of 80 columns' worth), keyed by the clocks collector's fields;
# the most telling first: a row shows the first one active.
THROTTLE_WORDS = {
    "hw_thermal_slowdown": "hw thermal",
    "hw_power_brake_slowdown": "pwr brake",
    "hw_slowdown": "hw slow",
    "sw_thermal_slowdown": "thermal",
    "sw_power_cap": "power cap",
    "sync_boost": "sync boost",
    "applications_setting": "app clocks",
    "display_clock_setting": "display",
    "idle": "idle",
}

HISTORY = 30  # samples kept per row for the sparklines

# What a GPU's row shows and where each figure is read: Row attribute -> (measurement, field).
# The node view takes them from one run's points, the fleet view asks its server for the newest
# of each: one table, so the two views show the same figures.
ROW_FIELDS: dict[str, tuple[str, str]] = {
    "power_w": (GPU_POWER, "power_w"),
    "power_limit_w": (GPU_POWER, "power_limit_w"),
    "temp_c": (GPU_POWER, "temperature_c"),
    "sm_mhz": (GPU_CLOCKS, "sm_clock_mhz"),
    "sm_max_mhz": (GPU_CLOCKS, "max_sm_clock_mhz"),
    "util_pct": (GPU_MEMORY, "gpu_util_pct"),
    "mem_used": (GPU_MEMORY, "fb_used_bytes"),
    "mem_total": (GPU_MEMORY, "fb_total_bytes"),
    "verdict": (GPU_HEALTH, "verdict"),
    "reason": (GPU_HEALTH, "verdict_reason"),
}


def _reads() -> dict[str, tuple[str, ...]]:
    reads: dict[str, tuple[str, ...]] = {}
    for measurement, name in ROW_FIELDS.values():
        reads[measurement] = (*reads.get(measurement, ()), name)
    reads[GPU_CLOCKS] += tuple(THROTTLE_WORDS)  # the clock-event bits behind the throttle column
    return reads


# measurement -> the fields a GPU row reads of it.
ROW_READS = _reads()


@dataclass
class Row:
    """A GPU (kind "gpu"), a MIG or vGPU instance under it, or a host / model of the fleet."""

    key: str
    label: str
    model: str = ""
    kind: str = "gpu"
    util_pct: float | None = None
    mem_used: float | None = None
    mem_total: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_mhz: float | None = None
    sm_max_mhz: float | None = None
    temp_c: float | None = None
    throttle: str | None = None
    verdict: str | None = None
    reason: str = ""
    gpus: int = 1
    children: list[Row] = field(default_factory=list)
    power_hist: list[float] = field(default_factory=list)
    util_hist: list[float] = field(default_factory=list)


@dataclass
class Proc:
    gpu: str
    pid: str
    user: str = ""
    name: str = ""
    job: str = ""
    mem_bytes: int | None = None
    sm_pct: float | None = None


@dataclass
class Frame:
    title: str
    rows: list[Row]
    procs: list[Proc] = field(default_factory=list)
    note: str = ""
    time_s: float = 0.0
    by: str = "gpu"  # what a row is: gpu, host or model


def short_model(name: str) -> str:
    """ "NVIDIA GeForce RTX 4090" -> "RTX 4090": the words every row would repeat."""
    for prefix in ("NVIDIA ", "GeForce "):
        name = name.removeprefix(prefix)
    return name


SEVERITY = {v: n for n, v in enumerate(VERDICTS)}  # least to most severe, as the health collector ranks them


def severity(verdict: str | None) -> int:
    """Worse verdicts rank higher; none read ranks below ok, one this version does not know as degraded."""
    if verdict is None:
        return -1
    return SEVERITY.get(verdict, SEVERITY["degraded"])


def worst(verdicts) -> str | None:
    seen = [v for v in verdicts if v]
    return max(seen, key=severity) if seen else None


def throttle_of(fields: dict) -> str | None:
    """The most telling active clock-event reason, "none", or None where the card reports none."""
    if fields.get("clock_event_reasons") is None and not any(k in fields for k in THROTTLE_WORDS):
        return None
    return next((word for name, word in THROTTLE_WORDS.items() if fields.get(name)), "none")


def gpu_row(g: dict, key: str, label: str) -> Row:
    """A GPU's row from its fields (those of ROW_READS, whichever measurement) and its ``model``."""
    row = Row(key=key, label=label, model=g.get("model", ""))
    for attr, (_, name) in ROW_FIELDS.items():
        setattr(row, attr, g.get(name))
    row.reason = str(row.reason or "")
    row.throttle = throttle_of(g) if any(k in g for k in THROTTLE_WORDS) else None
    return row


class History:
    """Power and utilisation of each row over the last HISTORY refreshes, by row key."""

    def __init__(self, size: int = HISTORY):
        self.size = size
        self.power: dict[str, deque] = {}
        self.util: dict[str, deque] = {}

    def add(self, rows: list[Row]) -> None:
        for row in rows:
            for store, value, target in (
                (self.power, row.power_w, "power_hist"),
                (self.util, row.util_pct, "util_hist"),
            ):
                series = store.setdefault(row.key, deque(maxlen=self.size))
                if value is not None:
                    series.append(float(value))
                setattr(row, target, list(series))
            self.add(row.children)
