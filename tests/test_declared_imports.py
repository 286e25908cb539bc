"""Every third-party module the project imports is declared in setup.cfg, and every install
requirement is imported by the product.

Read from the source (ast), not from what happens to be installed here: a module imported
only on some path (a GPU backend, the kubelet's gRPC) counts as much as one imported at load.
An import that is missing from setup.cfg works on a developer's machine and fails on a fresh
install; a requirement nothing imports is a download every install pays for.
"""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# What is read: the product, its plugins (their tests too), the benchmarks and scripts. The
# example plugin under examples/ is a project of its own, with its own setup.
ROOTS = ("agent", "plugins", "bench", "scripts")
PRODUCT = ("agent", "plugins")
# Modules of the repository that tests and scripts import by path (conftest.py names the first).
LOCAL = {"gpuagent", "gpuagent_test_servers"}
# Modules that need not be installed here (a GPU backend of the probe), by distribution.
NOT_INSTALLED = {"cupy": "cupy-cuda12x", "torch": "torch"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _local(top: str) -> bool:
    if top in LOCAL:
        return True
    return any((REPO / d / f"{top}.py").exists() or (REPO / d / top).is_dir() for d in ("", "tests", "bench"))


def _imports(roots, skip_tests: bool = False) -> dict[str, set[str]]:
    """Top-level third-party module -> the files that import it."""
    found: dict[str, set[str]] = {}
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            rel = path.relative_to(REPO)
            if skip_tests and "tests" in rel.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(rel))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top == "__future__" or _local(top):
                        continue
                    found.setdefault(top, set()).add(str(rel))
    return found


def _distribution(module: str) -> str:
    dists = importlib.metadata.packages_distributions().get(module)
    if dists:
        return _norm(dists[0])
    assert module in NOT_INSTALLED, f"{module}: not installed here, and no distribution is known for it"
    return _norm(NOT_INSTALLED[module])


def _requirements() -> tuple[set[str], set[str]]:
    """(install_requires, every extra together), as normalised distribution names."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")

    def names(text: str) -> set[str]:
        lines = (line.split("#")[0].strip() for line in text.splitlines())
        return {_norm(re.split(r"[\s<>=!~;\[]", line)[0]) for line in lines if line}

    install = names(cfg["options"]["install_requires"])
    extras = set().union(*(names(v) for v in cfg["options.extras_require"].values()))
    return install, extras


@pytest.mark.slow
def test_every_imported_third_party_module_is_declared():
    install, extras = _requirements()
    undeclared = {
        module: sorted(files)[:3]
        for module, files in _imports(ROOTS).items()
        if _distribution(module) not in install | extras
    }
    assert not undeclared, f"imported but not in setup.cfg (install_requires or an extra): {undeclared}"


@pytest.mark.slow
def test_every_install_requirement_is_imported_by_the_product():
    install, _ = _requirements()
    used = {_distribution(module) for module in _imports(PRODUCT, skip_tests=True)}
    assert install <= used, f"in install_requires, imported by no module of agent/ or plugins/: {install - used}"


def test_the_reading_sees_an_undeclared_import(tmp_path, monkeypatch):
    # The check itself: a module that imports a package setup.cfg does not name is found.
    root = tmp_path / "agent"
    root.mkdir()
    (root / "x.py").write_text("import jsonschema\nfrom urllib import parse\nfrom . import y\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert _imports(["agent"]) == {"jsonschema": {"agent/x.py"}}
