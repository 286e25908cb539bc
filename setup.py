"""The packages of the wheel, found from the folders; everything else is in setup.cfg.

setup.cfg's package_dir installs agent/ as gpuagent and plugins/ as gpuagent.plugins. The packages
are the folders themselves, so a plugin (plugins/NAME/__init__.py) or a layer of agent/ is packaged
by being there: no list to keep beside gpuagent.plugin_host.DEFAULT_PLUGINS (which a test keeps
equal to the plugin folders). A plugin's tests/ has no __init__.py and stays out of the wheel.
"""

from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).resolve().parent


def packages() -> list[str]:
    """gpuagent and every folder of agent/ (the data-only ones, schemas and sim/profiles, too);
    gpuagent.plugins and every folder of plugins/ with an __init__.py."""
    found = []
    for folder in sorted(p for p in (ROOT / "agent").rglob("*") if p.is_dir() and p.name != "__pycache__"):
        found.append(".".join(("gpuagent", *folder.relative_to(ROOT / "agent").parts)))
    for init in sorted((ROOT / "plugins").rglob("__init__.py")):
        found.append(".".join(("gpuagent.plugins", *init.parent.relative_to(ROOT / "plugins").parts)))
    return ["gpuagent", *found]


if __name__ == "__main__":
    setup(packages=packages())
