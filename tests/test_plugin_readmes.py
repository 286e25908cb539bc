"""Every field and tag a built-in collector emits, on every built-in profile, is in its README.

Runs each enabled collector of a simulated agent twice (GPM fields appear
from the second run) on every built-in profile, and looks each field up in
the first column of a table in the README beside the collector's module and
each tag among the README's code spans. One README per plugin folder is the
only place a user learns what a field means; a field that is emitted but not
documented fails here, whoever added it.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from gpuagent.service.runtime import Options, build
from gpuagent.sim import profile as sim_profile
from gpuagent.testing import IDENTITY_TAGS, RecordingAccumulator

ROW = re.compile(r"^\|([^|]+)\|", re.M)
CODE = re.compile(r"`([^`\s]+)`")


def builtin_profiles() -> list[str]:
    return sorted(sim_profile.builtin_names())


def documented(readme: Path) -> tuple[set[str], set[str]]:
    """(first-column names of every table row, every code span) of a README.

    A row may name several fields: `| write_status, write_ok | string, bool | ...`.
    """
    text = readme.read_text()
    names = {n.strip().strip("`").strip() for cell in ROW.findall(text) for n in cell.split(",")}
    return names, set(CODE.findall(text))


def as_pattern(name: str) -> re.Pattern[str]:
    """A documented name with placeholders (`link<N>_...`, `..._{reason}_...`) as a regex."""
    parts = re.split(r"<[^>]*>|\{[^}]*\}", name)
    return re.compile("^" + "[A-Za-z0-9]+".join(re.escape(p) for p in parts) + "$")


def is_documented(name: str, names: set[str]) -> bool:
    return name in names or any(as_pattern(n).match(name) for n in names if "<" in n or "{" in n)


@pytest.mark.parametrize("profile", builtin_profiles())
@pytest.mark.slow
def test_every_emitted_field_and_tag_is_in_its_readme(profile, tmp_path, monkeypatch):
    monkeypatch.delenv("GPUAGENT_CONFIG", raising=False)
    config = tmp_path / "gpuagent.toml"
    config.write_text('[agent]\nhostname = "readme-check"\n')
    agent = build(Options(config_path=config, simulate=f"{profile}:2", test=True))
    problems = []
    try:
        for collector in agent.collectors:
            module = sys.modules[type(collector).__module__]
            if not module.__name__.startswith("gpuagent.plugins."):
                continue
            readme = Path(module.__file__).parent / "README.md"
            assert readme.is_file(), f"{collector.name}: no README.md beside {module.__file__}"
            names, spans = documented(readme)
            acc = RecordingAccumulator(default_tags={"host": "readme-check"})
            for _ in range(2):
                collector.collect(acc)
            for point in acc.points:
                for field in point.fields:
                    if not is_documented(field, names):
                        problems.append(
                            f"{collector.name}: {point.measurement}.{field} not in {readme.parent.name}/README.md"
                        )
                for tag in point.tags:
                    if tag not in IDENTITY_TAGS and not is_documented(tag, spans | names):
                        problems.append(
                            f"{collector.name}: {point.measurement} tag {tag} not in {readme.parent.name}/README.md"
                        )
    finally:
        agent.close(flush_timeout=1)
    assert not problems, "\n".join(sorted(set(problems)))


def test_the_check_sees_an_undocumented_name(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(
        "| field | type |\n| --- | --- |\n| `power_w` | float |\n| read_status, read_ok | string, bool |\n"
        "| `link<N>_errors` | int |\n\nTags: `peer_gpu`.\n"
    )
    names, spans = documented(readme)
    assert is_documented("power_w", names) and is_documented("read_ok", names)
    assert is_documented("link7_errors", names) and not is_documented("link7_bytes", names)
    assert not is_documented("energy_j", names)
    assert is_documented("peer_gpu", spans | names) and not is_documented("mig_uuid", spans | names)
