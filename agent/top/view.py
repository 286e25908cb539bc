"""Drawing a frame with rich: one line per GPU (instances under it), the processes below.

Every cell is no_wrap with an ellipsis, and the columns shown depend on the width, so each row
stays one line from 80 columns up; the process list is cut to the height left.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gpuagent.top.model import Frame, Proc, Row, severity, short_model

GIB = 1 << 30
BLOCKS = " ▏▎▍▌▋▊▉█"
SPARKS = "▁▂▃▄▅▆▇█"
SORTS = ("index", "util", "power", "memory", "temp", "health")
HEALTH_STYLE = {"ok": "green", "degraded": "yellow"}  # anything worse: bold red


@dataclass
class View:
    """What the keys changed: sort order, filters, the fleet's selected row and the host shown."""

    sort: str = "index"
    gpu: str | None = None  # show only this GPU (row key)
    job: str | None = None  # show only the GPUs and processes of this job
    selected: int = 0
    host: str | None = None  # fleet: the host whose GPUs are shown
    fleet: bool = False
    interval: float = 2.0
    message: str = ""
    jobs: list[str] = field(default_factory=list)


def bar(fraction: float | None, width: int) -> str:
    if fraction is None or width <= 0:
        return " " * width
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (BLOCKS[part] if part else "")).ljust(width)


def sparkline(values: list[float], top: float | None, width: int) -> str:
    if width <= 0:
        return ""
    values = values[-width:]
    top = top or max(values, default=0) or 1.0
    return "".join(SPARKS[min(len(SPARKS) - 1, int(max(v, 0) / top * (len(SPARKS) - 1) + 0.5))] for v in values).ljust(
        width
    )


