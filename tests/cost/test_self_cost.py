"""The agent's own cost: per collector, NVML calls and CPU time per run in `gpuagent`, the
last minute in the state directory's cost.json, shown by `gpuagent inspect` (issue 21)."""

from __future__ import annotations

import json

from gpuagent.service.runtime import Options, build


def _agent(tmp_path, collectors=("clocks", "power")):
    from gpuagent.plugin_host import PluginHost

    text = f'[agent]\nstate_dir = "{tmp_path}"\n[sinks.file]\npath = "/dev/null"\n'
    for name in PluginHost(load_entry_points=False).load().collectors:
        if name not in collectors:
            text += f"\n[collectors.{name}]\nenabled = false\n"
    config = tmp_path / "gpuagent.toml"
    config.write_text(text)
    return build(Options(config_path=config, simulate="h100-sxm:2")), config


def test_calls_and_cpu_per_collector_run(tmp_path):
    agent, _ = _agent(tmp_path)
    try:
        agent.scheduler.run_once()
        points = agent.scheduler.run_once()
    finally:
        agent.close(flush_timeout=1)
    own = {p.tags["collector"]: p.fields for p in points if p.measurement == "gpuagent" and "runs_total" in p.fields}
    assert {"clocks", "power"} <= set(own)
    for name in ("clocks", "power"):
        fields = own[name]
        # Each GPU is read at least once per run; the totals cover both runs.
        assert fields["nvml_calls"] >= 2, name
        assert fields["nvml_calls_total"] > fields["nvml_calls"], name
        assert fields["cpu_time_ms"] >= 0 and fields["collector_cpu_seconds_total"] >= 0
    doc = json.loads((tmp_path / "cost.json").read_text())
    # An agent seconds old has no minute behind it: the window is its life so far (issue 29:
    # "last 60 s" over one run, a minute after start).
    assert 0 < doc["window_s"] < 60
    assert doc["collectors"]["clocks"]["runs"] == 2
    assert doc["collectors"]["clocks"]["nvml_calls"] == own["clocks"]["nvml_calls_total"]


def test_inspect_shows_the_last_minute(tmp_path, invoke):
    agent, config = _agent(tmp_path)
    try:
        agent.scheduler.run_once()
    finally:
        agent.close(flush_timeout=1)
    calls = json.loads((tmp_path / "cost.json").read_text())["collectors"]["power"]["nvml_calls"]
    result = invoke("inspect", "--simulate", "h100-sxm:1", "--config", str(config))
    assert result.exit_code == 0, result.output
    window = json.loads((tmp_path / "cost.json").read_text())["window_s"]
    assert window < 60 and f"Agent cost, last {window:g} s" in result.output
    (row,) = [line.split() for line in result.output.splitlines() if line.startswith("power ")]
    assert row[1:3] == ["1", str(calls)]
    doc = json.loads(invoke("inspect", "--simulate", "h100-sxm:1", "--config", str(config), "--json").output)
    assert doc["agent_cost"]["collectors"]["power"]["nvml_calls"] == calls


def test_inspect_without_a_running_agent_shows_no_cost(tmp_path, invoke):
    config = tmp_path / "gpuagent.toml"
    config.write_text(f'[agent]\nstate_dir = "{tmp_path}"\n')
    doc = json.loads(invoke("inspect", "--simulate", "h100-sxm:1", "--config", str(config), "--json").output)
    assert "agent_cost" not in doc
