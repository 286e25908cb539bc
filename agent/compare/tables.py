"""Terminal tables of the compare reports, sized to the terminal.

Every table goes through `render`: its width is rich's own (`COLUMNS` where set, else the terminal's;
into a pipe or a file, where nothing wraps, `WIDE`). A table wider than that is split: the key
columns (the group, the unit) repeated, the other columns in as many tables as it takes, in order, so
that no cell is cut mid-number. Under each table a footnote of definitions, wrapped to the width.
Renderers that add lines (a footnote, a section) add them through `render` or `note` and fit too.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

WIDE = 200  # not a terminal and no COLUMNS: one table as wide as its cells want, up to this


def width() -> int:
    """The terminal's width as rich takes it: COLUMNS, else stdout's terminal, else WIDE."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size((WIDE, 24)).columns
    return WIDE


@dataclass
class Column:
    header: str
    right: bool = False  # numbers right-aligned


def _natural(column: Column, cells: Sequence[str]) -> int:
    """The width a column takes unwrapped: its longest cell, or its header's longest word."""
    longest_word = max((len(w) for w in column.header.split()), default=0)
    return max([longest_word, *(len(c) for c in cells)])


def split(columns: Sequence[Column], rows: Sequence[Sequence[str]], keys: int, room: int) -> list[list[int]]:
    """The column indices of each table: the keys in every one, the others in order, each table at
    most `room` wide (a box-drawn table costs 3 a column and 1 more)."""
    cost = [_natural(c, [r[i] for r in rows]) + 3 for i, c in enumerate(columns)]
    base = 1 + sum(cost[:keys])
    parts: list[list[int]] = []
    current: list[int] = []
    used = base
    for i in range(keys, len(columns)):
        if current and used + cost[i] > room:
            parts.append(current)
            current, used = [], base
        current.append(i)
        used += cost[i]
    if current or not parts:
        parts.append(current)
    return [list(range(keys)) + part for part in parts]


def note(text: str, room: int | None = None) -> str:
    """A footnote line (or lines) wrapped to the width."""
    room = room or width()
    return "\n".join(textwrap.wrap(text, room, break_on_hyphens=False, subsequent_indent="  ")) + "\n"


def render(
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    keys: int = 1,
    footnote: str = "",
    room: int | None = None,
) -> str:
    """One table (or several, split by `split`) and its footnote, as text no wider than `room`."""
    from rich.console import Console
    from rich.table import Table

    room = room or width()
    buf = io.StringIO()
    console = Console(file=buf, width=room, force_terminal=False, color_system=None)
    console.print(note(title, room), end="")
    parts = split(columns, rows, keys, room)
    for n, part in enumerate(parts):
        table = Table(header_style="bold", title=f"(part {n + 1} of {len(parts)})" if len(parts) > 1 else None)
        if len(parts) > 1:
            table.title_justify = "left"
        for i in part:
            table.add_column(columns[i].header, justify="right" if columns[i].right else "left", overflow="fold")
        for r in rows:
            table.add_row(*(r[i] for i in part))
        console.print(table)
    text = "".join(line.rstrip() + "\n" for line in buf.getvalue().splitlines())  # rich pads titles
    if footnote:
        text += note(footnote, room)
    return text
