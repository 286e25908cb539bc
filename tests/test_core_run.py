"""End to end: `gpuagent run --simulate ... --once --test` prints the core collectors' points."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuagent.testing import SIGNED_FIELD_SUFFIXES

FLEET = "l40s:2,h100-sxm:2,rtx4090:1"
CORE = ("gpu_clocks", "gpu_power", "gpu_memory", "gpu_pcie")
IDENTITY = {"host", "gpu", "uuid", "model", "pci_bus_id", "arch"}
GPM_FIELDS = {
    "sm_active_pct",
    "sm_occupancy_pct",
    "tensor_active_pct",
    "fp16_active_pct",
    "fp32_active_pct",
    "fp64_active_pct",
}
SENTINEL_INTS = {"4294967295i", "4294967294i", "18446744073709551615i"}


def split_unescaped(text: str, sep: str) -> list[str]:
    """Split line protocol on ``sep`` outside double quotes and not after a backslash."""
    parts, current, quoted, escaped = [], "", False, False
    for ch in text:
        if escaped:
            current += ch
            escaped = False
        elif ch == "\\":
            current += ch
            escaped = True
        elif ch == '"':
            current += ch
            quoted = not quoted
        elif ch == sep and not quoted:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return parts


def parse(line: str) -> tuple[str, dict[str, str], dict[str, str]]:
    head, fields, _timestamp = split_unescaped(line, " ")
    measurement, *tag_items = split_unescaped(head, ",")
    unescape = lambda s: re.sub(r"\\(.)", r"\1", s)  # noqa: E731
    tags = dict(unescape(item).split("=", 1) for item in tag_items)
    values = dict(item.split("=", 1) for item in split_unescaped(fields, ","))
    return measurement, tags, values


@pytest.fixture(scope="module")
def run_output() -> list[tuple[str, dict[str, str], dict[str, str]]]:
    from gpuagent.cli import build_cli

    result = CliRunner().invoke(build_cli(), ["run", "--simulate", FLEET, "--once", "--test"])
    assert result.exit_code == 0, result.output
    return [parse(line) for line in result.stdout.splitlines() if line.strip()]


def points(output, measurement: str, **tags: str):
    return [(t, f) for m, t, f in output if m == measurement and all(t.get(k) == v for k, v in tags.items())]


@pytest.mark.parametrize("measurement", CORE)
def test_every_gpu_has_each_core_measurement_with_identity_tags(run_output, measurement):
    found = points(run_output, measurement)
    assert sorted(t["gpu"] for t, _ in found) == ["0", "1", "2", "3", "4"]
    for tags, _ in found:
        assert IDENTITY <= set(tags), IDENTITY - set(tags)
    models = [t["model"] for t, _ in sorted(found, key=lambda p: p[0]["gpu"])]
    assert models == ["NVIDIA L40S"] * 2 + ["NVIDIA H100 80GB HBM3"] * 2 + ["NVIDIA GeForce RTX 4090"]


def test_l40s_l2_and_peak(run_output):
    for _, f in points(run_output, "gpu_memory", model="NVIDIA L40S"):
        assert f["l2_cache_bytes"] == "100663296i"
        assert float(f["dram_peak_gbps"]) == pytest.approx(864, rel=0.01)


def test_h100_dram_bandwidth_from_gpm(run_output):
    h100 = points(run_output, "gpu_memory", model="NVIDIA H100 80GB HBM3")
    assert len(h100) == 2
    for _, f in h100:
        assert f["dram_bw_source"] == '"gpm"'
        assert 0 <= float(f["dram_bw_util_pct"]) <= 100


def test_rtx4090_has_no_ecc_and_no_gpm_field(run_output):
    for measurement, tags, fields in run_output:
        if tags.get("model") != "NVIDIA GeForce RTX 4090":
            continue
        assert not any("ecc" in name for name in fields), (measurement, fields)  # inforom_ecc_version too
        assert not GPM_FIELDS & set(fields), measurement
        if measurement == "gpu_memory":
            assert not {"dram_bw_util_pct", "dram_bw_gbps", "dram_bw_source"} & set(fields)


def test_no_sentinel_anywhere(run_output):
    for measurement, _, fields in run_output:
        for name, value in fields.items():
            signed = name.endswith(SIGNED_FIELD_SUFFIXES)  # T.Limit values, the thermal margin
            assert value not in SENTINEL_INTS and (signed or not value.startswith("-")), (
                measurement,
                name,
                value,
            )
            assert value.strip('"').upper() not in ("N/A", "[N/A]", "NAN"), (
                measurement,
                name,
                value,
            )


@pytest.mark.parametrize("name", ["clocks", "power", "memory", "pcie", "processes"])
def test_sample_table_is_valid_config(name):
    module = importlib.import_module(f"gpuagent.plugins.{name}")
    sample = Path(module.__file__).with_name("sample.toml").read_text()
    # Every commented-out option, switched on: the sample documents only keys the model accepts.
    text = re.sub(r"(?m)^# ([a-z_]+ = )", r"\1", sample)
    table = tomllib.loads(text)["collectors"][name]
    (collector,) = [c for c in vars(module).values() if isinstance(c, type) and getattr(c, "name", None) == name]
    config = collector.Config(**table)
    assert config.enabled is True
    assert set(table) >= {"enabled", "interval"}
