"""Fault injection: XID events, lost GPUs, calls forced to an NVML error.

Faults come from three places, all ending up as the same objects on the
SimMachine: a profile's ``faults`` list, the SPEC (``NAME[:COUNT]@FAULT@FAULT``),
or code (``machine.inject_xid``, ``machine.lose_gpu``, ``machine.force``).

SPEC fault syntax (GPU indices count within the SPEC item; times are seconds
or durations such as ``500ms``, ``20s``, ``2m``, ``1h``):

    xid=GPU:CODE:TIME       XID CODE on GPU at TIME            xid=1:79:20s
    lost=GPU:TIME           GPU falls off the bus at TIME       lost=0:1m
    force=SYMBOL:ERROR[:GPU]  SYMBOL answers ERROR (on every GPU of the SPEC item, or
                            on one GPU; a system call machine-wide)
                            force=nvmlDeviceGetPowerUsage:NOT_SUPPORTED:1
    unprivileged            the item's GPUs answer as to a user without root/admin:
                            every call nvml.h marks privileged answers NO_PERMISSION
                            (agent/sim/nvml_privileged.json)   h100-sxm-mig:1@unprivileged
    proc=GPU:PID[:MIB]      the host process PID runs on GPU as a compute process
                            (MIB of GPU memory; default: a share of what the GPU uses);
                            repeatable, for attribution tests on real processes
                            proc=0:4242:2048

ERROR is an NVML error name with or without the ``NVML_ERROR_`` prefix
(``NOT_SUPPORTED``, ``GPU_IS_LOST``, ``UNKNOWN`` ...) or its number.

Health faults (row remapping, recovery action, error counters, fabric state, GPU reset) are
parsed and scheduled by gpuagent.sim.health_faults.
"""

from __future__ import annotations

import difflib
import functools
import json
from dataclasses import dataclass
from pathlib import Path

import pynvml

from gpuagent.errors import AgentError
from gpuagent.sim.health_faults import GRAMMAR as HEALTH_GRAMMAR
from gpuagent.sim.health_faults import HealthFault, parse_health_fault
from gpuagent.units import parse_duration


@dataclass(frozen=True)
class XidFault:
    gpu: int
    code: int
    at: float


@dataclass(frozen=True)
class LostFault:
    gpu: int
    at: float


@dataclass(frozen=True)
class ForceFault:
    """``symbol`` answers ``code``: on GPU ``gpu``, on each of ``gpus`` (a SPEC item's, when no GPU
    is named), or machine-wide (neither). A system call (no device handle) is the machine's."""

    symbol: str
    code: int
    gpu: int | None = None
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class UnprivilegedFault:
    """The agent runs without root/admin on these GPUs (SPEC modifier ``@unprivileged``)."""

    gpus: tuple[int, ...]


@dataclass(frozen=True)
class ProcFault:
    """A real host process shown as a compute process on one GPU (``@proc=GPU:PID[:MIB]``)."""

    gpu: int
    pid: int
    mib: int | None = None


Fault = XidFault | LostFault | ForceFault | UnprivilegedFault | ProcFault | HealthFault


def parse_seconds(text: str | float | int, what: str = "time") -> float:
    """A SPEC time: the agent's duration grammar (gpuagent.units), a bare number being seconds."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        if text < 0:
            raise AgentError(f"bad {what} {text!r}: a time cannot be negative")
        return float(text)
    if str(text).strip() in ("0", "0s", "0.0"):
        return 0.0  # "at the start": the one time a duration may be zero
    try:
        return parse_duration(str(text), unitless=True)
    except ValueError:
        raise AgentError(f"bad {what} {text!r}: use seconds or a duration such as 500ms, 20s, 2m, 1h") from None


def error_code(value: str | int) -> int:
    """An NVML error by name (NOT_SUPPORTED, NVML_ERROR_NOT_SUPPORTED) or number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    name = text.upper()
    if name in ("SUCCESS", "NVML_SUCCESS"):
        return pynvml.NVML_SUCCESS
    if not name.startswith("NVML_ERROR_"):
        name = "NVML_ERROR_" + name
    code = getattr(pynvml, name, None)
    if not isinstance(code, int):
        raise AgentError(f"unknown NVML error {value!r} (e.g. NOT_SUPPORTED, GPU_IS_LOST, UNKNOWN, or a number)")
    return code


@functools.cache
def known_symbols() -> frozenset[str]:
    """The libnvidia-ml functions a fault may name: every one the simulated library defines
    (each takes a call slot when defined) and every one gpuagent calls (nvml_conformance.json,
    from nvml.h). A symbol outside both would be forced on a call nothing ever makes."""
    import gpuagent.sim.fakelib  # noqa: F401 - defining the library registers its symbols
    from gpuagent.sim.machine import CALL_SYMBOLS

    table = json.loads((Path(__file__).resolve().parents[1] / "gpus" / "nvml_conformance.json").read_text())
    return frozenset(CALL_SYMBOLS) | frozenset(table["functions"])


