"""The human view and the JSON schema, on a hand-built facts dict (no NVML involved)."""

from __future__ import annotations

import copy
import io
import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from gpuagent.commands import facts as facts_mod
from gpuagent.commands.inspect import WIDTH, make_console, render, render_text

HERE = Path(__file__).parent
SNAPSHOTS = HERE / "snapshots"
UPDATE = bool(os.environ.get("GPUAGENT_UPDATE_SNAPSHOTS"))


def handmade() -> dict:
    """Four GPUs: L40S (vGPU host), RTX 4090 (most readings n/a), H100 (MIG), and a lost H100."""
    return json.loads((HERE / "handmade_facts.json").read_text())


def check_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / name
    if UPDATE or not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        if not UPDATE:
            pytest.fail(f"snapshot {path} did not exist; written now, check it and rerun")
    assert text == path.read_text(), f"layout changed; if intended, rerun with GPUAGENT_UPDATE_SNAPSHOTS=1 ({path})"


def test_handmade_facts_match_the_shipped_schema():
    jsonschema.validate(handmade(), facts_mod.schema())


def test_schema_refuses_a_unit_less_or_stringly_number():
    doc = handmade()
    doc["gpus"][0]["gpu_memory"]["fb_total_bytes"] = "45 GiB"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, facts_mod.schema())
    doc = handmade()
    doc["gpus"][0]["gpu_memory"]["fb_total"] = 1  # no unit in the name
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, facts_mod.schema())
    doc = handmade()
    del doc["gpus"][0]["gpu_clocks"]  # only a lost GPU may leave its readings out
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, facts_mod.schema())
    doc = handmade()
    doc["gpus"][0]["gpu_power"]["power_draw_w"] = 1.0  # not the stream's name (power_w)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, facts_mod.schema())


def test_human_view_snapshot():
    check_snapshot("handmade.txt", render_text(handmade()))


def test_human_view_fits_100_columns_and_shows_every_section():
    text = render_text(handmade())
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    for expected in (
        "Driver 550.54.15   CUDA 12.4   NVML 12.550.54.15",
        "GPU 0  NVIDIA L40S  Ada Lovelace",
        "96 MiB",
        "864 GB/s",
        "384-bit",
        "210 / 2520 MHz",
        "36.2 / 350 W",
        "software power cap, software thermal",
        "Gen1 x16 (max Gen4 x16)",
        "vGPU host (SR-IOV), 1 vGPU",
        "vGPU 1: NVIDIA L40S-24Q",
        "on, 1 instance",
        "MIG 0: 3g.40gb  GI 1 CI 0",
        "on (off after reset)",
        "P2P matrix",
        "Plugins that failed to load",
        "broken (gpuagent_broken): ImportError",
    ):
        assert expected in text, expected


def test_unsupported_values_show_as_na():
    block = render_text(handmade()).split("GPU 1  ")[1].split("GPU 2  ")[0]
    assert re.search(r"L2 cache\s+n/a", block)
    assert re.search(r"Bus width\s+n/a\s+Peak DRAM\s+n/a", block)
    assert re.search(r"ECC\s+n/a", block)
    assert "None" not in render_text(handmade())


def test_lost_gpu_shows_as_lost_and_the_rest_still_print():
    text = render_text(handmade())
    assert "GPU 3  NVIDIA H100 80GB HBM3  Hopper  LOST" in text
    assert "GPU is lost" in text
    assert text.index("GPU 2  ") < text.index("GPU 3  ") < text.index("P2P matrix")


def test_no_failed_plugins_no_section():
    doc = handmade()
    doc["plugins"] = [p for p in doc["plugins"] if p["status"] != "failed"]
    assert "failed to load" not in render_text(doc)


def test_p2p_matrix_cells():
    text = render_text(handmade())
    rows = {line.split()[0]: line for line in text.splitlines() if re.match(r"GPU\d+\s+(X|\w+ [RWN-]+)\s", line)}
    assert rows["GPU0"].split() == ["GPU0", "X", "SYS", "-", "PHB", "RW"]
    assert rows["GPU1"].split() == ["GPU1", "SYS", "-", "X", "SYS", "-"]


def _sgr_params(output: str) -> set[int]:
    params: set[int] = set()
    for group in re.findall(r"\x1b\[([0-9;]*)m", output):
        params.update(int(p) for p in group.split(";") if p)
    return params


def _is_colour(param: int) -> bool:
    return 30 <= param <= 38 or 40 <= param <= 48 or 90 <= param <= 107


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_without_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    tty = FakeTty()
    render(handmade(), make_console(tty))
    assert any(_is_colour(p) for p in _sgr_params(tty.getvalue())), "a terminal gets colour"

    pipe = io.StringIO()
    render(handmade(), make_console(pipe))
    assert "\x1b[" not in pipe.getvalue(), "a pipe gets plain text"

    monkeypatch.setenv("NO_COLOR", "1")
    tty = FakeTty()
    render(handmade(), make_console(tty))
    assert not any(_is_colour(p) for p in _sgr_params(tty.getvalue())), "NO_COLOR: no colour"


def test_piped_view_is_100_columns_wide_not_80():
    pipe = io.StringIO()
    render(handmade(), make_console(pipe))
    lines = pipe.getvalue().splitlines()
    assert any(len(line.rstrip()) > 80 for line in lines)
    assert all(len(line.rstrip()) <= WIDTH for line in lines)


def test_render_does_not_change_the_facts():
    doc = handmade()
    before = copy.deepcopy(doc)
    render_text(doc)
    assert doc == before


def test_narrow_terminal_gets_one_fact_a_row_with_no_label_cut():
    text = render_text(handmade(), width=80)
    assert "…" not in text.split("P2P matrix")[0]
    assert re.search(r"^PCI bus id\s+00000000:01:00\.0$", text, flags=re.MULTILINE)
    assert re.search(r"^Temperature\s+31 C$", text, flags=re.MULTILINE)


def test_terminal_output_has_no_trailing_blanks(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "100")
    tty = FakeTty()
    render(handmade(), make_console(tty))
    output = tty.getvalue()
    assert "\x1b[" in output
    assert not [line for line in output.splitlines() if re.search(r" +(\x1b\[[0-9;]*m)*$", line)]


def test_power_shows_the_management_limit_and_an_enforced_limit_that_differs():
    doc = handmade()
    assert "36.2 / 350 W (limit)" in render_text(doc)  # enforced = management: said once
    doc["gpus"][0]["gpu_power"]["enforced_power_limit_w"] = 300.0  # a policy holds it lower
    jsonschema.validate(doc, facts_mod.schema())
    assert "36.2 / 350 W (limit, 300 enforced)" in render_text(doc)
