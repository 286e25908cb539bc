"""A plugin in `[plugins] disabled` (or $GPUAGENT_DISABLE_PLUGINS) is never imported."""

import os
import subprocess
import sys

import pytest

# -X importtime does not see importlib.import_module (how plugins are loaded), so the child
# process writes the names in sys.modules at exit instead.
CHILD = """
import atexit, sys
atexit.register(lambda: open(sys.argv[1], "w").write("\\n".join(sys.modules)))
from gpuagent.cli import main
main(sys.argv[2:])
"""


def imported_modules(args, env_extra=None, cwd=None, tmp=None):
    env = {**os.environ, **(env_extra or {})}
    env.pop("GPUAGENT_CONFIG", None)
    out = os.path.join(tmp or cwd, "modules.txt")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, out, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out) as fh:
        return proc, set(fh.read().split())


@pytest.mark.slow
def test_disabled_in_the_config_are_not_imported(tmp_path):
    cfg = tmp_path / "gpuagent.toml"
    cfg.write_text('[plugins]\ndisabled = ["nvlink", "vgpu"]\n')
    proc, mods = imported_modules(
        ["run", "--once", "--test", "--config", str(cfg), "--simulate", "h100-sxm:1"], tmp=str(tmp_path)
    )
    assert "gpuagent.plugins.nvlink" not in mods and "gpuagent.plugins.vgpu" not in mods
    assert "gpuagent.plugins.power" in mods  # the check can see a plugin module being imported
    assert "gpu_power," in proc.stdout and "gpu_nvlink," not in proc.stdout


@pytest.mark.slow
def test_disabled_by_environment_are_not_imported(tmp_path):
    proc, mods = imported_modules(
        ["run", "--once", "--test", "--simulate", "l40s:1"], {"GPUAGENT_DISABLE_PLUGINS": "p2p,vgpu"}, cwd=tmp_path
    )
    assert "gpuagent.plugins.p2p" not in mods and "gpuagent.plugins.vgpu" not in mods
    assert "gpuagent.plugins.clocks" in mods


def test_plugins_lists_the_commands_each_plugin_registered(tmp_path):
    cfg = tmp_path / "gpuagent.toml"
    cfg.write_text("[agent]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gpuagent", "plugins", "--json", "--config", str(cfg)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    import json

    plugins = {p["name"]: p for p in json.loads(proc.stdout)["plugins"]}
    assert plugins["infiniband"]["commands"] == ["infiniband"] or plugins["infiniband"]["commands"] == []
    assert plugins["health"]["commands"] == ["health"]  # `gpuagent health` is the health plugin's
    assert all(p["commands"] == [] for n, p in plugins.items() if n not in ("infiniband", "health"))


@pytest.mark.slow
def test_inspect_neither_imports_nor_shows_a_plugin_disabled_in_the_config(tmp_path):
    """`gpuagent plugins` says power: disabled, and inspect agrees (it once loaded power and showed gpu_power)."""
    import json

    import jsonschema

    from gpuagent.commands.facts import schema

    cfg = tmp_path / "gpuagent.toml"
    cfg.write_text('[plugins]\ndisabled = ["power", "p2p", "mig"]\n')
    args = ["inspect", "--simulate", "h100-sxm:2", "--config", str(cfg)]
    proc, mods = imported_modules([*args, "--json"], tmp=str(tmp_path))
    # Not through another plugin either (health read power's margin, work read mig's shared name).
    assert not {"gpuagent.plugins.power", "gpuagent.plugins.p2p", "gpuagent.plugins.mig"} & mods
    assert "gpuagent.plugins.clocks" in mods  # the check can see a plugin module being imported
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, schema())
    # The schema's keys stay (null: not loaded, no reading of the plugin); the other plugins read.
    assert all(gpu["gpu_power"] is None and gpu["gpu_clocks"]["max_sm_clock_mhz"] for gpu in doc["gpus"])
    assert doc["p2p"] == []
    status = {p["name"]: p["status"] for p in doc["plugins"]}
    assert status["power"] == status["p2p"] == "disabled" and status["clocks"] == "loaded"
    proc, _ = imported_modules(args, tmp=str(tmp_path))
    assert "SM clock" in proc.stdout and "Power " not in proc.stdout and "Temperature" not in proc.stdout
    assert "P2P matrix" not in proc.stdout


THIRD_PARTY_FACTS = """
import gpuagent

class Fabric(gpuagent.Collector):
    name = "tp_fabric"
    requires_gpus = True

    def collect_gpu(self, acc, gpu):
        acc.add_fields("tp_fabric", self.read_gpu(gpu)["tp_fabric"], tags=gpu.tags)

    def read_gpu(self, gpu):
        return {"tp_fabric": {"rail": gpu.index % 2, "switch": f"leaf-{gpu.index}"}}

@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(Fabric)
"""


@pytest.mark.slow
def test_inspect_shows_a_third_party_collectors_facts_from_the_configs_plugin_dir(tmp_path):
    import json

    import jsonschema

    from gpuagent.commands.facts import schema

    folder = tmp_path / "plugins.d"
    folder.mkdir()
    (folder / "fabric.py").write_text(THIRD_PARTY_FACTS)
    cfg = tmp_path / "gpuagent.toml"
    cfg.write_text(f'[plugins]\ndir = "{folder}"\n')  # inspect honours [plugins] dir, not only --plugins-dir
    args = ["inspect", "--simulate", "l40s:2", "--config", str(cfg)]
    proc, _ = imported_modules([*args, "--json"], tmp=str(tmp_path))
    doc = json.loads(proc.stdout)
    jsonschema.validate(doc, schema())
    assert [g["more"] for g in doc["gpus"]] == [
        {"tp_fabric": {"rail": 0, "switch": "leaf-0"}},
        {"tp_fabric": {"rail": 1, "switch": "leaf-1"}},
    ]
    assert doc["gpus"][0]["gpu_power"]["power_limit_w"] == 350.0  # the built-ins still read
    proc, _ = imported_modules(args, tmp=str(tmp_path))
    assert "  tp_fabric: rail=1, switch=leaf-1" in proc.stdout