def _num(value: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def sort_rows(rows: list[Row], how: str) -> list[Row]:
    keys = {
        "index": lambda r: (0, int(r.key) if r.key.isdigit() else 0, r.key),
        "util": lambda r: (-(r.util_pct or -1), r.key),
        "power": lambda r: (-(r.power_w or -1), r.key),
        "memory": lambda r: (-(r.mem_used or -1), r.key),
        "temp": lambda r: (-(r.temp_c or -1), r.key),
        "health": lambda r: (-severity(r.verdict), int(r.key) if r.key.isdigit() else 0, r.key),
    }
    return sorted(rows, key=keys[how])


def visible(frame: Frame, view: View) -> tuple[list[Row], list[Proc]]:
    """The rows and processes the filters leave, rows in the chosen order."""
    rows, procs = frame.rows, frame.procs
    if view.job:
        procs = [p for p in procs if p.job == view.job]
        gpus = {p.gpu.split("/")[0] for p in procs}
        rows = [r for r in rows if r.key in gpus]
    if view.gpu is not None:
        rows = [r for r in rows if r.key == view.gpu]
        procs = [p for p in procs if p.gpu.split("/")[0] == view.gpu]
    return sort_rows(rows, view.sort), procs


def render(frame: Frame, view: View, width: int, height: int | None = None, keys: bool = True) -> Group:
    """The frame; ``keys``: the key line under it (a printed frame, into a pipe or --once, takes no keys)."""
    rows, procs = visible(frame, view)
    wide = width >= 110
    huge = width >= 160
    bar_w = 10 if huge else 6 if wide else 3
    # The history takes what the other columns leave, up to 20 samples of each.
    hist_w = min(41, width - 2 * bar_w - 90) if wide else 0
    hist_w = hist_w if hist_w >= 8 else 0
    fleet_rows = view.fleet and view.host is None

    # One blank between columns. Numbers are never cut: where the row does not fit, whole columns
    # are dropped (the least telling first), and only text (model, throttle, health) ends in "…".
    first = {"host": "Host", "model": "Model"}.get(frame.by, "GPU") if fleet_rows else "GPU"
    columns = [
        _Col(first, "text" if fleet_rows else "key", shrink_to=4, max_width=24 if fleet_rows else None),
        _Col("GPUs", "num") if fleet_rows else _Col("Model", "text", shrink_to=6, max_width=22 if wide else 15),
        _Col("Util", "num", drop=5),
        _Col("Memory GiB", "num", drop=4),
        _Col("Power W", "num", drop=3),
        _Col("SM MHz", "num", drop=1),
        _Col("Temp", "num", drop=2),
        _Col("Throttle", "text", shrink_to=8, max_width=10, drop=0),
        _Col("Health", "text", shrink_to=6, max_width=40 if huge else 15),
    ]
    if hist_w:
        columns.append(_Col("Power / util history", "num", drop=-1))
    lines: list[tuple[list, str | None]] = []

    def add(row: Row, index: int, child: bool = False) -> None:
        util = Text(bar(None if row.util_pct is None else row.util_pct / 100, bar_w), style="green")
        util.append("    -" if row.util_pct is None else f" {row.util_pct:>3.0f}%")
        mem_frac = row.mem_used / row.mem_total if row.mem_used is not None and row.mem_total else None
        mem = Text(bar(mem_frac, bar_w), style="magenta")
        mem.append(
            f"{_num(row.mem_used and row.mem_used / GIB, '{:.1f}'):>5}/{_num(row.mem_total and row.mem_total / GIB, '{:.0f}')}"
        )
        power = f"{_num(row.power_w)}/{_num(row.power_limit_w)}"
        clock = f"{_num(row.sm_mhz)}/{_num(row.sm_max_mhz)}"
        temp = "-" if row.temp_c is None else f"{row.temp_c:.0f}C"
        verdict = row.verdict or "-"
        health = Text(
            verdict + (f" {row.reason}" if huge and row.reason and verdict != "ok" else ""),
            style=HEALTH_STYLE.get(verdict, "bold red") if row.verdict else "dim",
        )
        if fleet_rows:
            name, second = row.label, str(row.gpus)
        elif child:
            name, second = "", "└ " + row.label
        else:
            name, second = row.label, short_model(row.model)
        cells = [name, second, util, mem]
        if child:  # an instance has its own memory and busy time; power, clocks and health are its GPU's
            cells += ["", "", "", "", ""]
        else:
            cells += [power, clock, temp, row.throttle or "-", health]
        if hist_w:
            power_w = hist_w // 2
            # An instance has no power of its own: its column stays blank.
            history = Text(
                " " * power_w if child else sparkline(row.power_hist, row.power_limit_w, power_w), style="yellow"
            )
            history.append(" ")
            history.append(sparkline(row.util_hist, 100.0, hist_w - power_w - 1), style="green")
            cells.append(history)
        style = "reverse" if fleet_rows and index == view.selected else None
        lines.append((cells, style))

    first_shown = 0
    if fleet_rows and height is not None:  # a long fleet scrolls with the selection
        room = max(1, height - 6)
        first_shown = max(0, min(view.selected - room + 1, len(rows) - room))
        rows = rows[first_shown : first_shown + room]
    for i, row in enumerate(rows, start=first_shown):
        add(row, i)
        for child in row.children:
            add(child, i, child=True)
    table = _fit(columns, lines, width)

    parts: list = [header(frame, view)]
    if frame.note:
        parts.append(Text(frame.note, style="yellow", no_wrap=True, overflow="ellipsis"))
    parts.append(table)
    used = len(parts) + 2 + len(rows) + sum(len(r.children) for r in rows)
    if not view.fleet:  # the fleet's servers hold no process list
        left = None if height is None else max(0, height - used - 4)
        parts.append(Text(""))
        parts.append(process_table(procs, left, wide))
    if keys:
        parts.append(Text(keys_help(view), style="dim", no_wrap=True, overflow="ellipsis"))
    return Group(*parts)


@dataclass
class _Col:
    """A GPU-table column: "num" cells are never cut (the column is dropped instead, lowest `drop`
    first; None: never), "text" ones may end in an ellipsis down to `shrink_to`, "key" ones stay whole."""

    header: str
    kind: str
    drop: int | None = None
    shrink_to: int = 0
    max_width: int | None = None


def _cell_len(cell) -> int:
    return cell.cell_len if isinstance(cell, Text) else len(cell)


def _fit(columns: list[_Col], lines: list[tuple[list, str | None]], width: int) -> Table:
    """The table of the columns that fit `width` at their least (numbers whole, text shrunk)."""
    need = [max([len(c.header), *(_cell_len(r[i]) for r, _ in lines)]) for i, c in enumerate(columns)]
    least = [
        min(n, c.shrink_to, c.max_width or n) if c.kind == "text" else n for c, n in zip(columns, need, strict=True)
    ]
    shown = list(range(len(columns)))
    droppable = sorted((c.drop, i) for i, c in enumerate(columns) if c.drop is not None)
    while sum(least[i] for i in shown) + len(shown) - 1 > width and droppable:
        shown.remove(droppable.pop(0)[1])
    # Each column at a set width (rich would otherwise cut any column, numbers too, to fit): the text
    # ones from their least up to what they want, while there is room.
    widths = {i: least[i] for i in shown}
    spare = width - (sum(widths.values()) + len(shown) - 1)
    for i in shown:
        c = columns[i]
        if c.kind == "text" and spare > 0:
            more = min(spare, min(need[i], c.max_width or need[i]) - widths[i])
            widths[i] += max(0, more)
            spare -= max(0, more)
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False, header_style="bold", expand=False)
    for i in shown:
        c = columns[i]
        right = c.kind == "num" and c.header not in ("Util", "Memory GiB", "Power / util history")
        table.add_column(
            c.header,
            no_wrap=True,
            overflow="ellipsis",
            justify="right" if right else "left",
            width=widths[i],
        )
    for cells, style in lines:
        table.add_row(*(cells[i] for i in shown), style=style)
    return table


