"""Loading third-party plugins: each entry point in its own guard, and the loading controls.

A broken package is listed as failed with its error and everything else
loads and runs; `[plugins] disabled`, $GPUAGENT_DISABLE_PLUGINS and
--plugins-dir decide what is loaded.
"""

from __future__ import annotations

import json
import logging
import os

import pytest

from gpuagent.plugin_host import PluginHost
from gpuagent.service.runtime import Options, load

RAISES_ON_IMPORT = """
raise RuntimeError("tp_broken needs libfoo.so.3")
"""


def lines_of(stdout: str, measurement: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.split(" ", 1)[0].split(",", 1)[0] == measurement]


@pytest.mark.slow
def test_package_whose_import_raises_is_failed_and_the_others_run(site, cli, write_config, good_plugin):
    site.add_dist("tp-broken", "2.3.4", {"tp_broken.py": RAISES_ON_IMPORT}, {"broken": "tp_broken"})
    site.add_dist("tp-hello", "1.0.0", {"tp_hello.py": good_plugin}, {"hello": "tp_hello"})

    listed = cli("plugins", "--json", site=site)
    assert listed.returncode == 0, listed.stderr
    plugins = {p["name"]: p for p in json.loads(listed.stdout)["plugins"]}
    broken = plugins["broken"]
    assert broken["status"] == "failed"
    assert broken["error"] == "RuntimeError: tp_broken needs libfoo.so.3"
    assert (broken["version"], broken["distribution"], broken["module"]) == ("2.3.4", "tp-broken", "tp_broken")
    assert broken["collectors"] == [] and broken["hooks"] == []
    hello = plugins["hello"]
    assert hello["status"] == "loaded" and hello["error"] is None
    assert (hello["version"], hello["distribution"], hello["source"]) == ("1.0.0", "tp-hello", "entry_point")
    assert hello["hooks"] == ["gpuagent_register_collectors"]
    assert (hello["collectors"], hello["sinks"]) == (["hello_tp"], [])
    assert plugins["host"]["status"] == "loaded"  # the built-ins load beside it
    for p in plugins.values():
        assert {"name", "version", "distribution", "hooks", "collectors", "sinks", "status", "error"} <= set(p)

    text = cli("plugins", site=site)  # the table names the failure too (folded to fit its column)
    assert text.returncode == 0
    assert "failed" in text.stdout and "RuntimeError" in text.stdout and "tp-hello" in text.stdout

    ran = cli("run", "--once", "--test", "--config", str(write_config()), site=site)
    assert ran.returncode == 0, ran.stderr
    assert len(lines_of(ran.stdout, "hello_tp")) == 1
    assert len(lines_of(ran.stdout, "host")) == 1
    assert "tp_broken needs libfoo.so.3" in ran.stderr  # logged, with the plugin's name
    assert "broken" in ran.stderr


def load_host(**kw) -> PluginHost:
    return PluginHost(**kw).load()


def test_each_kind_of_import_failure_is_contained(site, good_plugin):
    site.add_dist(
        "tp-missing-dep", "0.1", {"tp_missing_dep.py": "import tp_not_installed\n"}, {"missing_dep": "tp_missing_dep"}
    )
    site.add_dist(
        "tp-exits",
        "0.1",
        {"tp_exits.py": "import sys\nsys.exit('tp_exits: unsupported platform')\n"},
        {"exits": "tp_exits"},
    )
    site.add_dist("tp-no-attr", "0.1", {"tp_no_attr.py": "X = 1\n"}, {"no_attr": "tp_no_attr:plugin"})
    site.add_dist("tp-syntax", "0.1", {"tp_syntax.py": "def broken(:\n"}, {"syntax": "tp_syntax"})
    site.add_dist("tp-hello", "1.0", {"tp_hello.py": good_plugin}, {"hello": "tp_hello"})
    host = load_host()
    errors = {n: host.plugins[n].error for n in ("missing_dep", "exits", "no_attr", "syntax")}
    assert errors["missing_dep"] == "ModuleNotFoundError: No module named 'tp_not_installed'"
    assert errors["exits"] == "SystemExit: tp_exits: unsupported platform"
    assert errors["no_attr"].startswith("AttributeError:") and "plugin" in errors["no_attr"]
    assert errors["syntax"].startswith("SyntaxError:")
    assert all(host.plugins[n].status == "failed" for n in errors)
    assert host.plugins["hello"].status == "loaded"
    assert {"host", "hello_tp"} <= set(host.collectors)


