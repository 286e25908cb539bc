"""The core every compare module shares: the range, the groups, the time buckets and the JSON
document every report shape fills, whichever engine answered (InfluxQL, PromQL, raw or rollups)."""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeGuard

from gpuagent.commands.facts import REASON_WORDS
from gpuagent.errors import AgentError

GPU_TAGS = ("host", "uuid", "model", "gpu")
# Queries asked at once: each runs on one of the server's cores, so a report takes about the time
# of its longest queries rather than their sum (bench/RESULTS.md, compare at fleet scale).
WORKERS = 4
GROUP_TAGS = {"model": ("model",), "host": ("host",), "gpu": ("host", "uuid")}

# The clock-event reason booleans of gpu_clocks, in NVML bit order: the stream's field names
# (what a fleet wrote, whichever plugins this machine loads).
REASONS = tuple(REASON_WORDS)
# The ones that hold clocks below what the work asks for (the chart shows these).
THROTTLE_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sync_boost",
)

_NICE_BUCKETS_S = (10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)


@dataclass
class Range:
    start_ns: int
    end_ns: int

    def clause(self) -> str:
        return f"time >= '{rfc3339(self.start_ns)}' AND time < '{rfc3339(self.end_ns)}'"


def rfc3339(ns: int) -> str:
    seconds, rest = divmod(int(ns), 1_000_000_000)
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{rest:09d}Z"


def parse_time(text: str) -> int:
    """RFC 3339 ('2026-01-31T12:00:00Z', a date alone is midnight UTC) or epoch seconds -> ns."""
    text = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return int(Decimal(text) * 1_000_000_000)  # exact to the nanosecond, unlike a float
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise AgentError(f"not a time: {text!r} (RFC 3339 such as 2026-01-31T12:00:00Z, or epoch seconds)") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return int(stamp.timestamp()) * 1_000_000_000 + stamp.microsecond * 1000


def report_document(
    rng: Range, by: str, where: str | None, source: dict, definitions: dict, groups: dict[tuple, dict], **extra: Any
) -> dict[str, Any]:
    """The compare JSON document every report shape shares (groups ordered by label; Slurm job ids
    and pods by the numbers in them: job 9 before job 10)."""
    order = _natural if by in ("job", "pod") else str
    return {
        "range": {
            "start": rfc3339(rng.start_ns),
            "end": rfc3339(rng.end_ns),
            "start_ns": rng.start_ns,
            "end_ns": rng.end_ns,
        },
        "by": by,
        "where": where or None,
        "source": source,
        "definitions": definitions,
        "groups": [groups[k] for k in sorted(groups, key=lambda k: order(groups[k]["label"]))],
        **extra,
    }


def _natural(label: str) -> list:
    """A sort key that orders the runs of digits in a label by their value."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", label) if part]


def bucket_seconds(span_s: float, target: int = 100) -> int:
    """A round bucket that cuts the range into at most about `target` pieces."""
    for b in _NICE_BUCKETS_S:
        if span_s / b <= target:
            return b
    return _NICE_BUCKETS_S[-1]


class NoData(AgentError):
    """Nothing in the range: one line, exit 1."""


def gpu_key(row: dict) -> tuple:
    return tuple(row.get(t, "") for t in GPU_TAGS)


def add_p2p(groups, gpus, nvlink, pcie, group_of) -> None:
    """Each group's GPUs by their best P2P path (NVLink, else PCIe, else none), and its summary;
    `nvlink` and `pcie` are the GPU keys that reached a peer that way (raw points or rollups)."""
    tally: dict[tuple, dict[str, int]] = {k: {"nvlink": 0, "pcie": 0, "none": 0} for k in groups}
    for key in gpus:
        kind = "nvlink" if key in nvlink else "pcie" if key in pcie else "none"
        tally[group_of(key)][kind] += 1
    for gkey, g in groups.items():
        g["p2p"] = tally[gkey]
        g["p2p_summary"] = p2p_summary(tally[gkey])


def p2p_summary(tally: dict[str, int]) -> str:
    names = {"nvlink": "NVLink", "pcie": "PCIe", "none": "none"}
    present = [k for k in ("nvlink", "pcie", "none") if tally.get(k)]
    if len(present) == 1:
        return names[present[0]]
    return ", ".join(f"{names[k]} {tally[k]}" for k in present) or "none"


def finite(value: object) -> TypeGuard[float]:
    """A real number to show: not None, NaN, an infinity or a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
