"""Every built-in plugin folder is complete: README, sample config that checks, tests, packaged, loaded."""

import re
import runpy

import pytest

from conftest import REPO
from gpuagent.plugin_host import DEFAULT_PLUGINS

FOLDERS = sorted(p.name for p in (REPO / "plugins").iterdir() if (p / "__init__.py").is_file())


def test_every_folder_is_a_default_plugin_and_packaged():
    # DEFAULT_PLUGINS says the load order; the folders are the plugins; setup.py packages the folders.
    assert sorted(m.rsplit(".", 1)[-1] for m in DEFAULT_PLUGINS) == FOLDERS
    packages = runpy.run_path(str(REPO / "setup.py"), run_name="setup_packages")["packages"]()
    assert [p for p in packages if p.startswith("gpuagent.plugins.")] == [f"gpuagent.plugins.{n}" for n in FOLDERS]
    for init in (REPO / "agent").rglob("__init__.py"):
        dotted = "gpuagent." + ".".join(init.parent.relative_to(REPO / "agent").parts)
        assert dotted.rstrip(".") in packages
    # The folders that hold only data are packages too (package_data), and no tests/ is one.
    assert {"gpuagent.schemas", "gpuagent.sim.profiles"} <= set(packages)
    assert not [p for p in packages if "tests" in p.split(".")]


@pytest.mark.parametrize("name", FOLDERS)
def test_folder_has_readme_sample_and_tests(name, invoke, tmp_path):
    folder = REPO / "plugins" / name
    readme = (folder / "README.md").read_text()
    # Every README documents its fields or options in a table with types.
    assert re.search(r"^\|.*\|.*\|", readme, re.M), f"{name}/README.md has no table"
    assert list((folder / "tests").glob("test_*.py")), f"{name} has no tests"
    sample = folder / "sample.toml"
    text = sample.read_text()
    assert f"[collectors.{name}]" in text or f"[sinks.{name}]" in text
    # The sample, uncommented as shipped, is a valid config on its own.
    path = tmp_path / "gpuagent.toml"
    path.write_text('[agent]\ninterval = "10s"\n' + text)
    result = invoke("config", "check", str(path))
    assert result.exit_code == 0, result.output
