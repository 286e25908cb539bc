"""Fixtures for the plugin-host tests: throwaway distributions, one-off plugin files, the CLI.

A "distribution" here is what pip leaves in site-packages: a module and a
``NAME-VERSION.dist-info`` folder with METADATA and entry_points.txt. Put on
sys.path (in-process) or PYTHONPATH (a subprocess), importlib.metadata finds
its ``gpuagent`` entry points exactly as it finds a pip-installed package's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuagent.plugin_host import PluginHost

# A well-behaved third-party plugin: the other plugins of a test must keep running beside a broken one.
GOOD_PLUGIN = """
import gpuagent

class Hello(gpuagent.Collector):
    name = "hello_tp"

    class Config(gpuagent.CollectorConfig):
        greeting: str = "hi"
        limit: int = 10
        period: gpuagent.Duration = 1.0

    def collect(self, acc):
        acc.add_fields("hello_tp", {"greeting": self.config.greeting, "limit": self.config.limit})

@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(Hello)
"""


class Site:
    """A folder laid out like site-packages, to hold throwaway distributions."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def add_dist(self, dist: str, version: str, files: dict[str, str], entry_points: dict[str, str]) -> Site:
        for rel, source in files.items():
            target = self.path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(textwrap.dedent(source))
        info = self.path / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        eps = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
        (info / "entry_points.txt").write_text(f"[gpuagent]\n{eps}")
        (info / "RECORD").write_text("")
        return self


@pytest.fixture
def site(tmp_path, monkeypatch) -> Site:
    """A site dir on sys.path for this test (and on PYTHONPATH for `cli`)."""
    s = Site(tmp_path / "site")
    monkeypatch.syspath_prepend(str(s.path))
    return s


@pytest.fixture
def plugins_dir(tmp_path) -> Path:
    d = tmp_path / "plugins.d"
    d.mkdir()
    return d


@pytest.fixture
def plugin_file(plugins_dir):
    """plugin_file(name, source) -> plugins_dir/name.py, a one-off plugin for --plugins-dir."""

    def write(name: str, source: str) -> Path:
        path = plugins_dir / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        return path

    return write


@pytest.fixture(autouse=True)
def forget_plugin_modules(monkeypatch):
    """Plugin modules imported by a test leave sys.modules with it: the next test's are fresh."""
    before = set(sys.modules)
    monkeypatch.delenv("GPUAGENT_DISABLE_PLUGINS", raising=False)
    monkeypatch.delenv("GPUAGENT_CONFIG", raising=False)
    yield
    for name in set(sys.modules) - before:
        if name.startswith(("tp_", "gpuagent_local_plugin_")):
            del sys.modules[name]


def gpu_collectors_off() -> str:
    """Config tables that switch off the collectors that need NVML (these tests run without GPUs)."""
    host = PluginHost(load_entry_points=False).load()
    return "".join(
        f"\n[collectors.{n}]\nenabled = false\n" for n, c in sorted(host.collectors.items()) if c.requires_gpus
    )


@pytest.fixture
def write_config(tmp_path):
    """write_config(text) -> a gpuagent.toml with `text` plus the GPU collectors switched off."""

    def write(text: str = "", gpus_off: bool = True) -> Path:
        path = tmp_path / "gpuagent.toml"
        body = '[agent]\nhostname = "node1"\n' + textwrap.dedent(text)
        path.write_text(body + (gpu_collectors_off() if gpus_off else ""))
        return path

    return write


@pytest.fixture
def cli(tmp_path):
    """cli(*args, site=None, env=None): `gpuagent ARGS` in a subprocess, as an operator runs it."""

    def run(*args: str, site: Site | None = None, env: dict | None = None, timeout: float = 60):
        full = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), **(env or {})}
        full.pop("GPUAGENT_CONFIG", None)
        if "GPUAGENT_DISABLE_PLUGINS" not in (env or {}):
            full.pop("GPUAGENT_DISABLE_PLUGINS", None)
        if site is not None:
            full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site.path), full.get("PYTHONPATH")]))
        return subprocess.run(
            [sys.executable, "-m", "gpuagent", *args],
            capture_output=True,
            text=True,
            env=full,
            timeout=timeout,
        )

    return run


@pytest.fixture
def good_plugin() -> str:
    return GOOD_PLUGIN
