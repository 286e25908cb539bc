"""agent/compare in layers (its __init__ says which imports which): read with ast, no import run.

Module-level imports among its modules form no cycle and go down the LAYERS; at most
FUNCTION_LEVEL_LIMIT imports of gpuagent modules sit inside functions (the command boundaries, and
each other one a cycle hidden, not solved); no module imports another's `_private` names; the
simulated fleet's backfill (gpuagent.sim) is not imported by compare; `gpuagent --help` imports
compare's option modules only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

COMPARE = Path(__file__).resolve().parents[2] / "agent" / "compare"
PACKAGE = "gpuagent.compare"
FUNCTION_LEVEL_LIMIT = 12
BACKFILL = ("gpuagent.sim.fleet_backfill", "gpuagent.sim.fleet_replay", "gpuagent.sim.fleet_cli")
BACKFILL_NAMES = {m.rsplit(".", 1)[1] for m in BACKFILL}
# The layers of agent/compare/__init__.py, lowest first: a module-level import goes to its own layer or below.
LAYERS = (
    {
        "__init__",
        "core",
        "figures",
        "where",
        "health",
        "limits",
        "sharing",
        "placement",
        "prices",
        "progress",
        "tables",
    },
    {"query", "promql"},
    {"report", "work", "promql_report", "rollups", "rollup_report", "rollup_work", "rollup_rules", "promql_rollups"}
    | {"jobs", "drivers"},
    {"render", "work_render", "html_report", "jobs_render"},
    {"command", "rollups_command"},
    {"cli", "rollups_cli"},
)


def _modules() -> dict[str, ast.Module]:
    return {p.stem: ast.parse(p.read_text(), str(p)) for p in sorted(COMPARE.glob("*.py"))}


def _type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.Module):
    """(import node, at module level?) for every import that runs, not those under TYPE_CHECKING."""
    skipped: set[int] = set()
    for node in tree.body:
        if _type_checking(node):
            skipped |= {id(n) for n in ast.walk(node)}
    top = {id(n) for n in tree.body}
    for node in tree.body:  # module-level ones inside a top-level try/if run at import too
        if isinstance(node, ast.If | ast.Try) and not _type_checking(node):
            top |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped:
            yield node, id(node) in top


def _targets(node: ast.Import | ast.ImportFrom) -> list[tuple[str, list[str]]]:
    """(absolute module, names imported from it) of the gpuagent modules this import reads."""
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names if a.name.startswith("gpuagent")]
    module = node.module or ""
    if node.level:  # relative: from . import x / from .x import y
        base = PACKAGE.rsplit(".", node.level - 1)[0] if node.level > 1 else PACKAGE
        module = f"{base}.{module}" if module else base
    if not module.startswith("gpuagent"):
        return []
    names = [a.name for a in node.names]
    if module == PACKAGE:  # from gpuagent.compare import where: the module `where`
        return [(f"{PACKAGE}.{n}", []) for n in names]
    return [(module, names)]


def _sibling(module: str, modules) -> str | None:
    if module.startswith(PACKAGE + "."):
        name = module.removeprefix(PACKAGE + ".").split(".")[0]
        return name if name in modules else None
    return None


def _graph():
    modules = _modules()
    edges: dict[str, set[str]] = {m: set() for m in modules}
    inside, private, backfill = [], [], []
    for name, tree in modules.items():
        for node, at_top in _imports(tree):
            for module, names in _targets(node):
                where = f"{name}.py:{node.lineno} imports {module}"
                if not at_top:
                    inside.append(where)
                sibling = _sibling(module, modules)
                if at_top and sibling:
                    edges[name].add(sibling)
                if sibling and sibling != name:
                    private += [f"{where}: {n}" for n in names if n.startswith("_")]
                if module.startswith(BACKFILL) or (module == "gpuagent.sim" and BACKFILL_NAMES & set(names)):
                    backfill.append(where)
    return edges, inside, private, backfill


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1 or v in edges[v]:
                found.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def graph():
    return _graph()


def test_module_level_imports_form_no_cycle(graph):
    edges = graph[0]
    cycles = _cycles(edges)
    detail = "; ".join(f"{c}: " + ", ".join(f"{m} -> {sorted(edges[m] & set(c))}" for m in c) for c in cycles)
    assert not cycles, f"import cycles among agent/compare modules: {detail}"


def test_imports_go_down_the_layers(graph):
    edges = graph[0]
    layer = {m: i for i, names in enumerate(LAYERS) for m in names}
    unplaced = sorted(set(edges) - set(layer))
    assert not unplaced, (
        f"agent/compare modules in no layer (add them to LAYERS and to agent/compare/__init__.py): {unplaced}"
    )
    upward = [
        f"{m} (layer {layer[m]}) -> {t} (layer {layer[t]})"
        for m in sorted(edges)
        for t in sorted(edges[m])
        if layer[t] > layer[m]
    ]
    assert not upward, "module-level imports up the layers:\n" + "\n".join(upward)


def test_few_imports_sit_inside_functions(graph):
    inside = graph[1]
    assert len(inside) <= FUNCTION_LEVEL_LIMIT, (
        f"{len(inside)} function-level imports of gpuagent modules in agent/compare "
        f"(limit {FUNCTION_LEVEL_LIMIT}):\n" + "\n".join(inside)
    )


def test_no_module_imports_another_modules_private_names(graph):
    private = graph[2]
    assert not private, "imports of another agent/compare module's _private names:\n" + "\n".join(private)


def test_compare_does_not_import_the_simulated_fleets_backfill(graph):
    backfill = graph[3]
    assert not backfill, "agent/compare imports the sim fleet backfill (gpuagent.sim):\n" + "\n".join(backfill)
    assert not (COMPARE / "fleet.py").exists() and not (COMPARE / "fleet_replay.py").exists()


def test_the_checks_see_what_they_look_for(tmp_path, monkeypatch):
    # The same reading over a made-up package: a cycle, an import in a function, a private name
    # and the backfill are each found (a check that sees nothing would pass on anything).
    (tmp_path / "a.py").write_text("from gpuagent.compare.b import _hidden\nfrom gpuagent.compare import c\n")
    (tmp_path / "b.py").write_text("from gpuagent.compare.a import x\n")
    (tmp_path / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gpuagent.compare.a import y\n"
        "def f():\n    from gpuagent.sim.fleet_backfill import backfill\n"
    )
    monkeypatch.setitem(globals(), "COMPARE", tmp_path)
    edges, inside, private, backfill = _graph()
    assert _cycles(edges) == [["a", "b"]]
    assert edges["c"] == set()  # under TYPE_CHECKING: not run, no edge
    assert inside == ["c.py:5 imports gpuagent.sim.fleet_backfill"]
    assert private == ["a.py:1 imports gpuagent.compare.b: _hidden"]
    assert backfill == ["c.py:5 imports gpuagent.sim.fleet_backfill"]


def test_the_command_line_lists_compare_without_importing_its_engines():
    # `gpuagent --help` imports every command's module for its one-line help: compare's and rollups'
    # hold their options only; the engines load when the command runs (gpuagent.compare.command).
    script = (
        "import sys, atexit\n"
        "atexit.register(lambda: print(' '.join(m for m in sys.modules if m.startswith('gpuagent.compare'))))\n"
        "sys.argv = ['gpuagent', '--help']\n"
        "from gpuagent.cli import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    loaded = set(out.stdout.split("\n")[-2].split())
    assert {"gpuagent.compare.cli", "gpuagent.compare.rollups_cli"} <= loaded  # the check sees them
    assert loaded == {"gpuagent.compare", "gpuagent.compare.cli", "gpuagent.compare.rollups_cli"}, sorted(loaded)
