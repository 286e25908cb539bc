#!/usr/bin/env python3
"""Names every module under agent/ and plugins/ that a test run executed no code of.

    lane-coverage.py DATA_FILE [ROOT ...]

DATA_FILE is coverage.py's data (combined) of the run; ROOTs (default: agent plugins, relative to
the repository) are walked recursively, so modules moved into subpackages are found where they
are. Test code (a `tests` folder, conftest.py) is not product and is skipped. A module is
touched when a line inside one of its functions ran; importing it runs only its `def` lines,
which says nothing about its code. A module without functions (constants, re-exports, hook
specifications that are docstrings only) is touched when it was imported. Exits 1 naming each
untouched module, 0 when there is none, 2 on bad arguments. scripts/fast-lane.sh runs it after
the fast lane.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("agent", "plugins")


def modules(roots) -> list[Path]:
    """Every product module under the roots: *.py at any depth, test code left out."""
    found = []
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")):
            rel = path.relative_to(root)
            if "tests" in rel.parts or path.name == "conftest.py" or "__pycache__" in rel.parts:
                continue
            found.append(path.resolve())
    return found


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def body_lines(source: str) -> set[int]:
    """The lines of statements inside function bodies: what runs only when a function is called.
    A docstring is no statement that runs (a hook specification is only its docstring)."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for statement in node.body:
                if _is_docstring(statement):
                    continue
                for inner in ast.walk(statement):
                    if isinstance(inner, ast.stmt):
                        lines.add(inner.lineno)
    return lines


def has_statements(source: str) -> bool:
    body = ast.parse(source).body
    if body and _is_docstring(body[0]):
        body = body[1:]  # a docstring alone
    return bool(body)


def untouched(data_file: str, roots) -> list[tuple[Path, str]]:
    """(module, why) for each module of the roots that the run in data_file did not touch."""
    from coverage import CoverageData

    data = CoverageData(basename=data_file)
    data.read()
    measured = {Path(f).resolve(): set(data.lines(f) or ()) for f in data.measured_files()}
    missing = []
    for path in modules(roots):
        source = path.read_text(encoding="utf-8")
        if not has_statements(source):
            continue  # an empty __init__.py: nothing to run
        ran = measured.get(path, set())
        functions = body_lines(source)
        if not ran:
            missing.append((path, "never imported"))
        elif functions and not ran & functions:
            missing.append((path, "imported, but none of its functions ran"))
    return missing


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print("usage: " + __doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    data_file, roots = argv[0], argv[1:] or [str(REPO / r) for r in ROOTS]
    if not Path(data_file).is_file():
        print(f"lane-coverage: no coverage data at {data_file}", file=sys.stderr)
        return 2
    missing = untouched(data_file, roots)
    for path, why in missing:
        try:
            shown = path.relative_to(REPO)
        except ValueError:
            shown = path
        print(f"not touched by the fast lane: {shown} ({why})")
    total = len(modules(roots))
    if missing:
        print(
            f"lane-coverage: {len(missing)} of {total} modules untouched: add a fast test that "
            "calls into each (see docs/testing.md)",
            file=sys.stderr,
        )
        return 1
    print(f"lane-coverage: every one of {total} modules under {', '.join(Path(r).name for r in roots)} ran code")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
