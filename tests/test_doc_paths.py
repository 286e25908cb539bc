"""No doc names a path that does not exist.

Checked in every Markdown file of the project (README, docs/, plugin and
example READMEs, bench/): relative links, and paths in inline code that start
at one of the repository's top-level folders. The import package is
`gpuagent`, but its files live in `agent/` (DESIGN.md), so a path spelt
`gpuagent/...` is dead too. Paths inside fenced blocks are examples (a
third-party plugin's own files), and placeholders (`NAME`, `<...>`, `*`) are
not paths.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOP = ("agent", "plugins", "config", "docs", "tests", "scripts", "bench", "examples", "gpuagent", ".ci")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`([^`\s]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"[<>*{}$]|\bNAME\b|\.\.\.|…")


def markdown_files() -> list[Path]:
    skip = {".venv", ".git", "node_modules", "build", "dist"}
    return sorted(
        p for p in REPO.rglob("*.md") if not skip.intersection(p.relative_to(REPO).parts) and "egg-info" not in str(p)
    )


def named_paths(doc: Path) -> list[tuple[str, Path]]:
    """(as written, where it points) for every path the doc names outside fenced blocks."""
    text = FENCE.sub("", doc.read_text())
    out = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if path and not PLACEHOLDER.search(path):
            out.append((target, (doc.parent / path).resolve()))
    for token in CODE.findall(text):
        token = token.rstrip(".,:;")
        if "/" not in token or PLACEHOLDER.search(token) or "::" in token:
            continue
        if token.split("/", 1)[0] in TOP:
            out.append((token, REPO / token.split(":", 1)[0]))
    return out


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_path_a_doc_names_exists(doc):
    dead = [written for written, path in named_paths(doc) if not path.exists()]
    assert not dead, f"{doc.relative_to(REPO)} names paths that do not exist: {dead}"


def test_the_check_finds_a_dead_path(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "See `gpuagent/commands/facts.py` and [here](nowhere.md); `agent/gpus/gpu.py` exists.\n```\nagent/nope.py\n```\n"
    )
    found = [w for w, p in named_paths(doc) if not p.exists()]
    assert found == ["nowhere.md", "gpuagent/commands/facts.py"]


# Files beside the repository (the design contract, the captures) that a user's clone lacks.
OUTSIDE = re.compile(r"DESIGN\.md|\.\./shared\b|\bshared/captures\b")


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_doc_names_what_the_repository_does_not_hold(doc):
    """Fenced blocks included: a user reads those too."""
    hits = [line.strip() for line in doc.read_text().splitlines() if OUTSIDE.search(line)]
    assert not hits, f"{doc.relative_to(REPO)} names files outside the repository: {hits}"


# `pip install gpuagent` or `'gpuagent[extra]'`: no package index holds gpuagent (and the bare name
# could resolve to someone else's package). A plugin's own name (`gpuagent-settings`) is not it.
BY_NAME = re.compile(r"pip3? install\b[^`\n]*?(?<![\w./-])['\"]?gpuagent(?![\w-])")


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_doc_installs_gpuagent_by_name_from_a_package_index(doc):
    hits = [line.strip() for line in doc.read_text().splitlines() if BY_NAME.search(line)]
    assert not hits, f"{doc.relative_to(REPO)} installs gpuagent from an index: {hits}"


def test_the_install_check_finds_one_by_name_and_passes_the_checkout_and_the_wheel():
    assert BY_NAME.search("`pip install gpuagent`") and BY_NAME.search("pip install 'gpuagent[testing]'")
    assert not BY_NAME.search("pip install '.[testing]'") and not BY_NAME.search("pip install gpuagent-settings")
    assert not BY_NAME.search("pip install 'dist/gpuagent-0.1.0-py3-none-any.whl[testing]'")


def test_the_wheel_the_docs_name_is_what_build_dist_makes():
    made = (REPO / "scripts" / "build-dist.sh").read_text()
    assert "dist/gpuagent-<version>-py3-none-any.whl" in made
    named = {m for doc in markdown_files() for m in re.findall(r"dist/gpuagent-[^\s`'\[]+\.whl", doc.read_text())}
    assert named == {"dist/gpuagent-<version>-py3-none-any.whl"}
