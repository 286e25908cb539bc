"""One in-process `gpuagent run --once` over a simulated fleet, for the NVML conformance tests.

In-process (not a subprocess) so that hundreds of forced-fault runs stay cheap on a small
machine: the agent is built by gpuagent.service.runtime exactly as `run --once` builds it, its points
come back from Scheduler.run_once, and the simulated machine's call counts say which C
symbols the run really called.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuagent.errors import AgentError
from gpuagent.service.runtime import Options, build
from gpuagent.sim.profile import BUILTIN_NAMES

# Every built-in profile in one machine: one run touches every code path the profiles have.
FLEET = ",".join(f"{name}:1" for name in BUILTIN_NAMES)

# Collectors that do not read NVML are off; the GPM warm-ups stay at their defaults (the
# simulator may hold GPM samples to NVML's 100 ms spacing); the XID watcher waits briefly so
# that closing the agent is quick.
CONFIG = """
[agent]
interval = "10s"
hostname = "conformance"

[collectors.host]
enabled = false

[collectors.health]
event_wait = "50ms"

[sinks.file]
path = "{out}"
"""

# Measurements whose points are only the agent's own account of itself.
OWN = "gpuagent"
# Tags that name a point across two runs (identity tags such as arch or uuid are readings).
STABLE_TAGS = ("gpu", "peer_gpu", "link", "gi_id", "ci_id", "vgpu_instance", "pid")


def point_key(point: Any) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A point's identity across two runs: measurement and tags."""
    return point.measurement, tuple(sorted(point.tags.items()))


@dataclass
class Run:
    points: list[Any] = field(default_factory=list)
    calls: Counter = field(default_factory=Counter)  # C symbol -> calls (machine-wide)
    error: str | None = None  # the one-line AgentError, when the agent refused to start
    records: list[logging.LogRecord] = field(default_factory=list)

    def own(self, **tags: str) -> list[Any]:
        return [p for p in self.points if p.measurement == OWN and all(p.tags.get(k) == v for k, v in tags.items())]

    def gpu_points(self) -> dict[tuple, Any]:
        return {point_key(p): p for p in self.points if p.measurement != OWN}

    def nvml_errors(self) -> list[Any]:
        return [p for p in self.points if p.measurement == OWN and "nvml_call" in p.tags]

    def collector_errors(self) -> dict[str, str]:
        """Collectors whose run raised: name -> last_error."""
        return {
            p.tags["collector"]: p.fields.get("last_error", "")
            for p in self.points
            if p.measurement == OWN
            and "collector" in p.tags
            and "nvml_call" not in p.tags
            and p.fields.get("errors_total", 0)
        }

    def tracebacks(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.exc_info or "Traceback" in r.getMessage()]


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def run_once(spec: str, workdir: Path) -> Run:
    """`gpuagent run --once --simulate SPEC` in this process; never raises for an AgentError."""
    config = workdir / "gpuagent.toml"
    config.write_text(CONFIG.format(out=workdir / "out.lp"))
    handler = _Keep()
    root = logging.getLogger("gpuagent")
    root.addHandler(handler)
    run = Run(records=handler.records)
    try:
        try:
            agent = build(Options(config_path=config, simulate=spec, seed=1))
        except AgentError as exc:
            run.error = str(exc)
            return run
        machine = agent.nvml.machine if agent.nvml else None
        try:
            run.points = agent.scheduler.run_once()
        finally:
            agent.close(flush_timeout=2.0)
        if machine is not None:
            run.calls = machine.calls
        return run
    finally:
        root.removeHandler(handler)


def base_symbol(name: str) -> str:
    """nvmlDeviceGetMemoryInfo_v2 -> nvmlDeviceGetMemoryInfo, ...ProfileInfoV -> ...ProfileInfo: a C symbol as
    pynvml's wrapper (and so the agent's count) names it, and the count's name the same way."""
    return re.sub(r"(_v\d+|(?<=[a-z])V)$", "", name.split("/", 1)[0])


def spec_with(symbol: str, code: str, gpu: int | None = None) -> str:
    """The full fleet with one fault (``code`` with or without NVML_ERROR_): on GPU ``gpu`` of the
    first item only, else on every item (a fault without a GPU stays in its SPEC item)."""
    items = [f"{name}:1" for name in BUILTIN_NAMES]
    fault = f"@force={symbol}:{code.removeprefix('NVML_ERROR_')}"
    if gpu is not None:
        items[0] += f"{fault}:{gpu}"
    else:
        items = [item + fault for item in items]
    return ",".join(items)


def keyed(run: Run) -> dict[tuple, set[str]]:
    """(measurement, stable tags) -> field names, for every GPU point of a run."""
    out: dict[tuple, set[str]] = {}
    for p in run.points:
        if p.measurement == OWN:
            continue
        key = (p.measurement, tuple((t, p.tags.get(t)) for t in STABLE_TAGS if t in p.tags))
        out.setdefault(key, set()).update(p.fields)
    return out


def lost_fields(before: dict[tuple, set[str]], after: dict[tuple, set[str]]) -> set[str]:
    """``measurement.field`` of every field a point of ``before`` has and its point in ``after``
    lacks (points missing from ``after`` altogether are not counted here)."""
    return {f"{key[0]}.{name}" for key, fields in before.items() if key in after for name in fields - after[key]}
