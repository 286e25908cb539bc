"""The frame's drawing on its own: a fleet longer than the screen scrolls with the selection."""

from __future__ import annotations

from rich.console import Console

from gpuagent.top.model import Frame, Row
from gpuagent.top.view import View, render


def test_a_long_fleet_scrolls_with_the_selection():
    rows = [
        Row(
            key=f"host:h{i:02d}",
            label=f"h{i:02d}",
            kind="host",
            gpus=8,
            power_w=100.0 + i,
            power_limit_w=5600.0,
            verdict="ok",
        )
        for i in range(50)
    ]
    frame = Frame(title="fleet", rows=rows, by="host")
    console = Console(width=80, height=24, no_color=True, force_terminal=False)
    for selected in (0, 30, 49):
        view = View(fleet=True, selected=selected)
        with console.capture() as captured:
            console.print(render(frame, view, 80, 24))
        lines = captured.get().splitlines()
        assert len(lines) <= 24
        shown = [line.split()[0] for line in lines if line.startswith("h")]
        assert f"h{selected:02d}" in shown and len(shown) == 24 - 6
        assert lines[-1].startswith("q quit")


def _screen(rows, width, height=24):
    console = Console(width=width, height=height, no_color=True, force_terminal=False)
    with console.capture() as captured:
        console.print(render(Frame(title="node", rows=rows), View(), width, height))
    return captured.get().splitlines()


def _big_gpus():
    # Four-digit limits and clocks and a long verdict: what cut `350/3…` and `reset_requ` before.
    return [
        Row(key=str(i), label=str(i), kind="gpu", model="NVIDIA H100 80GB HBM3", util_pct=97.0,
            mem_used=70 * 2**30, mem_total=80 * 2**30, power_w=1000.0, power_limit_w=1000.0,
            sm_mhz=1980.0, sm_max_mhz=1980.0, temp_c=74.0, throttle="power cap", verdict="reset_required")
        for i in range(12)
    ]  # fmt: skip


def test_at_80_columns_numbers_stay_whole_and_a_cut_verdict_ends_in_an_ellipsis():
    lines = _screen(_big_gpus(), 80)
    rows = [line for line in lines if line[:1].isdigit() and "H100" in line]
    assert len(rows) == 12 and all(len(line) <= 80 for line in lines)
    for row in rows:
        assert "1000/1000" in row and "1980/1980" in row and "74C" in row, row
        assert row.rstrip().endswith(("reset_required", "…")), row
    assert any(line.startswith("q quit") for line in lines)


def test_at_60_columns_whole_columns_go_and_the_gpu_index_stays():
    lines = _screen(_big_gpus(), 60, 15)
    head = next(line for line in lines if line.startswith("GPU"))
    assert "SM MHz" not in head and "Throttle" not in head  # dropped, not cut
    rows = [line for line in lines if line[:1].isdigit() and "H100" in line]
    assert rows and all(len(line) <= 60 for line in lines)
    assert [row.split()[0] for row in rows] == [str(i) for i in range(len(rows))]  # the index, whole
    assert all("1000/1000" in row for row in rows)


def test_a_printed_frame_has_no_key_line():
    frame = Frame(title="node", rows=_big_gpus()[:2])
    console = Console(width=100, no_color=True, force_terminal=False)
    with console.capture() as captured:
        console.print(render(frame, View(), 100, None, keys=False))
    assert "q quit" not in captured.get()
