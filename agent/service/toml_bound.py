"""TOML read with bounds: a config file is at most MAX_BYTES, nested at most MAX_DEPTH deep, and no
key has more than MAX_KEY_PARTS dotted parts.

tomllib recurses once per level of nesting (100,000 `[` give a RecursionError traceback) and keeps,
for a dotted key of n parts, every prefix of it (n²/2 parts: a 200 KB line `a.a.a…= 1` took over
10 GB in a minute). The shape is checked by one linear scan before tomllib sees the text.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

MAX_BYTES = 1 << 20
MAX_DEPTH = 32  # arrays and inline tables inside one another
MAX_KEY_PARTS = 32


class TomlBoundError(ValueError):
    """The text is larger or deeper than a config file can be: says which bound, in one line."""


def read(path: Path | str) -> bytes:
    """At most MAX_BYTES of the file; TomlBoundError when there is more (OSError as open raises it)."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise TomlBoundError(f"larger than {MAX_BYTES >> 20} MiB: not a config file")
    return data


def loads(text: str) -> dict[str, Any]:
    """tomllib.loads after the shape check (TomlBoundError); tomllib.TOMLDecodeError as before."""
    if len(text) > MAX_BYTES:
        raise TomlBoundError(f"larger than {MAX_BYTES >> 20} MiB: not a config file")
    problem = shape_problem(text)
    if problem:
        raise TomlBoundError(problem)
    return tomllib.loads(text)


def _string_end(text: str, i: int) -> int:
    """The index past the string that starts at i (its quotes: ", ', \"\"\" or '''); len(text) if open."""
    quote = text[i]
    if text.startswith(quote * 3, i):
        end = text.find(quote * 3, i + 3)
        while end >= 0 and quote == '"' and _escaped(text, end):
            end = text.find(quote * 3, end + 1)
        return len(text) if end < 0 else end + 3
    j = i + 1
    while j < len(text) and text[j] not in (quote, "\n"):
        j += 2 if quote == '"' and text[j] == "\\" else 1
    return j + 1


def _escaped(text: str, i: int) -> bool:
    slashes = 0
    while i - slashes - 1 >= 0 and text[i - slashes - 1] == "\\":
        slashes += 1
    return slashes % 2 == 1


def shape_problem(text: str) -> str | None:
    """Why the text is nested or dotted too deep for a config file, or None."""
    depth = dots = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if c in "\"'":
            i = _string_end(text, i)
            continue
        if c in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return f"nested more than {MAX_DEPTH} deep (line {text.count(chr(10), 0, i) + 1})"
            dots = 0
        elif c in "]}":
            depth -= 1
            dots = 0
        elif c == ".":
            dots += 1
            if dots >= MAX_KEY_PARTS:
                return f"a key of more than {MAX_KEY_PARTS} dotted parts (line {text.count(chr(10), 0, i) + 1})"
        elif not (c.isalnum() or c in "_- \t"):
            dots = 0  # '=', ',', a line break: the dotted run ends
        i += 1
    return None
