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
