"""Durations in config: seconds as a number, or a string with a unit ("500ms", "1m30s")."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator

# One grammar for the whole agent (config, spool, probe, SPEC): gpuagent.units.
from gpuagent.units import format_duration, parse_duration

Duration = Annotated[float, BeforeValidator(parse_duration)]

# The shortest interval a config may ask for (collection, flush, retry): shorter ones
# only burn CPU and flood the log (1ms: 110% CPU and thousands of lines a second).
MIN_INTERVAL = 0.1


def parse_interval(value: object) -> float:
    seconds = parse_duration(value)
    if seconds < MIN_INTERVAL:
        raise ValueError(f"expected at least {format_duration(MIN_INTERVAL)} (the floor for intervals), got {value!r}")
    return seconds


Interval = Annotated[float, BeforeValidator(parse_interval)]
