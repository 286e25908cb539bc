"""The one grammar for durations and byte sizes, used by config, spool, probe and the SPEC.

Durations: a number is seconds; a string is one or more NUMBER UNIT parts
(`500ms`, `10s`, `1m30s`, `2h`), units `ns`, `us`/`µs`, `ms`, `s`, `m`/`min`,
`h`, `d`. A string without a unit (`"20"`) is seconds only where the caller
allows it (`unitless=True`: the SPEC and the command line, where every value
is text); in a config file it is refused with a hint, since `interval = "10"`
is more likely a mistake than a choice.

Byte sizes: an integer is bytes; a string is NUMBER [UNIT], case-insensitive:
`B`; binary (powers of two) `K`, `M`, `G`, `T` and `KiB`, `MiB`, `GiB`, `TiB`;
decimal (powers of ten) `KB`, `MB`, `GB`, `TB`. So `512M` = `512MiB` =
536,870,912 bytes and `512MB` = 512,000,000 bytes; `96MB` is how NVIDIA's
datasheets write an L2 size.
"""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import BeforeValidator

DURATION_UNITS = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0,
    "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0,
}  # fmt: skip
_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|min|s|m|h|d)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")

BYTE_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kib": 1 << 10, "kb": 1000,
    "m": 1 << 20, "mib": 1 << 20, "mb": 1000**2,
    "g": 1 << 30, "gib": 1 << 30, "gb": 1000**3,
    "t": 1 << 40, "tib": 1 << 40, "tb": 1000**4,
}  # fmt: skip
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)", re.IGNORECASE)


def parse_duration(value: object, *, unitless: bool = False) -> float:
    """Seconds (> 0, finite); ValueError with a message fit for a one-line error."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {str(value).lower()}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        if _NUMBER.fullmatch(text):
            if float(text) <= 0:  # "0s" or "-5s" would be refused too: suggest one that is not
                raise ValueError(f'expected a positive duration such as "10s", got "{value}"')
            if not unitless:
                raise ValueError(f'expected a duration with a unit such as "{text}s", got "{value}"')
            seconds = float(text)
        elif text.startswith("-") and _is_parts(text[1:]):
            raise ValueError(f'expected a positive duration, got "{value}"')
        elif _is_parts(text):
            seconds = sum(float(n) * DURATION_UNITS[u] for n, u in _PART.findall(text))
        else:
            raise ValueError(f'expected a duration, got "{value}"')
    else:
        raise ValueError(f"expected a duration, got {type(value).__name__}")
    if not math.isfinite(seconds):
        raise ValueError(f"expected a finite duration, got {value!r}")
    if seconds <= 0:
        raise ValueError(f"expected a positive duration, got {value!r}")
    return seconds


def _is_parts(text: str) -> bool:
    return bool(text) and "".join(m.group(0) for m in _PART.finditer(text)) == text


def format_duration(seconds: float) -> str:
    if seconds >= 1 and float(seconds).is_integer():
        return f"{int(seconds)}s"
    # Fixed-point, never an exponent: "1.2e+08ms" is not in the grammar.
    for unit, scale in (("ns", 1e-9), ("us", 1e-6)):
        if seconds < scale * 1000:
            return _fixed(seconds / scale) + unit
    return _fixed(seconds * 1000) + "ms"


def _fixed(number: float) -> str:
    return f"{number:.6f}".rstrip("0").rstrip(".")


def parse_bytes(value: object) -> int:
    """Bytes (> 0) from an int or a string with a unit; ValueError naming the grammar."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size in bytes, got {str(value).lower()}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, float) and value.is_integer():
        size = int(value)
    elif isinstance(value, str):
        m = _SIZE.fullmatch(value.strip())
        unit = m.group(2).lower() if m else None
        if not m or unit not in BYTE_UNITS:
            raise ValueError(
                f'expected a size such as "512M", "512MiB" or "1GB" (K/M/G/T and KiB/MiB/GiB/TiB are '
                f'powers of two, KB/MB/GB/TB powers of ten), got "{value}"'
            )
        size = int(float(m.group(1)) * BYTE_UNITS[unit])
    else:
        raise ValueError(f"expected a size in bytes, got {type(value).__name__}")
    if size <= 0:
        raise ValueError(f"expected a positive size, got {value!r}")
    return size


def human_bytes(n: float) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


# pydantic field types for config models.
Duration = Annotated[float, BeforeValidator(parse_duration)]
ByteSize = Annotated[int, BeforeValidator(parse_bytes)]

# The shortest interval a config may ask for (collection, flush, retry): shorter ones
# only burn CPU and flood the log (1ms: 110% CPU and thousands of lines a second).
MIN_INTERVAL = 0.1


def parse_interval(value: object) -> float:
    seconds = parse_duration(value)
    if seconds < MIN_INTERVAL:
        raise ValueError(f"expected at least {format_duration(MIN_INTERVAL)} (the floor for intervals), got {value!r}")
    return seconds


Interval = Annotated[float, BeforeValidator(parse_interval)]
