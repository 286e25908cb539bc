"""The core's folders show its architecture: few modules stand directly in agent/, the rest live in
subpackages named for what they are (gpus: the NVML layer; pipeline: a reading's way to a server;
service: the running agent; commands: the command line's verbs; compare, sim, probe, top)."""

from __future__ import annotations

from pathlib import Path

import gpuagent

AGENT = Path(__file__).resolve().parents[1] / "agent"
TOP_LIMIT = 12


def test_at_most_twelve_modules_stand_directly_in_agent():
    top = sorted(p.name for p in AGENT.glob("*.py"))
    assert len(top) <= TOP_LIMIT, f"{len(top)} modules directly in agent/ (limit {TOP_LIMIT}): {top}"


def test_every_subpackage_says_what_it_holds():
    for init in sorted(AGENT.glob("*/__init__.py")):
        doc = init.read_text().strip()
        assert doc.startswith('"""') and len(doc) > 20, f"{init.relative_to(AGENT.parent)} has no docstring"


def test_the_plugin_api_is_re_exported_where_it_was():
    # Third-party plugins import these from `gpuagent`; the move into subpackages keeps them there.
    for name in gpuagent.__all__:
        if name != "__version__":
            assert getattr(gpuagent, name) is not None, name
