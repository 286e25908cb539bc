"""Plugin READMEs in the template's shape (docs/plugins/readme-template.md).

Sections in order, one table header for fields, a type in every field row,
and an example of real line protocol whose every field has a row. The READMEs
not yet rewritten to the template are not listed; add a plugin here when its
README is.
"""

from __future__ import annotations

import re

import pytest
from lineprotocol_parser import parse_line
from test_plugin_readmes import CODE, ROW, is_documented

from conftest import REPO

TEMPLATED = ("clocks", "power", "memory", "pcie", "p2p", "nvlink", "mig", "vgpu", "host", "processes", "health")
# Plugins that write several measurements (the title names them all, in this order).
MEASUREMENTS = {
    "host": ("host", "host_cpu"),
    "processes": ("gpu_process", "gpu_job", "gpu_attribution"),
    "health": ("gpu_health", "gpu_inventory", "gpu_action"),
}
SECTIONS = ["Tags", "Fields", "Config", "Example output"]
FIELD_HEADER = "| field | type | unit | NVML source | notes |"
TYPES = {"int", "float", "bool", "string"}


def section(text: str, name: str) -> str:
    """The text under ``## name`` up to the next ``## `` heading."""
    return re.split(r"^## ", text.split(f"\n## {name}\n", 1)[1], maxsplit=1, flags=re.M)[0]


def field_rows(fields: str) -> list[list[str]]:
    """Cells of every row of the field tables (header and rule lines left out)."""
    rows = []
    for line in fields.splitlines():
        if line.startswith("|") and line != FIELD_HEADER and not line.startswith("| ---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def check(text: str, measurement: str | tuple[str, ...]) -> list[str]:
    """What is wrong with one README against the template; [] when nothing."""
    problems = []
    measurements = (measurement,) if isinstance(measurement, str) else measurement
    title = text.splitlines()[0]
    spans = ", ".join(f"`{m}`" for m in measurements)
    if not re.fullmatch(rf"# [a-z0-9_]+: {re.escape(spans)}", title):
        problems.append(f"title {title!r}: want '# <plugin>: {spans}'")
    headings = [h for h in re.findall(r"^## (.+)$", text, re.M) if h in SECTIONS]
    if headings != SECTIONS:
        return [*problems, f"sections {headings}, want {SECTIONS} in this order"]
    fields = section(text, "Fields")
    headers = [line for line in fields.splitlines() if line.startswith("| field")]
    if not headers or any(h != FIELD_HEADER for h in headers):
        problems.append(f"field table header must be {FIELD_HEADER!r}")
    for cells in field_rows(fields):
        types = {t.strip() for t in cells[1].split(",")} if len(cells) > 1 else set()
        if len(cells) != 5 or not types or not types <= TYPES or not cells[3]:
            problems.append(f"row {cells}: want 5 cells, a type of {sorted(TYPES)} and an NVML source")
    example = [line.strip() for line in section(text, "Example output").splitlines() if line.startswith("    ")]
    if not example:
        problems.append("no example line (indented four spaces)")
    names, spans = documented_text(text)
    for line in example:
        got, tags, point_fields, _ = parse_line(line)
        if got not in measurements:
            problems.append(f"example of {got}, not of {spans}")
        problems += [f"example field {f} has no row" for f in point_fields if not is_documented(f, names)]
        problems += [f"example tag {t} not named" for t in tags if not is_documented(t, names | spans)]
    return problems


def documented_text(text: str) -> tuple[set[str], set[str]]:
    """(first-column names of the table rows, code spans): as tests/test_plugin_readmes.py reads a README."""
    names = {n.strip().strip("`").strip() for cell in ROW.findall(text) for n in cell.split(",")}
    return names, set(CODE.findall(text))


@pytest.mark.parametrize("plugin", TEMPLATED)
def test_readme_follows_the_template(plugin):
    import importlib

    module = importlib.import_module(f"gpuagent.plugins.{plugin}")
    text = (REPO / "plugins" / plugin / "README.md").read_text()
    measurements = MEASUREMENTS.get(plugin) or module.MEASUREMENT
    assert not check(text, measurements), "\n".join(check(text, measurements))


def test_the_check_finds_a_missing_section_a_bad_row_and_an_undocumented_example_field():
    good = (REPO / "plugins" / "power" / "README.md").read_text()
    assert check(good, "gpu_power") == []
    assert any("sections" in p for p in check(good.replace("## Config", "## Settings"), "gpu_power"))
    assert any("row" in p for p in check(good.replace("| `power_w` | float |", "| `power_w` | watts |"), "gpu_power"))
    assert any(
        "power_w has no row" in p for p in check(good.replace("| `power_w` |", "| `power_now_w` |"), "gpu_power")
    )
