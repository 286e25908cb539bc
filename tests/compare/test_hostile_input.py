"""compare against hostile input (issue 46, item 9): a range a nanosecond timestamp cannot hold is
one line before anything is sent."""

from __future__ import annotations

import pytest

from conftest import run_cli


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--since", "1000000000h"], "--since 1000000000h: the range would start before 1970-01-01T00:00:00Z"),
        (["--start", "0", "--end", "99999999999999"], "--end 99999999999999: after 2262-04-11"),
    ],
)
def test_a_range_out_of_timestamps_is_one_line(args, said):
    proc = run_cli("compare", "--url", "http://127.0.0.1:9", "--database", "d", *args)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"gpuagent: error: {said}" or proc.stderr.startswith(f"gpuagent: error: {said}")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
