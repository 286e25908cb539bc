"""docs/systemd.md's list of what an unprivileged agent cannot see is what it cannot see.

One `run --once` on an H100 in MIG mode, privileged and `@unprivileged` (the simulator answers
what nvml.h marks as privileged with NO_PERMISSION): the fields the unprivileged run lacks and
the calls it is refused must be exactly the ones the doc's table names, and everything the doc
says is read another way (processes per MIG device, profile names) must be there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from nvml.runs import base_symbol, keyed, lost_fields, run_once

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "systemd.md"
PRIVILEGED = json.loads((REPO / "agent" / "sim" / "nvml_privileged.json").read_text())
SPEC = "h100-sxm-mig:1"
# Hides events rather than refusing: the XID watcher's waits are not counted as refusals.
NOT_A_REFUSAL = {"nvmlEventSetWait"}


def doc_table() -> list[list[str]]:
    """The rows (cells) of the table under "What an unprivileged agent cannot see"."""
    text = DOC.read_text()
    section = text.split("## What an unprivileged agent cannot see", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in row.strip("|").split(" | ")] for row in rows[1:]]  # [0]: header


def doc_fields() -> set[str]:
    return {f for row in doc_table() for f in re.findall(r"`(gpu_\w+\.\w+)`", row[0])}


def doc_calls() -> set[str]:
    return {c for row in doc_table() for c in re.findall(r"`(nvml\w+)`", row[1])}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return (
        run_once(SPEC, tmp_path_factory.mktemp("privileged")),
        run_once(f"{SPEC}@unprivileged", tmp_path_factory.mktemp("unprivileged")),
    )


def test_the_doc_lists_only_calls_nvml_h_marks_as_privileged():
    marked = {base_symbol(c) for group in ("always", "mig_parent", "mig_parent_events") for c in PRIVILEGED[group]}
    assert doc_calls() and doc_calls() <= marked, doc_calls() - marked


def test_the_fields_an_unprivileged_run_lacks_are_the_documented_ones(runs):
    privileged, unprivileged = runs
    assert privileged.error is None and unprivileged.error is None
    before, after = keyed(privileged), keyed(unprivileged)
    assert sorted(k for k in before if k not in after) == []  # no point vanishes
    assert lost_fields(before, after) == doc_fields()


def test_the_calls_it_is_refused_are_the_documented_ones(runs):
    _, unprivileged = runs
    refused = {
        base_symbol(p.tags["nvml_call"]) for p in unprivileged.nvml_errors() if p.tags["nvml_error"] == "NO_PERMISSION"
    }
    assert refused == doc_calls() - NOT_A_REFUSAL


def test_what_the_doc_says_is_read_another_way_is_there(runs):
    privileged, unprivileged = runs

    def processes(run):
        return sorted(
            (p.tags["pid"], p.tags.get("gi_id"), p.tags.get("ci_id"))
            for p in run.points
            if p.measurement == "gpu_process"
        )

    def mig_devices(run):
        return sorted(
            (p.tags["gi_id"], p.tags.get("mig_profile"), p.fields.get("fb_total_bytes"))
            for p in run.points
            if p.measurement == "gpu_mig" and "gi_id" in p.tags
        )

    assert processes(unprivileged) == processes(privileged)
    assert all(gi is not None for _, gi, _ in processes(unprivileged))  # read per MIG device
    assert mig_devices(unprivileged) == mig_devices(privileged)
    assert len(mig_devices(unprivileged)) == 2 and all(m[1] and m[2] for m in mig_devices(unprivileged))


def test_without_mig_an_unprivileged_run_sees_everything(tmp_path):
    # The doc: on GPUs without MIG every reading the agent makes is open to any user.
    (tmp_path / "p").mkdir()
    (tmp_path / "u").mkdir()
    privileged = run_once("h100-sxm:1", tmp_path / "p")
    unprivileged = run_once("h100-sxm:1@unprivileged", tmp_path / "u")
    before, after = keyed(privileged), keyed(unprivileged)
    assert set(before) == set(after) and not lost_fields(before, after)
    assert not [p for p in unprivileged.nvml_errors() if p.tags["nvml_error"] == "NO_PERMISSION"]
