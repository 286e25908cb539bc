"""The fast lane (`pytest -m "not slow"`, scripts/fast-lane.sh): which tests it leaves out, and
scripts/lane-coverage.py, which names the modules it runs no code of."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lane_coverage = _load(REPO / "scripts" / "lane-coverage.py", "lane_coverage")


def _root_conftest(config):
    root = REPO / "conftest.py"
    return next(p for p in config.pluginmanager.get_plugins() if Path(getattr(p, "__file__", "")) == root)


FIXTURE = re.compile(r"^\s*@pytest\.fixture\b.*\n(?:\s*@.*\n)*\s*(?:async\s+)?def\s+(\w+)", re.M)


def _fixtures_defined() -> set[str]:
    """Every function decorated with pytest.fixture in the repository's tests and conftests."""
    files = [REPO / "conftest.py"]
    for d in ("tests", "plugins", "examples"):
        files += [p for p in (REPO / d).rglob("*.py") if p.name == "conftest.py" or p.name.startswith("test_")]
    return {name for path in files for name in FIXTURE.findall(path.read_text(encoding="utf-8"))}


def test_every_slow_fixture_is_still_a_fixture(request):
    # A renamed fixture would silently bring its servers back into the fast lane.
    slow = _root_conftest(request.config).SLOW_FIXTURES
    assert slow and not slow - _fixtures_defined(), (
        f"SLOW_FIXTURES names no fixture: {sorted(slow - _fixtures_defined())}"
    )


def test_a_test_that_uses_a_slow_fixture_is_marked_slow(request, dripping_server):
    assert request.node.get_closest_marker("slow") is not None


def test_a_test_that_uses_none_is_not(request):
    assert request.node.get_closest_marker("slow") is None


# -- scripts/lane-coverage.py --------------------------------------------------------------

TREE = {
    "pkg/__init__.py": "",
    "pkg/called.py": "def f():\n    return 1\n",
    "pkg/consts.py": '"""Constants."""\nX = 1\n',
    "pkg/specs.py": 'def hook(x):\n    """A specification: nothing of it runs."""\n',
    "pkg/sub/__init__.py": '"""A docstring only."""\n',
    "pkg/sub/only_imported.py": "class C:\n    def g(self):\n        return 2\n",
    "pkg/sub/deeper/never.py": "def h():\n    return 3\n",
    "pkg/tests/test_skipped.py": "def test_x():\n    assert True\n",
    "pkg/conftest.py": "def helper():\n    return 4\n",
}


@pytest.fixture
def measured(tmp_path):
    """run(code) -> the coverage data file of `code` run over the tree above, and the tree's pkg/."""
    for rel, text in TREE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)

    def run(code: str) -> tuple[str, Path]:
        (tmp_path / "main.py").write_text(code)
        data = tmp_path / "cov"
        # Not measured by an outer coverage run (scripts/fast-lane.sh): this one is its own.
        env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
        subprocess.run([sys.executable, "-m", "coverage", "run", f"--data-file={data}", "--source=pkg", "main.py"],
                       cwd=tmp_path, env=env, check=True, capture_output=True)  # fmt: skip
        return str(data), tmp_path / "pkg"

    return run


def test_names_a_module_never_imported_and_one_whose_functions_never_ran(measured, capsys):
    data, pkg = measured("import pkg.called, pkg.consts, pkg.specs, pkg.sub.only_imported\npkg.called.f()\n")
    missing = {p.relative_to(pkg).as_posix(): why for p, why in lane_coverage.untouched(data, [pkg])}
    # Found at any depth; an import alone runs only `def` lines (a docstring-only function has none
    # to run); tests and empty modules are not product.
    assert missing == {
        "sub/deeper/never.py": "never imported",
        "sub/only_imported.py": "imported, but none of its functions ran",
    }
    assert lane_coverage.main([data, str(pkg)]) == 1
    out = capsys.readouterr()
    assert "sub/deeper/never.py (never imported)" in out.out and "only_imported.py" in out.out
    assert "2 of 7 modules untouched" in out.err


def test_passes_when_every_module_ran_code(measured, capsys):
    data, pkg = measured(
        "import pkg.called, pkg.consts, pkg.specs, pkg.sub.only_imported, pkg.sub.deeper.never\n"
        "pkg.called.f(); pkg.sub.only_imported.C().g(); pkg.sub.deeper.never.h()\n"
    )
    assert lane_coverage.untouched(data, [pkg]) == []
    assert lane_coverage.main([data, str(pkg)]) == 0
    assert "every one of 7 modules" in capsys.readouterr().out


def test_a_missing_data_file_or_none_named_is_one_line(tmp_path, capsys):
    assert lane_coverage.main([str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no coverage data at" in err
    assert lane_coverage.main([]) == 2
    assert capsys.readouterr().err == "usage: lane-coverage.py DATA_FILE [ROOT ...]\n"


def test_walks_the_product_folders_recursively():
    found = {p.relative_to(REPO).as_posix() for p in lane_coverage.modules([REPO / r for r in lane_coverage.ROOTS])}
    # Modules of subpackages (agent/compare/, plugins/influxdb/) are found; tests never are.
    assert "agent/__init__.py" in found and "plugins/__init__.py" in found
    assert any(f.startswith("agent/") and f.count("/") >= 2 for f in found)
    assert any(f.startswith("plugins/") and f.count("/") >= 2 for f in found)
    assert not any("/tests/" in f or f.endswith("conftest.py") for f in found)


# -- who runs it --------------------------------------------------------------------------------
def _commands(path: Path) -> list[str]:
    lines = [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()]
    return [line for line in lines if line]


def test_ci_runs_the_fast_lane_check_after_ruff_and_before_the_suite_which_has_the_last_word():
    lines = _commands(REPO / ".ci" / "run")
    where = {name: next(i for i, line in enumerate(lines) if name in line) for name in ("ruff format", "fast-lane.sh")}
    suite = max(i for i, line in enumerate(lines) if line.startswith("./scripts/test.sh -q"))
    assert where["ruff format"] < where["fast-lane.sh"] < suite
    assert not any(line.startswith(("echo", "./", ".venv")) for line in lines[suite + 1 :])  # nothing prints after


def test_the_fast_lane_installs_what_the_suite_installs_and_the_example_plugin():
    setup = re.compile(r'^\./scripts/setup\.sh "([^"]+)"', re.M)
    fast = setup.findall((REPO / "scripts" / "fast-lane.sh").read_text())
    suite = setup.findall((REPO / "scripts" / "test.sh").read_text())
    assert fast and fast == suite
    assert "examples/gpuagent-infiniband" in (REPO / "scripts" / "setup.sh").read_text()
