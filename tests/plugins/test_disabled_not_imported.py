"""A plugin in `[plugins] disabled` (or $GPUAGENT_DISABLE_PLUGINS) is never imported."""

import os
import subprocess
import sys

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
        capture_output=True, text=True, env=env, cwd=cwd, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(out) as fh:
        return proc, set(fh.read().split())


def test_disabled_in_the_config_are_not_imported(tmp_path):
    cfg = tmp_path / "gpuagent.toml"
    cfg.write_text('[plugins]\ndisabled = ["nvlink", "vgpu"]\n')
    proc, mods = imported_modules(
        ["run", "--once", "--test", "--config", str(cfg), "--simulate", "h100-sxm:1"], tmp=str(tmp_path)
    )
    assert "gpuagent.plugins.nvlink" not in mods and "gpuagent.plugins.vgpu" not in mods
    assert "gpuagent.plugins.power" in mods  # the check can see a plugin module being imported
    assert "gpu_power," in proc.stdout and "gpu_nvlink," not in proc.stdout


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
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    import json

    plugins = {p["name"]: p for p in json.loads(proc.stdout)["plugins"]}
    assert plugins["infiniband"]["commands"] == ["infiniband"] or plugins["infiniband"]["commands"] == []
    assert all(p["commands"] == [] for n, p in plugins.items() if n != "infiniband")
