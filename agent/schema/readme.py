"""The field tables of the READMEs, generated from the declarations.

A README marks each generated table with a comment on the line before it that names the
declaration (``<!-- fields: gpu_mig/mig_device -->``: measurement, then part where it has
several); the table below the marker is rewritten from that Measurement, the prose around it
is left alone. ``python -m gpuagent.schema.readme`` says which READMEs differ (exit 1);
``--write`` rewrites them. tests/test_plugin_readmes.py keeps them equal.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable
from pathlib import Path

from gpuagent.schema import agent_health, catalog
from gpuagent.schema.fields import Field, Measurement

MARKER = re.compile(r"^<!-- fields: (\S+) -->$")


def marker(measurement: Measurement) -> str:
    return f"<!-- fields: {measurement.key} -->"


def _row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _type_cell(measurement: Measurement, field: Field) -> str:
    if measurement.unit_column:
        return field.type_name
    # No unit column (a sink's statistics): "int, counter", "int, bytes".
    return ", ".join(
        [field.type_name, *([field.unit] if field.unit else []), *(["counter"] * (field.kind == "counter"))]
    )


def table(measurement: Measurement) -> list[str]:
    """The Markdown table of one declaration, header and rule line included."""
    header = ["field", "type"]
    if measurement.unit_column:
        header.append("unit")
    if measurement.source_column is not None:
        header.append(measurement.source_column)
    notes = any(f.help for f in measurement.fields)
    if notes:
        header.append("notes" if measurement.unit_column else "meaning")
    lines = [_row(header), _row(["---"] * len(header))]
    for field in measurement.fields:
        cells = [f"`{field.name}`", _type_cell(measurement, field)]
        if measurement.unit_column:
            cells.append(field.unit)
        if measurement.source_column is not None:
            cells.append(field.source)
        if notes:
            cells.append(field.help)
        lines.append(_row(cells).replace("|  |", "| |"))
    return lines


class Mismatch(ValueError):
    """A README whose markers and declarations do not match one to one."""


def render(text: str, schema: Iterable[Measurement], name: str = "README.md") -> str:
    """The README with every marked table rewritten from ``schema``."""
    by_key = {m.key: m for m in schema}
    lines = text.splitlines()
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        found = MARKER.match(line)
        if not found:
            continue
        key = found.group(1)
        if key not in by_key:
            raise Mismatch(f"{name}: marker {key!r} names no declaration (declared: {', '.join(sorted(by_key))})")
        if key in seen:
            raise Mismatch(f"{name}: marker {key!r} twice")
        seen.add(key)
        while i < len(lines) and lines[i].startswith("|"):
            i += 1
        out += table(by_key[key])
    missing = sorted(set(by_key) - seen)
    if missing:
        raise Mismatch(f"{name}: no table for {', '.join(missing)} (add a line {marker(by_key[missing[0]])!r})")
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def builtin_readmes(root: Path) -> list[tuple[Path, tuple[Measurement, ...]]]:
    """(README, declarations) of the agent's own measurement and of every built-in plugin."""
    out = [(root / "agent" / "service" / "measurement.md", agent_health.SCHEMA)]
    for plugin in catalog.builtin_plugins():
        out.append((root / "plugins" / plugin / "README.md", catalog.plugin_schema(plugin)))
    return out
    return out


def module_schema(name: str) -> tuple[Measurement, ...]:
    """The declarations of the collectors and sinks a plugin module defines (a third-party one too)."""
    import importlib

    from gpuagent.collector import Collector
    from gpuagent.sink import Sink

    module = importlib.import_module(name)
    classes = [c for c in vars(module).values() if isinstance(c, type) and issubclass(c, (Collector, Sink))]
    return tuple(m for c in classes if c.__module__ == module.__name__ for m in c.schema)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuagent.schema.readme", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the READMEs that differ")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout (default: the current folder)")
    parser.add_argument(
        "--plugin",
        nargs=2,
        action="append",
        metavar=("MODULE", "README"),
        help="a third-party plugin's module and README instead of the built-in ones (repeatable)",
    )
    args = parser.parse_args(argv)
    if args.plugin:
        readmes = [(Path(readme), module_schema(module)) for module, readme in args.plugin]
    elif (args.root / "plugins").is_dir():
        readmes = builtin_readmes(args.root)
    else:
        print(
            f"{args.root}: not a gpuagent checkout (no plugins/ folder); run from one or pass --root", file=sys.stderr
        )
        return 2
    differ = []
    for readme, schema in readmes:
        if not readme.is_file():
            print(f"{readme}: no such file", file=sys.stderr)
            return 2
        text = readme.read_text()
        try:
            new = render(text, schema, readme.name if args.plugin else str(readme.relative_to(args.root)))
        except Mismatch as exc:
            print(exc, file=sys.stderr)
            return 2
        if new != text:
            differ.append(readme)
            if args.write:
                readme.write_text(new)
    for readme in differ:
        shown = readme.relative_to(args.root) if readme.is_relative_to(args.root) else readme
        print(f"{'rewrote' if args.write else 'differs'}: {shown}")
    return 0 if args.write or not differ else 1


if __name__ == "__main__":
    sys.exit(main())
