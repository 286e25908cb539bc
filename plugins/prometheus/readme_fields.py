"""Field documentation read from the plugin READMEs: the one source of HELP text and counter types.

Every built-in plugin's README lists its fields in Markdown tables whose first
column is `field` and which have a `type` column (and `unit`, `notes` or
`meaning`). A table belongs to the measurement named last before it: a
heading such as ``# power: `gpu_power` ``, or prose such as ``Measurement
`gpu_mig` `` or ``(the `gpuagent` measurement, tag `sink=file`)``. A row may
name several fields (``load1, load5, load15``, or ``write_status, write_ok``
with types ``string, bool``). The READMEs are package data, so an installed
agent reads the same text as a checkout; they are parsed once, at the first
scrape-name lookup (a few milliseconds).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

# The agent's own measurement first (its generic sink fields win over a sink's own wording).
AGENT_DOC = ("gpuagent.service", "measurement.md")

_MEASUREMENT = re.compile(
    r"^#+ *[\w -]+: *`(\w+)`|^#+ *`(\w+)` *$|[Mm]easurement `(\w+)`|the `(\w+)` measurement", re.M
)
_COUNTER = re.compile(r"\bcounter\b", re.I)


@dataclass(frozen=True)
class FieldDoc:
    measurement: str
    field: str
    type: str  # int, float, bool, string, as the README says
    unit: str
    text: str  # the notes / meaning column, Markdown stripped
    counter: bool  # the README calls it a counter
    source: str  # README path, for messages


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _plain(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("`", "").replace("**", "")).strip()


def parse(text: str, source: str = "README.md") -> list[FieldDoc]:
    """Every documented field of one README."""
    out: list[FieldDoc] = []
    measurement = ""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("|"):
            for m in _MEASUREMENT.finditer(line):
                measurement = next(g for g in m.groups() if g)
            i += 1
            continue
        header = [c.lower() for c in _cells(line)]
        i += 2  # header and the --- row
        rows = []
        while i < len(lines) and lines[i].startswith("|"):
            rows.append(_cells(lines[i]))
            i += 1
        if not header or header[0] != "field" or "type" not in header or not measurement:
            continue
        col = {name: n for n, name in enumerate(header)}
        text_col = col.get("notes", col.get("meaning", len(header) - 1))
        for row in rows:
            row += [""] * (len(header) - len(row))
            names = [n.strip() for n in row[0].replace("`", "").split(",") if n.strip()]
            types = [t.strip() for t in row[col["type"]].split(",")]
            unit = row[col["unit"]] if "unit" in col else ""
            note = row[text_col] if text_col != col["type"] else ""
            counter = bool(_COUNTER.search(row[col["type"]]) or _COUNTER.search(note))
            for n, name in enumerate(names):
                if not re.fullmatch(r"\w+", name):
                    continue
                kind = types[n] if len(types) == len(names) else types[0]
                out.append(FieldDoc(measurement, name, kind, _plain(unit), _plain(note), counter, source))
    return out


def builtin_sources() -> list[tuple[str, str]]:
    """(source name, README text) of the agent and every built-in plugin, in a fixed order."""
    out = []
    agent = resources.files(AGENT_DOC[0]) / AGENT_DOC[1]
    out.append((f"{AGENT_DOC[0].replace('.', '/')}/{AGENT_DOC[1]}", agent.read_text()))
    plugins = resources.files("gpuagent.plugins")
    for folder in sorted(plugins.iterdir(), key=lambda p: p.name):
        readme = folder / "README.md"
        if folder.is_dir() and readme.is_file():
            out.append((f"plugins/{folder.name}/README.md", readme.read_text()))
    return out


@lru_cache(maxsize=1)
def documented() -> dict[tuple[str, str], FieldDoc]:
    """(measurement, field) -> its documentation; the first README that documents it wins."""
    table: dict[tuple[str, str], FieldDoc] = {}
    for source, text in builtin_sources():
        for doc in parse(text, source):
            table.setdefault((doc.measurement, doc.field), doc)
    return table