def test_misspelt_hook_fails_its_plugin_not_the_host(site, good_plugin):
    typo = """
    import gpuagent

    @gpuagent.hookimpl
    def gpuagent_register_colectors(register):
        pass
    """
    site.add_dist("tp-typo", "0.1", {"tp_typo.py": typo}, {"typo": "tp_typo"})
    site.add_dist("tp-hello", "1.0", {"tp_hello.py": good_plugin}, {"hello": "tp_hello"})
    host = load_host()
    assert host.plugins["typo"].status == "failed"
    assert "unknown hook 'gpuagent_register_colectors'" in host.plugins["typo"].error
    assert host.plugins["hello"].status == "loaded" and "hello_tp" in host.collectors


def test_hook_with_wrong_arguments_fails_its_plugin(site):
    wrong = """
    import gpuagent

    @gpuagent.hookimpl
    def gpuagent_register_collectors(registry):
        pass
    """
    site.add_dist("tp-wrong", "0.1", {"tp_wrong.py": wrong}, {"wrong": "tp_wrong"})
    info = load_host().plugins["wrong"]
    assert info.status == "failed"
    assert "{'registry'} are declared in the hookimpl but can not be found in the hookspec" in info.error
    assert "\n" not in info.error


def test_hook_that_raises_fails_its_plugin_alone(site, good_plugin, caplog):
    raising = """
    import gpuagent

    class Half(gpuagent.Collector):
        name = "half_tp"

    @gpuagent.hookimpl
    def gpuagent_register_collectors(register):
        register(Half)

    @gpuagent.hookimpl
    def gpuagent_register_sinks(register):
        raise KeyError("tp_raising: no sink today")
    """
    site.add_dist("tp-raising", "0.1", {"tp_raising.py": raising}, {"raising": "tp_raising"})
    site.add_dist("tp-hello", "1.0", {"tp_hello.py": good_plugin}, {"hello": "tp_hello"})
    with caplog.at_level(logging.ERROR, logger="gpuagent.plugins"):
        host = load_host()
    info = host.plugins["raising"]
    assert info.status == "failed"
    assert info.error == "KeyError: 'tp_raising: no sink today'"
    # It registered a collector before its other hook raised: a failed plugin registers nothing.
    assert "half_tp" not in host.collectors
    assert "hello_tp" in host.collectors and "host" in host.collectors
    assert "raising failed in gpuagent_register_sinks" in caplog.text


def test_register_refuses_a_taken_name_and_a_non_collector(site):
    steals = """
    import gpuagent

    class Host(gpuagent.Collector):
        name = "host"

    @gpuagent.hookimpl
    def gpuagent_register_collectors(register):
        register(Host)
    """
    not_a_class = """
    import gpuagent

    @gpuagent.hookimpl
    def gpuagent_register_collectors(register):
        register("host")
    """
    bad_config = """
    import gpuagent

    class Loose(gpuagent.Collector):
        name = "loose_tp"
        Config = dict

    @gpuagent.hookimpl
    def gpuagent_register_collectors(register):
        register(Loose)
    """
    site.add_dist("tp-steals", "0.1", {"tp_steals.py": steals}, {"steals": "tp_steals"})
    site.add_dist("tp-notclass", "0.1", {"tp_notclass.py": not_a_class}, {"notclass": "tp_notclass"})
    site.add_dist("tp-badconfig", "0.1", {"tp_badconfig.py": bad_config}, {"badconfig": "tp_badconfig"})
    host = load_host()
    assert host.plugins["steals"].error == "ValueError: collector 'host' is already registered by plugin host"
    assert host.plugins["notclass"].error.startswith("TypeError: register() takes a Collector subclass")
    assert host.plugins["badconfig"].error == "TypeError: Loose.Config must subclass gpuagent.CollectorConfig"
    assert "loose_tp" not in host.collectors
    assert host.collectors["host"].__module__ == "gpuagent.plugins.host"


# -- loading controls ---------------------------------------------------------


