"""`gpuagent config check` validates a third-party plugin's table with its own model,
with the same one-line errors as the built-ins'."""

from __future__ import annotations

import pytest

CASES = [
    ('colour = "red"', "collectors.hello_tp.colour: unknown key"),
    ('limit = "ten"', 'collectors.hello_tp.limit: expected an integer, got "ten"'),
    ("greeting = 3", "collectors.hello_tp.greeting: expected a string, got 3"),
    ('period = "fast"', 'collectors.hello_tp.period: expected a duration, got "fast"'),
    ('interval = "5"', 'collectors.hello_tp.interval: expected a duration with a unit such as "5s", got "5"'),
    ('enabled = "yes"', 'collectors.hello_tp.enabled: expected true or false, got "yes"'),
]


@pytest.mark.parametrize(("table", "error"), CASES, ids=[c[0].split(" ")[0] for c in CASES])
def test_third_party_table_errors_are_one_line(
    table, error, plugin_file, plugins_dir, write_config, good_plugin, invoke
):
    plugin_file("hello_plugin", good_plugin)
    cfg = write_config(f"[collectors.hello_tp]\n{table}\n", gpus_off=False)
    result = invoke("config", "check", str(cfg), "--plugins-dir", str(plugins_dir))
    assert result.exit_code == 1
    assert result.stderr == f"gpuagent: error: {cfg}: {error}\n"


def test_builtin_table_error_has_the_same_shape(write_config, invoke):
    cfg = write_config('[collectors.host]\nper_cpu = "often"\n', gpus_off=False)
    result = invoke("config", "check", str(cfg))
    assert result.stderr == f'gpuagent: error: {cfg}: collectors.host.per_cpu: expected true or false, got "often"\n'


def test_valid_third_party_table_passes(plugin_file, plugins_dir, write_config, good_plugin, invoke):
    plugin_file("hello_plugin", good_plugin)
    cfg = write_config('[collectors.hello_tp]\ngreeting = "moin"\nperiod = "250ms"\n', gpus_off=False)
    result = invoke("config", "check", str(cfg), "--plugins-dir", str(plugins_dir))
    assert result.exit_code == 0, result.stderr
    assert "ok; collectors:" in result.stdout and "hello_tp" in result.stdout
    shown = invoke("config", "show", str(cfg), "--plugins-dir", str(plugins_dir))
    assert "[collectors.hello_tp]" in shown.stdout and 'greeting = "moin"' in shown.stdout
    assert "period = 0.25" in shown.stdout


@pytest.mark.slow
def test_entry_point_plugin_table_checked_from_the_command_line(site, cli, write_config, good_plugin):
    site.add_dist("tp-hello", "1.0", {"tp_hello.py": good_plugin}, {"hello": "tp_hello"})
    cfg = write_config("[collectors.hello_tp]\nlimit = 1.5\n", gpus_off=False)
    out = cli("config", "check", str(cfg), site=site)
    assert out.returncode == 1
    assert out.stderr == f"gpuagent: error: {cfg}: collectors.hello_tp.limit: expected an integer, got 1.5\n"
    # Without the plugin installed the table is unknown: the same check says so, naming what is known.
    out = cli("config", "check", str(cfg))
    assert out.returncode == 1
    assert out.stderr.startswith(f"gpuagent: error: {cfg}: collectors.hello_tp: unknown collector (known: ")
