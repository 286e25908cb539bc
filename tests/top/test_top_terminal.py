"""`gpuagent top` in a real terminal (tmux): every GPU's row, numbers as `inspect --json` reads
them, MIG instances under their GPU, a Slurm job's process, keys, exit codes, two terminal sizes."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from top.terminal import Tmux

from conftest import run_cli  # tests/conftest.py

SPEC = "l40s:2,h100-sxm-mig:1,rtx4090:1"
MODELS = {"0": "L40S", "1": "L40S", "2": "H100 80GB HBM3", "3": "RTX 4090"}
GIB = 1 << 30

# Each test drives `gpuagent top` in a tmux session over refreshes: slow.
pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/test.sh installs it)"),
    pytest.mark.slow,
]


@pytest.fixture
def terminal(tmp_path):
    made = []

    def make(width: int, height: int) -> Tmux:
        made.append(Tmux(tmp_path, width, height))
        return made[-1]

    yield make
    for t in made:
        t.close()


def gpu_rows(screen: str) -> dict[str, str]:
    """The GPU table's rows by GPU index (the table ends at the blank line before the processes)."""
    table = screen.split("\nGPU Model", 1)[-1].split("\n\n", 1)[0]
    return {m.group(1): line for line in table.splitlines() if (m := re.match(r"(\d+) +(\S)", line))}


def all_gpus(screen: str) -> bool:
    return set(gpu_rows(screen)) == set(MODELS) and "q quit" in screen


def figures(line: str) -> dict[str, float]:
    """The numbers of a GPU row: util %, memory used/total GiB, power/limit W, SM clock/max MHz, temperature."""
    util = re.search(r"(\d+)%", line)
    mem = re.search(r"(\d+\.\d)/(\d+)", line)
    power, clock = re.findall(r"(?<![\d.])(\d+)/(\d+)(?![\d.])", line)[-2:]
    temp = re.search(r"(\d+)C\b", line)
    return {
        "util": float(util.group(1)) if util else None,
        "mem_used": float(mem.group(1)),
        "mem_total": float(mem.group(2)),
        "power": float(power[0]),
        "limit": float(power[1]),
        "sm": float(clock[0]),
        "sm_max": float(clock[1]),
        "temp": float(temp.group(1)),
    }


def inspect_figures(seed: int) -> dict[str, dict[str, float]]:
    result = run_cli("inspect", "--json", "--simulate", SPEC, "--seed", str(seed))
    assert result.returncode == 0, result.stderr
    out = {}
    for g in json.loads(result.stdout)["gpus"]:
        power, clocks, mem = g["gpu_power"], g["gpu_clocks"], g["gpu_memory"]
        out[str(g["index"])] = {
            "power": power["power_w"],
            "limit": power["power_limit_w"],
            "temp": power["temperature_c"],
            "sm": clocks["sm_clock_mhz"],
            "sm_max": clocks["max_sm_clock_mhz"],
            "mem_used": mem["fb_used_bytes"] / GIB,
            "mem_total": mem["fb_total_bytes"] / GIB,
        }
    return out


def clock_of(screen: str) -> str:
    return re.search(r"\d\d:\d\d:\d\d", screen).group(0)


def next_frame(t: Tmux, screen: str) -> str:
    shown = clock_of(screen)
    return t.wait_for(lambda s: all_gpus(s) and clock_of(s) != shown, "the next refresh")


def test_every_gpu_row_matches_inspect_within_a_refresh(terminal):
    # The simulator's time starts when its session opens: top's first frame and a fresh
    # `inspect --json` read the same seed at the same simulated moment, within a refresh.
    t = terminal(200, 60)
    t.start_top("--simulate", SPEC, "--seed", "7", "--interval", "1m")
    before = t.wait_for(all_gpus, "every GPU's row")
    truth = inspect_figures(7)
    for gpu, model in MODELS.items():
        shown = figures(gpu_rows(before)[gpu])
        assert model in gpu_rows(before)[gpu]
        want = truth[gpu]
        # Fixed facts: exactly what inspect reads (as shown: whole watts, MHz, GiB).
        assert (shown["limit"], shown["sm_max"], shown["mem_total"]) == (
            round(want["limit"]),
            want["sm_max"],
            round(want["mem_total"]),
        ), gpu
        # Moving readings: what the load model gives within a second of simulated time.
        slack = {"power": 0.03 * want["limit"], "sm": 0.03 * want["sm_max"], "temp": 1.5, "mem_used": 0.15}
        for name, tol in slack.items():
            assert abs(shown[name] - want[name]) <= tol, (gpu, name, shown[name], want[name])
    # The MIG instances, under their GPU.
    lines = before.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("2 "))
    assert re.search(r"└ MIG0 3g\.40gb", lines[at + 1]) and re.search(r"└ MIG1 3g\.40gb", lines[at + 2])
    t.keys("q")
    assert t.exit_code() == 0