def test_disabled_in_config_is_not_imported_and_its_table_is_not_an_error(site, write_config, good_plugin, caplog):
    site.add_dist("tp-hello", "1.0", {"tp_hello.py": good_plugin}, {"hello": "tp_hello"})
    # The module raises if imported: disabled means not even imported.
    site.add_dist("tp-broken", "1.0", {"tp_broken.py": RAISES_ON_IMPORT}, {"broken": "tp_broken"})
    cfg = write_config("""
    [plugins]
    disabled = ["hello", "broken"]

    [collectors.hello_tp]
    greeting = "still configured"
    """)
    with caplog.at_level(logging.WARNING):
        config, host = load(Options(config_path=cfg))
    assert host.plugins["hello"].status == "disabled" and host.plugins["broken"].status == "disabled"
    assert host.plugins["broken"].error is None
    assert "hello_tp" not in host.collectors and "hello_tp" not in config.collectors
    assert "collectors.hello_tp: unknown collector" in caplog.text  # a warning, not a refusal


def test_disabled_by_environment(site, good_plugin, monkeypatch):
    site.add_dist("tp-hello", "1.0", {"tp_hello.py": good_plugin}, {"hello": "tp_hello"})
    monkeypatch.setenv("GPUAGENT_DISABLE_PLUGINS", " hello , host")
    host = load_host()
    assert host.plugins["hello"].status == "disabled"
    assert host.plugins["host"].status == "disabled"  # built-ins can be switched off the same way
    assert not {"hello_tp", "host"} & set(host.collectors)
    assert host.plugins["file"].status == "loaded"


def test_disabled_by_environment_from_the_command_line(site, cli, good_plugin):
    site.add_dist("tp-hello", "1.0", {"tp_hello.py": good_plugin}, {"hello": "tp_hello"})
    out = cli("plugins", "--json", site=site, env={"GPUAGENT_DISABLE_PLUGINS": "hello"})
    assert out.returncode == 0, out.stderr
    hello = next(p for p in json.loads(out.stdout)["plugins"] if p["name"] == "hello")
    assert (hello["status"], hello["collectors"], hello["error"]) == ("disabled", [], None)


def test_plugins_dir_loads_one_off_files(plugin_file, plugins_dir, good_plugin, invoke):
    plugin_file("site_extras", good_plugin)
    plugin_file("broken_extra", "raise ImportError('broken_extra: half-written')\n")
    (plugins_dir / "notes.txt").write_text("not a plugin")
    host = load_host(plugins_dir=plugins_dir)
    extras = host.plugins["site_extras"]
    assert (extras.status, extras.source, extras.collectors) == ("loaded", "plugins_dir", ["hello_tp"])
    assert extras.module == str(plugins_dir / "site_extras.py")
    assert host.plugins["broken_extra"].error == "ImportError: broken_extra: half-written"
    assert "notes" not in host.plugins

    result = invoke("plugins", "--json", "--plugins-dir", str(plugins_dir))
    assert result.exit_code == 0, result.output
    listed = {p["name"]: p for p in json.loads(result.stdout)["plugins"]}
    assert listed["site_extras"]["collectors"] == ["hello_tp"]
    assert listed["broken_extra"]["status"] == "failed"


def test_plugins_dir_from_the_command_line_runs_its_collector(plugin_file, plugins_dir, cli, write_config, good_plugin):
    plugin_file("site_extras", good_plugin)
    out = cli("run", "--once", "--test", "--plugins-dir", str(plugins_dir), "--config", str(write_config()))
    assert out.returncode == 0, out.stderr
    [line] = lines_of(out.stdout, "hello_tp")
    assert 'greeting="hi"' in line and "host=node1" in line


def test_plugins_dir_from_config(plugin_file, plugins_dir, write_config, good_plugin):
    plugin_file("site_extras", good_plugin)
    cfg = write_config(f"""
    [plugins]
    dir = "{plugins_dir}"

    [collectors.hello_tp]
    greeting = "from config"
    """)
    config, host = load(Options(config_path=cfg))
    assert config.collectors["hello_tp"].greeting == "from config"


# -- --sample-config ------------------------------------------------------------


