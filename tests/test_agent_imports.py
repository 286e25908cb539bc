"""agent/ does not know plugins/: only the loader (agent/plugin_host.py) names gpuagent.plugins.*.

Everything else reaches a plugin through the host it loaded (a collector's read_gpu, a sink's
Config or metric_for), so a disabled plugin is never imported by the core behind the host's back.
"""

from __future__ import annotations

import ast
from pathlib import Path

AGENT = Path(__file__).resolve().parents[1] / "agent"
LOADER = "plugin_host.py"
PLUGINS = "gpuagent.plugins"


def names_plugins(name: str | None) -> bool:
    return bool(name) and (name == PLUGINS or name.startswith(PLUGINS + "."))


def plugin_imports(source: str) -> list[str]:
    """What a module's code imports from gpuagent.plugins: import statements (at any depth),
    ``from gpuagent import plugins``, and module names passed to importlib.import_module or
    __import__ (docstrings and messages do not count)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if names_plugins(a.name)]
        elif isinstance(node, ast.ImportFrom):
            if names_plugins(node.module):
                found.append(node.module)
            elif node.module == "gpuagent" and any(a.name == "plugins" for a in node.names):
                found.append(PLUGINS)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and names_plugins(str(node.args[0].value)):
                found.append(str(node.args[0].value))
    return found


def importers() -> dict[str, list[str]]:
    out = {}
    for path in sorted(AGENT.rglob("*.py")):
        found = plugin_imports(path.read_text())
        if found:
            out[str(path.relative_to(AGENT))] = found
    return out


def test_only_the_loader_imports_gpuagent_plugins():
    others = {module: found for module, found in importers().items() if module != LOADER}
    assert others == {}, f"agent/ modules besides {LOADER} import plugins: {others}"


def test_the_check_sees_every_form_of_import():
    source = (
        "import gpuagent.plugins.power\n"
        "from gpuagent.plugins.clocks import REASONS\n"
        "from gpuagent import plugins\n"
        "def f():\n"
        "    from gpuagent.plugins.health.check import evaluate\n"
        "    importlib.import_module('gpuagent.plugins.mig')\n"
        "'''gpuagent.plugins.vgpu in a docstring'''\n"
        "log = logging.getLogger('gpuagent.plugins')\n"
    )
    assert sorted(plugin_imports(source)) == sorted(
        [
            "gpuagent.plugins.power",
            "gpuagent.plugins.clocks",
            PLUGINS,
            "gpuagent.plugins.health.check",
            "gpuagent.plugins.mig",
        ]
    )


def test_one_plugin_host_constructor_outside_tests():
    """plugin_host.load_host builds every host (config's [plugins] applied): no command builds
    its own, so `gpuagent plugins` and `gpuagent inspect` cannot disagree on what is disabled."""
    root = AGENT.parent
    calls = []
    for folder in ("agent", "plugins", "bench", "examples"):
        for path in sorted((root / folder).rglob("*.py")):
            if "tests" in path.relative_to(root).parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "PluginHost":
                    calls.append(f"{path.relative_to(root)}:{node.lineno}")
    assert len(calls) == 1 and calls[0].startswith("agent/plugin_host.py:"), calls
