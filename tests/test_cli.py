"""The command line as a user meets it: run --once --test, plugins, version, no-driver errors."""

import json

import pytest
from lineprotocol_parser import parse

from conftest import run_cli
from gpuagent import __version__
from gpuagent.plugin_host import PluginHost


def host_only_config(tmp_path):
    """A config with every collector that needs a GPU switched off."""
    host = PluginHost(load_entry_points=False).load()
    lines = ['[agent]\ninterval = "1s"\n']
    for name, cls in sorted(host.collectors.items()):
        if cls.requires_gpus:
            lines.append(f"[collectors.{name}]\nenabled = false\n")
    path = tmp_path / "gpuagent.toml"
    path.write_text("\n".join(lines))
    return path


def test_version():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"gpuagent, version {__version__}"


def test_run_once_test_prints_valid_line_protocol(tmp_path):
    proc = run_cli("run", "--once", "--test", "--config", str(host_only_config(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    points = parse(proc.stdout)
    measurements = {m for m, *_ in points}
    assert "host" in measurements and "gpuagent" in measurements
    host = next(p for p in points if p[0] == "host")
    assert host[1]["host"]
    assert host[2]["mem_total_bytes"] > 0 and isinstance(host[2]["mem_total_bytes"], int)
    own = [p for p in points if p[0] == "gpuagent" and p[1].get("collector") == "host"]
    assert own and own[0][2]["runs_total"] == 1 and own[0][2]["errors_total"] == 0


def test_no_driver_gives_one_line_naming_simulate():
    proc = run_cli("run", "--once", "--test")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "no NVIDIA driver found" in lines[0] and "--simulate" in lines[0]
    assert proc.stdout == ""


def test_global_tags_and_hostname_from_config(tmp_path):
    path = host_only_config(tmp_path)
    path.write_text(path.read_text().replace("[agent]\n", '[agent]\nhostname = "node-a"\ntags = { dc = "ams 1" }\n', 1))
    proc = run_cli("run", "--once", "--test", "--config", str(path))
    assert proc.returncode == 0, proc.stderr
    for _m, tags, _f, _t in parse(proc.stdout):
        assert tags["host"] == "node-a" and tags["dc"] == "ams 1"


def test_plugins_json_lists_builtins_with_hooks():
    proc = run_cli("plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    by_name = {p["name"]: p for p in doc["plugins"]}
    assert by_name["host"]["status"] == "loaded"
    assert by_name["host"]["hooks"] == ["gpuagent_register_collectors"]
    assert by_name["host"]["collectors"] == ["host"]
    assert by_name["file"]["sinks"] == ["file"]
    for p in doc["plugins"]:
        assert set(p) >= {"name", "version", "distribution", "hooks", "collectors", "sinks", "status", "error"}


@pytest.mark.slow
def test_simulate_from_the_config_file(tmp_path):
    """[agent] simulate runs the fleet without --simulate; --simulate on the command line wins."""
    path = tmp_path / "gpuagent.toml"
    path.write_text('[agent]\nsimulate = "l40s:2"\nhostname = "n1"\n')
    proc = run_cli("run", "--once", "--test", "--config", str(path))
    assert proc.returncode == 0, proc.stderr
    models = {tags["model"] for m, tags, _f, _t in parse(proc.stdout) if m == "gpu_power"}
    gpus = {tags["gpu"] for m, tags, _f, _t in parse(proc.stdout) if m == "gpu_power"}
    assert models == {"NVIDIA L40S"} and gpus == {"0", "1"}
    proc = run_cli("run", "--once", "--test", "--config", str(path), "--simulate", "h100-sxm:1")
    assert proc.returncode == 0, proc.stderr
    models = {tags["model"] for m, tags, _f, _t in parse(proc.stdout) if m == "gpu_power"}
    assert models == {"NVIDIA H100 80GB HBM3"}


def test_bad_simulate_spec_is_one_line(tmp_path):
    proc = run_cli("run", "--once", "--test", "--simulate", "l40s:2,nosuchcard:1")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "nosuchcard" in lines[0] and "l40s" in lines[0], proc.stderr


def test_a_negative_count_says_count_must_be_positive():
    proc = run_cli("run", "--once", "--test", "--simulate", "l40s:-1")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert "COUNT '-1' must be a positive whole number (1..64)" in lines[0] and "not a number" not in lines[0]


@pytest.mark.parametrize("command", [["run", "--once", "--test"], ["inspect"], ["probe", "l2"]])
@pytest.mark.slow
def test_an_empty_simulate_says_the_spec_is_empty(command):
    """`--simulate "$UNSET"` once fell through to "no NVIDIA driver found"."""
    proc = run_cli(*command, "--simulate", "")
    assert proc.returncode == 1
    assert (
        proc.stderr == "gpuagent: error: --simulate: the SPEC is empty; give NAME[:COUNT],..., e.g. --simulate l40s:2\n"
    )


def test_unknown_name_in_gpuagent_disable_plugins_is_said(tmp_path):
    """A misspelt name would leave the plugin it meant running; the known ones still apply."""
    proc = run_cli(
        "run",
        "--once",
        "--test",
        "--config",
        str(host_only_config(tmp_path)),
        env={"GPUAGENT_DISABLE_PLUGINS": "hots, power"},
    )
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "GPUAGENT_DISABLE_PLUGINS" in line]
    assert len(warned) == 1 and "'hots'" in warned[0] and "host" in warned[0], proc.stderr
    assert "'power'" not in warned[0]


@pytest.mark.slow
def test_test_mode_without_the_file_plugin_says_so_in_one_line(tmp_path):
    """--test prints through the file sink the host loaded; a disabled file plugin is never imported."""
    proc = run_cli(
        "run", "--once", "--test", "--config", str(host_only_config(tmp_path)), env={"GPUAGENT_DISABLE_PLUGINS": "file"}
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == (
        "gpuagent: error: --test prints through the file sink, and the file plugin is not loaded"
    ), proc.stderr
    plugins = json.loads(run_cli("plugins", "--json", env={"GPUAGENT_DISABLE_PLUGINS": "file"}).stdout)
    assert {p["name"]: p["status"] for p in plugins["plugins"]}["file"] == "disabled"


def test_every_command_with_a_config_option_takes_dash_c_for_it():
    """`compare` once lacked the -c the other commands have."""
    import click

    from gpuagent.cli import build_cli

    def walk(group, ctx, path=()):
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            if isinstance(cmd, click.Group):
                yield from walk(cmd, click.Context(cmd, parent=ctx), (*path, name))
            else:
                yield (*path, name), cmd

    root = build_cli([])
    found = {}
    for path, cmd in walk(root, click.Context(root)):
        for param in cmd.params:
            if "--config" in getattr(param, "opts", []):
                found[" ".join(path)] = param.opts
    assert {"run", "compare", "sim fleet", "inspect", "probe l2"} <= set(found), found
    assert all("-c" in opts for opts in found.values()), found


@pytest.mark.slow
def test_once_test_prints_the_readings_before_the_agents_own_measurement():
    """A one-L40S `--once --test` is mostly the `gpuagent` self-measurement: the readings a
    user looks for come first, the agent's own points after them."""
    proc = run_cli("run", "--once", "--test", "--simulate", "l40s:1", "--log-level", "warning")
    assert proc.returncode == 0, proc.stderr
    names = [m for m, *_ in parse(proc.stdout)]
    first_own = names.index("gpuagent")
    assert {"gpu_power", "gpu_clocks", "gpu_memory", "host"} <= set(names[:first_own])
    assert set(names[first_own:]) == {"gpuagent"}


@pytest.mark.slow
def test_no_sink_configured_and_stdout_the_journal_is_warned(tmp_path):
    """A service whose config has no sink would pour line protocol into the journal."""
    import os
    import subprocess
    import sys

    config = host_only_config(tmp_path)
    out = tmp_path / "stdout"
    with open(out, "w") as fh:
        st = os.fstat(fh.fileno())
        env = {**os.environ, "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        env.pop("GPUAGENT_CONFIG", None)
        proc = subprocess.run(
            [sys.executable, "-m", "gpuagent", "run", "--once", "--config", str(config)],
            stdout=fh,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=60,
        )
    assert proc.returncode == 0, proc.stderr
    assert "line protocol goes to stdout, which is the journal" in proc.stderr
    assert parse(out.read_text())  # still written: a warning, not a refusal
    quiet = run_cli("run", "--once", "--config", str(config), env={"JOURNAL_STREAM": "1:2"})
    assert "journal" not in quiet.stderr