def test_sample_config_of_a_third_party_plugin(site, invoke, good_plugin):
    sample = '# hello: says hi\n[collectors.hello_tp]\n# greeting = "hi"\n'
    site.add_dist(
        "tp-hello",
        "1.0",
        {"tp_hellopkg/__init__.py": good_plugin, "tp_hellopkg/sample.toml": sample},
        {"hello": "tp_hellopkg"},
    )
    site.add_dist("tp-bare", "1.0", {"tp_bare.py": good_plugin.replace("hello_tp", "bare_tp")}, {"bare": "tp_bare"})
    by_plugin = invoke("plugins", "--sample-config", "hello")
    assert by_plugin.exit_code == 0 and by_plugin.stdout == sample
    by_collector = invoke("plugins", "--sample-config", "hello_tp")
    assert by_collector.stdout == sample
    builtin = invoke("plugins", "--sample-config", "host")
    assert "[collectors.host]" in builtin.stdout
    unknown = invoke("plugins", "--sample-config", "nosuch")
    assert unknown.exit_code == 1
    assert unknown.stderr.strip() == "gpuagent: error: no plugin named 'nosuch' (see `gpuagent plugins`)"
    none = invoke("plugins", "--sample-config", "bare")
    assert none.exit_code == 1 and "plugin bare ships no sample config" in none.stderr
    # A single-file module has no folder of its own: a sample.toml next to it is not its sample.
    (site.path / "sample.toml").write_text("[collectors.someone_else]\n")
    assert invoke("plugins", "--sample-config", "bare").exit_code == 1


# -- a plugins dir another user can write (issue 46) -----------------------------------------------


def test_the_plugins_dir_check_refuses_other_owners_and_writers_before_any_import(plugin_file, plugins_dir, caplog):
    import pwd

    if os.geteuid() != 0:
        pytest.skip("needs root to make files of another user (os.chown)")
    plugin_file("planted", "raise SystemExit('imported')\n")
    plugins_dir.chmod(0o775)  # group-writable: a group's member could add a plugin
    with caplog.at_level(logging.ERROR, logger="gpuagent.plugins"):
        host = load_host(plugins_dir=plugins_dir)
    assert "planted" not in host.plugins and host.plugins_dir_refused.endswith("is writable by other users")
    assert [r.getMessage() for r in caplog.records] == [f"plugins dir not loaded: {host.plugins_dir_refused}"]
    plugins_dir.chmod(0o755)
    nobody = pwd.getpwnam("nobody").pw_uid
    os.chown(plugins_dir / "planted.py", nobody, nobody)
    assert "planted.py (owner nobody" in PluginHost(plugins_dir=plugins_dir).load().plugins_dir_refused
    assert PluginHost(plugins_dir=plugins_dir / "absent").load().plugins_dir_refused is None  # nothing to import


@pytest.mark.slow
def test_a_plugins_dir_another_user_owns_or_may_write_is_not_imported(
    plugin_file, plugins_dir, cli, write_config, tmp_path
):
    """Root imported plugins from a world-writable dir of another user's, even for `gpuagent plugins`
    and `health`, with no warning: now `run`, `plugins` and `health` refuse it alike, in one line."""
    import pwd

    if os.geteuid() != 0:
        pytest.skip("needs root to make files of another user (os.chown)")
    nobody = pwd.getpwnam("nobody").pw_uid
    marker = tmp_path / "imported"
    plugin_file("planted", f"open({str(marker)!r}, 'a').write('imported\\n')\n")
    cfg = write_config(f'[plugins]\ndir = "{plugins_dir}"\n')
    cases = [
        (nobody, 0o777, plugins_dir, "is owned by another user than root or the agent's"),
        (0, 0o1777, plugins_dir, "is writable by other users"),  # sticky: others may still add a plugin
        (0, 0o755, plugins_dir / "planted.py", "is owned by another user than root or the agent's"),
    ]
    for uid, mode, refused, why in cases:
        os.chown(plugins_dir, uid, uid)
        plugins_dir.chmod(mode)
        os.chown(plugins_dir / "planted.py", nobody if refused.name == "planted.py" else 0, 0)
        for args in (
            ("plugins", "--config", str(cfg)),
            ("run", "--once", "--test", "--config", str(cfg)),
            ("health", "--config", str(cfg), "--simulate", "l40s:1", "--log-level", "warning"),
        ):
            done = cli(*args)
            said = [line for line in done.stderr.splitlines() if "plugins dir not loaded" in line]
            assert len(said) == 1 and str(refused) in said[0] and why in said[0], (args, done.stderr)
            assert not marker.exists(), args
    os.chown(plugins_dir / "planted.py", 0, 0)
    plugins_dir.chmod(0o755)
    assert cli("plugins", "--config", str(cfg)).returncode == 0 and marker.exists()  # its own dir: imported
