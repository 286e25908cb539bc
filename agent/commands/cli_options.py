"""Option checks that several commands share (run, inspect, probe)."""

from __future__ import annotations

from gpuagent.errors import AgentError


def simulate_spec(ctx, param, value: str | None) -> str | None:
    """`--simulate ""` is a SPEC left out by mistake (an unset shell variable): say so, rather
    than fall through to the real NVML and its "no NVIDIA driver found"."""
    if value is not None and not value.strip():
        raise AgentError("--simulate: the SPEC is empty; give NAME[:COUNT],..., e.g. --simulate l40s:2")
    return value