def check_symbol(symbol: str) -> str:
    """``symbol`` if libnvidia-ml has it; else AgentError with the nearest name."""
    if symbol in known_symbols():
        return symbol
    near = difflib.get_close_matches(symbol, sorted(known_symbols()), n=1, cutoff=0.7)
    hint = f"did you mean {near[0]}?" if near else "e.g. nvmlDeviceGetPowerUsage"
    raise AgentError(f"no NVML function {symbol!r} in libnvidia-ml ({hint})")


def parse_fault(text: str, offset: int = 0, count: int | None = None) -> Fault:
    """One SPEC fault; GPU numbers are local to the SPEC item and shifted by ``offset``."""
    kind, sep, rest = text.partition("=")
    parts = rest.split(":") if sep else []
    kind = kind.strip().lower()

    def gpu_no(value: str) -> int:
        if not value.strip().isdigit():
            raise AgentError(f"bad fault {text!r}: GPU must be a number")
        n = int(value)
        if count is not None and n >= count:
            raise AgentError(f"bad fault {text!r}: GPU {n} is not in this item (it has {count})")
        return n + offset

    if kind == "unprivileged" and not sep:
        return UnprivilegedFault(tuple(range(offset, offset + (count or 1))))
    try:
        if kind == "xid" and len(parts) == 3:
            return XidFault(gpu_no(parts[0]), int(parts[1]), parse_seconds(parts[2], "fault time"))
        if kind == "lost" and len(parts) == 2:
            return LostFault(gpu_no(parts[0]), parse_seconds(parts[1], "fault time"))
        if kind == "force" and len(parts) in (2, 3):
            gpu = gpu_no(parts[2]) if len(parts) == 3 else None
            try:
                symbol = check_symbol(parts[0].strip())
            except AgentError as exc:
                raise AgentError(f"bad fault {text!r}: {exc}") from None
            # No GPU named: the item's GPUs, not the other items' (a system call stays machine-wide).
            item = tuple(range(offset, offset + count)) if gpu is None and count is not None else ()
            return ForceFault(symbol, error_code(parts[1]), gpu, item)
        if kind == "proc" and len(parts) in (2, 3):
            return _proc_fault(text, gpu_no(parts[0]), parts[1:])
        health = parse_health_fault(kind, parts, gpu_no, lambda t: parse_seconds(t, "fault time"))
        if health is not None:
            return health
    except ValueError:
        pass
    raise AgentError(
        f"bad fault {text!r}: use xid=GPU:CODE:TIME, lost=GPU:TIME, force=SYMBOL:ERROR[:GPU], "
        f"proc=GPU:PID[:MIB], unprivileged, {HEALTH_GRAMMAR}"
    )


def _proc_fault(text: str, gpu: int, parts: list[str]) -> ProcFault:
    """``proc=GPU:PID[:MIB]``: PID and MIB positive whole numbers (the PID need not exist yet)."""
    for value, what in zip(parts, ("PID", "MIB"), strict=False):
        if not value.strip().isdigit() or int(value) <= 0:
            raise AgentError(f"bad fault {text!r}: {what} must be a positive number")
    return ProcFault(gpu, int(parts[0]), int(parts[1]) if len(parts) == 2 else None)


def faults_from_profile(entries: list | None, offset: int, count: int, source: str) -> list[Fault]:
    """A profile's ``faults`` list; an entry without ``gpu`` applies to every GPU of that item.

    Entries: {"type": "xid", "gpu"?, "code", "at"}, {"type": "lost", "gpu"?, "at"},
    {"type": "force", "gpu"?, "symbol", "code"}.
    """
    out: list[Fault] = []
    for entry in entries or []:
        if not isinstance(entry, dict) or "type" not in entry:
            raise AgentError(f"{source}: each fault needs a 'type' (xid, lost or force)")
        kind = entry["type"]
        gpus = [entry["gpu"]] if "gpu" in entry and entry["gpu"] is not None else list(range(count))
        for g in gpus:
            if not isinstance(g, int) or g >= count:
                raise AgentError(f"{source}: fault GPU {g!r} is not in this item (it has {count})")
            if kind == "xid":
                out.append(XidFault(g + offset, int(entry["code"]), parse_seconds(entry.get("at", 0))))
            elif kind == "lost":
                out.append(LostFault(g + offset, parse_seconds(entry.get("at", 0))))
            elif kind == "force":
                try:
                    symbol = check_symbol(str(entry.get("symbol", "")))
                except AgentError as exc:
                    raise AgentError(f"{source}: {exc}") from None
                out.append(ForceFault(symbol, error_code(entry["code"]), g + offset))
            else:
                raise AgentError(f"{source}: unknown fault type {kind!r} (xid, lost or force)")
    return out
