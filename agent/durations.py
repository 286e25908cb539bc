"""Durations in config: seconds as a number, or a string with a unit ("500ms", "1m30s")."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d)")


def parse_duration(value: object) -> float:
    """Return seconds; raise ValueError with a message fit for a one-line config error."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}".replace("True", "true").replace("False", "false"))
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        if re.fullmatch(r"-?\d+(\.\d+)?", text):
            raise ValueError(f'expected a duration with a unit such as "{text}s", got "{value}"')
        if text.startswith("-") and _full_match(text[1:]):
            raise ValueError(f'expected a positive duration, got "{value}"')
        if not _full_match(text):
            raise ValueError(f'expected a duration, got "{value}"')
        seconds = sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
    else:
        raise ValueError(f"expected a duration, got {type(value).__name__}")
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        raise ValueError(f"expected a finite duration, got {value!r}")
    if seconds <= 0:
        raise ValueError(f"expected a positive duration, got {value!r}")
    return seconds


def _full_match(text: str) -> bool:
    return bool(text) and "".join(m.group(0) for m in _PART.finditer(text)) == text


def format_duration(seconds: float) -> str:
    if seconds >= 1 and float(seconds).is_integer():
        return f"{int(seconds)}s"
    if seconds < 1e-6:
        return f"{seconds * 1e9:g}ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:g}us"
    return f"{seconds * 1000:g}ms"


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
