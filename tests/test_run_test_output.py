"""`gpuagent run --once --test` prints the readings and a compact self-measurement: one `gpuagent`
line per collector (agent/service/measurement.md), the per-call NVML refusal series folded into their
collector's line, none of them lost; a normal run's sinks still get the per-call series."""

from __future__ import annotations

import re

from gpuagent.service.self_compact import fold_nvml_errors
from tests.nvml.runs import run_once

SPEC = "l40s:1"


def _lines(stdout: str) -> list[tuple[str, dict[str, str], str]]:
    out = []
    for line in stdout.splitlines():
        head, _, rest = line.partition(" ")
        measurement, *tags = head.split(",")
        out.append((measurement, dict(t.split("=", 1) for t in tags), rest))
    return out


def _folded(fields: str) -> dict[tuple[str, str], int]:
    """CALL:CODE -> answers, from a folded line's nvml_errors string."""
    m = re.search(r'nvml_errors="([^"]*)"', fields)
    if not m:
        return {}
    out = {}
    for item in m.group(1).split():
        call_code, _, n = item.partition("(")
        call, _, code = call_code.rpartition(":")
        out[(call, code)] = int(n.rstrip(")") or 1)
    return out


def test_the_self_measurement_is_one_line_per_collector_and_keeps_every_refusal(invoke, tmp_path):
    result = invoke("run", "--simulate", SPEC, "--once", "--test")
    assert result.exit_code == 0, result.output
    lines = _lines(result.stdout)
    own = [(tags, fields) for m, tags, fields in lines if m == "gpuagent"]
    collectors = [tags["collector"] for tags, _ in own if "collector" in tags]
    assert not [tags for tags, _ in own if "nvml_call" in tags]  # folded, none left as its own line
    assert len(collectors) == len(set(collectors)) >= 10
    # Per collector line, a sink line, the agent process line: nothing else.
    assert len(own) == len(collectors) + 1 + 1, [t for t, _ in own]
    folded = {}
    for tags, fields in own:
        calls = _folded(fields)
        if calls:
            total = int(re.search(r"nvml_errors_total=(\d+)i", fields).group(1))
            assert total == sum(calls.values())
        for (call, code), n in calls.items():
            folded[(tags.get("collector", "agent"), call, code)] = n
    # The same refusals as a normal run delivers, per call, to its sinks.
    run = run_once(SPEC, tmp_path)
    series = {
        (p.tags["collector"], p.tags["nvml_call"], p.tags["nvml_error"]): p.fields["nvml_errors_total"]
        for p in run.nvml_errors()
    }
    assert series and folded == series


def test_a_call_without_its_collector_line_is_kept():
    from gpuagent.pipeline.metric import Point

    call = Point(
        "gpuagent",
        {"host": "h", "collector": "gone", "nvml_call": "nvmlX", "nvml_error": "TIMEOUT"},
        {"nvml_errors_total": 2},
    )
    agent = Point("gpuagent", {"host": "h"}, {"uptime_s": 1.0})
    agent_call = Point(
        "gpuagent",
        {"host": "h", "collector": "agent", "nvml_call": "nvmlInit", "nvml_error": "UNKNOWN"},
        {"nvml_errors_total": 1},
    )
    out = fold_nvml_errors([agent, call, agent_call])
    assert out[0].fields["nvml_errors"] == "nvmlInit:UNKNOWN" and out[0].fields["nvml_errors_total"] == 1
    assert out[1] is call