def test_keys_sort_filter_and_quit(terminal):
    t = terminal(120, 40)
    t.start_top("--simulate", SPEC, "--seed", "1")
    screen = t.wait_for(all_gpus, "every GPU's row")
    t.keys("s")
    screen = t.wait_for(lambda s: "sort util" in s and all_gpus(s), "the sort by utilisation")
    order = [figures(line)["util"] for line in gpu_rows(screen).values() if figures(line)["util"] is not None]
    assert order == sorted(order, reverse=True) and list(gpu_rows(screen)) != sorted(MODELS)
    t.keys("g")  # the first GPU alone
    screen = t.wait_for(lambda s: "GPU 0" in s.splitlines()[1], "the GPU filter")
    assert list(gpu_rows(screen)) == ["0"]
    assert all(line.split()[0] == "0" for line in screen.split("Command")[1].splitlines()[1:] if line[:1].isdigit())
    t.keys("q")
    assert t.exit_code() == 0


def test_ctrl_c_exits_130(terminal):
    t = terminal(100, 30)
    t.start_top("--simulate", "l40s:1")
    t.wait_for(lambda s: "q quit" in s, "the first frame")
    t.keys("C-c")
    assert t.exit_code() == 130


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
def test_renders_without_broken_lines(terminal, size):
    width, height = size
    t = terminal(width, height)
    t.start_top("--simulate", SPEC)
    screen = t.wait_for(all_gpus, "every GPU's row")
    lines = screen.splitlines()
    assert len(lines) <= height and all(len(line) <= width for line in lines)
    for gpu, line in gpu_rows(screen).items():
        # A whole row on one line: model first, verdict last.
        assert MODELS[gpu] in line and line.rstrip().endswith("ok") or re.search(r" ok +[▁-█ ]+$", line), line
    head = next(i for i, line in enumerate(lines) if line.startswith("GPU "))
    table = lines[head + 1 : head + 1 + len(MODELS) + 2]
    assert all(re.match(r"(\d+ |    └ MIG)", line) for line in table), table
    assert [line for line in lines if line.strip()][-1].startswith("q quit")  # nothing cut at the bottom
    t.keys("q")
    assert t.exit_code() == 0


def test_a_slurm_jobs_process_is_shown_with_its_job(terminal, slurm_cluster):
    job = slurm_cluster.submit("sleep 300", account="physics", job_name="train")
    try:
        pid = slurm_cluster.wait_running(job, "sleep 300")
        t = terminal(120, 40)
        t.start_top("--simulate", f"l40s:2,h100-sxm-mig:1,rtx4090:1@proc=0:{pid}:2048")
        screen = t.wait_for(lambda s: f"slurm {job}" in s, "the job's process")
        line = next(line for line in screen.splitlines() if f" {pid} " in line)
        assert line.split()[0] == "3" and f"slurm {job}" in line and "2.0G" in line and "sleep" in line
        t.keys("j")  # only the GPUs and processes of that job
        screen = t.wait_for(lambda s: f"job slurm {job}" in s, "the job filter")
        assert list(gpu_rows(screen)) == ["3"]
        t.keys("q")
        assert t.exit_code() == 0
    finally:
        slurm_cluster.cancel(job)


def test_a_resize_redraws_at_the_new_size_at_once(terminal):
    t = terminal(200, 60)
    t.start_top("--simulate", SPEC, "--interval", "10m")  # no refresh during the test: only the resize redraws
    t.wait_for(lambda s: all_gpus(s) and "Power / util history" in s, "the wide view")
    t.tmux("resize-window", "-t", "top", "-x", "80", "-y", "24")
    screen = t.wait_for(lambda s: all_gpus(s) and "history" not in s, "the view at 80 columns")
    assert all(len(line) <= 80 for line in screen.splitlines())
    t.keys("q")
    assert t.exit_code() == 0
