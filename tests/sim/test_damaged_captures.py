"""A damaged capture (a repeated line, a value nvidia-smi never prints there, a cut-off file) is
imported or refused in one line, and what it imports runs: the agent's collectors never raise on
it. The real captures are the seeds; the damage is seeded, so a failure names its case."""

from __future__ import annotations

import json
import random
import re

import pytest
from captures import CAPTURES, capture_names
from nvml.runs import run_once

from gpuagent.errors import AgentError
from gpuagent.sim.capture_import import import_capture
from gpuagent.sim.profile import validate

# Values nvidia-smi prints in place of a reading (captures' README), and some it never prints.
ODD_VALUES = (
    "N/A",
    "[N/A]",
    "[Unknown Error]",
    "Requested functionality has been deprecated",
    "Insufficient Permissions",
    "[Not Supported]",
    "-1",
    "0",
    "1e999",
    "0x",
    "abc",
    "",
    "99999999999999999999",
    "5.5.5 MHz",
)
CASES_PER_CAPTURE = 4


def damaged(text: str, xml: bool, rng: random.Random) -> str:
    lines = text.split("\n")
    for _ in range(rng.randint(1, 30)):
        j = rng.randrange(len(lines))
        op, line = rng.random(), lines[j]
        if op < 0.3:
            del lines[j]
        elif op < 0.8:
            if not xml and ":" in line:
                lines[j] = line.partition(":")[0] + ": " + rng.choice(ODD_VALUES)
            elif xml and "</" in line:
                lines[j] = re.sub(r">[^<]*</", ">" + rng.choice(ODD_VALUES) + "</", line, count=1)
        elif op < 0.85:
            lines.insert(j, line)  # a repeated line
        elif op < 0.9:
            lines[j] = "    " + line if rng.random() < 0.5 else line.lstrip()  # nested wrongly
        else:
            return "\n".join(lines[: max(1, j)])  # cut off
    return "\n".join(lines)


@pytest.mark.parametrize("capture", capture_names())
@pytest.mark.slow
def test_a_damaged_capture_imports_or_is_refused_in_one_line_and_runs(capture, tmp_path):
    if capture is None:
        pytest.skip(f"no nvidia-smi captures at {CAPTURES} (they live in ../shared/captures)")
    source = CAPTURES / capture
    for case in range(CASES_PER_CAPTURE):
        rng = random.Random(f"{capture}:{case}")
        path = tmp_path / f"case{case}{source.suffix}"
        path.write_text(damaged(source.read_text(errors="replace"), source.suffix == ".xml", rng))
        try:
            profile = import_capture(path)
        except AgentError as exc:
            assert "\n" not in str(exc), (case, str(exc))
            continue
        profile_path = tmp_path / f"case{case}.json"
        profile_path.write_text(json.dumps(profile))
        workdir = tmp_path / f"run{case}"
        workdir.mkdir()
        run = run_once(f"{profile_path}:1", workdir)
        if run.error is not None:  # the simulated driver refuses to start: said in one line
            assert "\n" not in run.error, (case, run.error)
            continue
        assert run.collector_errors() == {}, (case, run.collector_errors())
        assert run.tracebacks() == [], case
        # The GPU is read, or (its identity refused, e.g. a name of N/A) reported unavailable.
        read = any(p.measurement == "gpu_power" for p in run.points)
        unavailable = any(p.fields.get("gpu_available") is False for p in run.own())
        assert read or unavailable, case


def _capture_with(tmp_path, edit) -> dict:
    source = CAPTURES / "linux-x86_64__nvidia-l40s__595.80.txt"
    if not source.exists():
        pytest.skip(f"the L40S capture is not at {CAPTURES}")
    path = tmp_path / "edited.txt"
    path.write_text(edit(source.read_text()))
    return import_capture(path)


def test_a_repeated_line_reads_as_its_first_value(tmp_path):
    def repeat(text: str) -> str:
        text = re.sub(r"^(\s+Sub System Id\s+: )(\S+)$", r"\1\2\n\g<1>0xDEADBEEF", text, count=1, flags=re.M)
        return re.sub(r"^(\s+Product Name\s+: )(.+)$", r"\1\2\n\1Something Else", text, count=1, flags=re.M)

    profile = _capture_with(tmp_path, repeat)
    assert profile["product_name"] == "NVIDIA L40S"
    assert profile["pci_subsystem_id"] == _capture_with(tmp_path, lambda t: t)["pci_subsystem_id"]


def test_a_subsystem_id_that_is_not_hex_is_left_out(tmp_path):
    profile = _capture_with(
        tmp_path, lambda t: re.sub(r"^(\s+Sub System Id\s+: ).*$", r"\1N/A", t, count=1, flags=re.M)
    )
    assert profile["pci_subsystem_id"] is None
    profile["pci_subsystem_id"] = "zz"
    with pytest.raises(AgentError, match=r"^hand-made: bad or missing value \(ValueError: .*'zz'"):
        validate(profile, "hand-made")