def header(frame: Frame, view: View) -> Group:
    """Two lines: what is shown (host, source), then when and how (clock, refresh, sort, filters)."""
    title = Text(frame.title, style="bold", no_wrap=True, overflow="ellipsis")
    text = Text(no_wrap=True, overflow="ellipsis")
    if view.host:
        text.append(f"host {view.host}  ", style="bold cyan")
    clock = time.strftime("%H:%M:%S", time.localtime(frame.time_s or time.time()))
    text.append(f"{clock}  every {round(view.interval, 1):g}s  sort {view.sort}")
    if view.gpu is not None:
        text.append(f"  GPU {view.gpu}", style="cyan")
    if view.job:
        text.append(f"  job {view.job}", style="cyan")
    if view.message:
        text.append(f"  {view.message}", style="yellow")
    return Group(title, text)


def process_table(procs: list[Proc], limit: int | None, wide: bool) -> Table:
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False, header_style="bold")
    table.add_column("GPU", no_wrap=True, max_width=7)
    table.add_column("PID", no_wrap=True, justify="right")
    table.add_column("User", no_wrap=True, overflow="ellipsis", max_width=12)
    table.add_column("Job / pod", no_wrap=True, overflow="ellipsis", max_width=24)
    table.add_column("GPU mem", no_wrap=True, justify="right")
    table.add_column("SM", no_wrap=True, justify="right")
    table.add_column("Command", no_wrap=True, overflow="ellipsis", max_width=40 if wide else 16)
    procs = sorted(procs, key=lambda p: (_gpu_order(p.gpu), -(p.mem_bytes or 0), p.pid))
    shown = procs if limit is None or len(procs) <= limit else procs[: max(0, limit - 1)]
    for p in shown:
        mem = (
            "-"
            if p.mem_bytes is None
            else f"{p.mem_bytes / GIB:.1f}G"
            if p.mem_bytes >= GIB
            else f"{p.mem_bytes >> 20}M"
        )
        sm = "-" if p.sm_pct is None else f"{p.sm_pct:.0f}%"
        table.add_row(p.gpu, p.pid, p.user or "-", p.job or "-", mem, sm, p.name or "-")
    if len(shown) < len(procs):
        table.add_row("", "", f"… {len(procs) - len(shown)} more", "", "", "", "")
    if not procs:
        table.add_row("", "", "no processes", "", "", "", "")
    return table


def _gpu_order(gpu: str) -> tuple:
    index, _, instance = gpu.partition("/")
    return (int(index) if index.isdigit() else 1 << 30, instance)


def keys_help(view: View) -> str:
    if view.fleet and view.host is None:
        return "q quit  s sort  ↑↓ select  enter its GPUs"
    if view.fleet:  # a host's GPUs: the servers hold no process list, so no job filter
        return "q quit  s sort  g GPU filter  esc back"
    return "q quit  s sort  g GPU filter  j job filter"
