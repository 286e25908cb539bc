"""MIG profile names equal `nvidia-smi -L`, privileged and @unprivileged, in `run` and `inspect`."""

from __future__ import annotations

import json
import re

import pytest

from gpuagent.sim.capture_import import import_capture
from gpuagent.sim.profile import load_profile
from tests.captures import CAPTURES

# Each case imports a capture and runs the agent over it twice.
pytestmark = pytest.mark.slow

H100_MIG = "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
A100_MIG = "telegraf-a100-sxm4-v12.xml"


def smi_list_names(text: str) -> list[str]:
    """The MIG profile names of a capture's `nvidia-smi -L` section, in device order."""
    return re.findall(r"^\s+MIG (\S+)\s+Device\s+\d+:", text, re.M)


def run_names(invoke, spec: str) -> list[str]:
    result = invoke("run", "--once", "--test", "--simulate", spec)
    assert result.exit_code == 0, result.output
    names = []
    for line in result.stdout.splitlines():
        if line.startswith("gpu_mig,") and "gi_id=" in line:
            names.append(re.search(r"mig_profile=([^,\s]+)", line).group(1))
    return names


def inspect_names(invoke, spec: str) -> list[str]:
    result = invoke("inspect", "--json", "--simulate", spec)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    return [i["mig_profile"] for g in doc["gpus"] if g["gpu_mig"] for i in g["gpu_mig"]["points"]]


def imported(name: str, tmp_path) -> str:
    path = CAPTURES / name
    if not path.exists():
        pytest.skip(f"capture {name} not available (expected under {CAPTURES})")
    out = tmp_path / "imported.json"
    out.write_text(json.dumps(import_capture(path)))
    return str(out)


@pytest.mark.parametrize("modifier", ["", "@unprivileged"])
def test_h100_mig_capture_names_as_nvidia_smi_list(modifier, invoke, tmp_path):
    spec = imported(H100_MIG, tmp_path) + modifier
    want = smi_list_names((CAPTURES / H100_MIG).read_text())
    assert want == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert sorted(run_names(invoke, spec)) == sorted(want)
    assert inspect_names(invoke, spec) == want


@pytest.mark.parametrize("modifier", ["", "@unprivileged"])
def test_a100_mig_capture_names(modifier, invoke, tmp_path):
    # The XML has no `-L` section; its four devices (14 SMs, 19968 MiB each) are the
    # 1-slice 20 GB profile of NVML's A100 80GB table ("MIG 1g.20gb").
    spec = imported(A100_MIG, tmp_path) + modifier
    assert inspect_names(invoke, spec) == ["1g.20gb"] * 4
    assert run_names(invoke, spec) == ["1g.20gb"] * 4


def h200_mig(tmp_path) -> str:
    """An H200 in MIG mode: a 1g.18gb, a 2g.35gb and a 3g.71gb split into 1c + 2c compute instances."""
    p = load_profile("h200")
    p["name"] = "h200-mig"
    p["mig"]["enabled"] = True
    p["mig"]["instances"] = [
        {
            "gi_id": 1,
            "ci_id": 0,
            "profile_id": 9,
            "profile": "3g.71gb",
            "ci_slices": 1,
            "sm_count": 20,
            "memory_mib": 71301,
        },
        {
            "gi_id": 1,
            "ci_id": 1,
            "profile_id": 9,
            "profile": "3g.71gb",
            "ci_slices": 2,
            "sm_count": 40,
            "memory_mib": 71301,
        },
        {
            "gi_id": 2,
            "ci_id": 0,
            "profile_id": 14,
            "profile": "2g.35gb",
            "sm_count": 32,
            "memory_mib": 33280,
        },
        {
            "gi_id": 3,
            "ci_id": 0,
            "profile_id": 19,
            "profile": "1g.18gb",
            "sm_count": 16,
            "memory_mib": 16384,
        },
    ]
    out = tmp_path / "h200-mig.json"
    out.write_text(json.dumps(p))
    return str(out)


@pytest.mark.parametrize("modifier", ["", "@unprivileged"])
def test_h200_names_from_the_profile_tables_not_rounding(modifier, invoke, tmp_path):
    # Issue 16: rounding NVML's memory sizes names these 1g.16gb / 2g.33gb; nvidia-smi says
    # 1g.18gb / 2g.35gb, and names smaller compute instances 1c.3g.71gb / 2c.3g.71gb.
    spec = h200_mig(tmp_path) + modifier
    want = ["1c.3g.71gb", "2c.3g.71gb", "2g.35gb", "1g.18gb"]
    assert inspect_names(invoke, spec) == want
    assert sorted(run_names(invoke, spec)) == sorted(want)
