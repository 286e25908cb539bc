"""`gpuagent top` in-process: one frame of a simulated node, the fleet view's bad URL, how keys
are read and how a host's GPUs fold into one row. tests/top/test_top_plain.py and
test_top_terminal.py run it as a user does (subprocesses, tmux), in the slow lane."""

from __future__ import annotations

from gpuagent.top.fleet import aggregate
from gpuagent.top.keys import split_keys


def test_once_prints_a_row_per_gpu_and_a_lost_one_says_lost(invoke):
    result = invoke("top", "--once", "--simulate", "l40s:2@lost=1:0s")
    assert result.exit_code == 0, result.output
    rows: dict[str, str] = {}
    for line in result.stdout.splitlines():
        if line[:2] in ("0 ", "1 "):
            rows.setdefault(line[0], line)  # the GPU rows come before the process rows
    assert "L40S" in rows["0"] and rows["1"].rstrip().endswith("lost")
    assert not any(line.startswith("q quit") for line in result.stdout.splitlines())  # no keys read here


def test_the_fleet_view_of_a_server_that_does_not_answer_is_one_line(invoke):
    result = invoke("top", "--fleet", "--once", "--url", "http://127.0.0.1:1", "--database", "x")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1 and "cannot reach InfluxDB at http://127.0.0.1:1" in result.stderr


def test_one_read_of_several_keys_gives_each_key():
    assert split_keys("\x1b[Aq\x1bOB\r") == ["up", "q", "down", "enter"]
    assert split_keys("\x1b[Cx") == ["other", "x"]  # an unknown cursor key is one key, not three


def test_a_hosts_gpus_fold_into_one_row():
    members = [
        {
            "model": "L40S",
            "power_w": 300.0,
            "power_limit_w": 350.0,
            "gpu_util_pct": 90.0,
            "temperature_c": 70.0,
            "verdict": "ok",
        },
        {
            "model": "L40S",
            "power_w": 100.0,
            "power_limit_w": 350.0,
            "gpu_util_pct": None,
            "temperature_c": 81.0,
            "verdict": "degraded",
            "verdict_reason": "XID 13",
        },
    ]
    row = aggregate("gpu-a", members, "host")
    assert (row.key, row.gpus, row.model) == ("host:gpu-a", 2, "L40S")
    assert (row.power_w, row.power_limit_w, row.util_pct, row.temp_c) == (400.0, 700.0, 90.0, 81.0)
    assert (row.verdict, row.reason) == ("degraded", "XID 13")  # the worst GPU speaks for the host
