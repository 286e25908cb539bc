"""`inspect --json` and the stream (`run --once --test`) name a fact alike and agree on every static one.

The facts of `inspect` are the collectors' own readings (agent/commands/facts.py arranges
them), so on the same fleet and seed: most facts per GPU carry the name the
stream gives them, and every static fact (limits, max clocks, sizes, L2, bus
width, link maxima, MIG mode and devices) has the same value in both.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest
from lineprotocol_parser import parse_line

SPEC = "l40s:2,h100-sxm-mig:1,rtx4090:1"
SEED = 5

# measurement -> the fields that do not change while the driver is loaded.
STATIC = {
    "gpu_clocks": [
        "max_graphics_clock_mhz",
        "max_sm_clock_mhz",
        "max_memory_clock_mhz",
        "max_video_clock_mhz",
        "clock_event_reasons_supported",
    ],
    "gpu_power": [
        "power_limit_w",
        "enforced_power_limit_w",
        "default_power_limit_w",
        "min_power_limit_w",
        "max_power_limit_w",
        "temperature_shutdown_c",
        "temperature_slowdown_c",
        "temperature_gpu_max_c",
        "temperature_memory_max_c",
        "temperature_target_c",
        "temperature_shutdown_tlimit_c",
        "temperature_slowdown_tlimit_c",
        "temperature_gpu_max_tlimit_c",
        "temperature_memory_max_tlimit_c",
    ],
    "gpu_memory": [
        "fb_total_bytes",
        "bar1_total_bytes",
        "bus_width_bits",
        "dram_peak_gbps",
        "dram_peak_source",
        "l2_cache_bytes",
        "l2_cache_source",
    ],
    "gpu_pcie": ["max_link_gen", "max_link_width"],
    "gpu_health": ["ecc_enabled", "ecc_pending_enabled"],
    "gpu_mig": ["mig_mode_current", "mig_mode_pending", "max_mig_devices", "mig_devices"],
    "gpu_nvlink": ["links"],
}
# Static fields of a multi-point measurement's points, and the tag that pairs a point with its stream point.
STATIC_POINTS = {
    "gpu_mig": (
        "mig_index",
        ["gi_id", "ci_id", "mig_uuid", "mig_profile", "fb_total_bytes", "sm_count", "gi_slices", "ci_slices"],
    ),
    "gpu_vgpu": ("vgpu_instance", ["vgpu_type_id", "vgpu_type_name", "vgpu_uuid", "vm_id", "fb_total_bytes"]),
    "gpu_nvlink": ("link", ["version", "version_name", "remote_pci_bus_id", "remote_device_type", "cap_p2p_supported"]),
}


@pytest.fixture(scope="module")
def both(gpuagent_cli):
    """(inspect --json document, uuid -> measurement -> list of (tags, fields) from run --once --test)."""
    from click.testing import CliRunner

    runner = CliRunner()
    env = {"GPUAGENT_CONFIG": None}
    doc = runner.invoke(gpuagent_cli, ["inspect", "--simulate", SPEC, "--seed", str(SEED), "--json"], env=env)
    assert doc.exit_code == 0, doc.output
    ran = runner.invoke(gpuagent_cli, ["run", "--once", "--test", "--simulate", SPEC, "--seed", str(SEED)], env=env)
    assert ran.exit_code == 0, ran.output
    stream: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for line in ran.stdout.splitlines():
        if line and not line.startswith("#"):
            measurement, tags, fields, _ = parse_line(line)
            if "uuid" in tags and "peer_uuid" not in tags:
                stream[tags["uuid"]][measurement].append((tags, fields))
    return json.loads(doc.stdout), stream


def gpu_point(points: list) -> tuple[dict, dict]:
    """The GPU's own point of a measurement: the one with the fewest tags."""
    return min(points, key=lambda p: len(p[0]))


def facts_of(gpu: dict[str, Any], stream: dict[str, list]) -> list[tuple[str, bool]]:
    """Every fact inspect gives for the GPU, as (path, whether it carries the stream's name).

    A null is no fact given ("n/a"; the stream leaves such a field out). Identity
    keys carry the stream's name when they are the GPU's tags (or gpu_health's ``lost``).
    """
    identity = set(gpu_point(stream["gpu_clocks"])[0]) | set(gpu_point(stream["gpu_health"])[1])
    out = []
    for key, value in gpu.items():
        if value is None:
            continue
        if key.startswith("gpu_") and isinstance(value, dict):
            names = {k for tags, fields in stream.get(key, []) for k in (*tags, *fields)}
            for field, inner in value.items():
                if field == "points":
                    for point in inner:
                        out.extend((f"{key}.points.{k}", k in names) for k, v in point.items() if v is not None)
                elif inner is not None:
                    out.append((f"{key}.{field}", field in names))
        elif key == "l2_probe":
            out.extend((f"l2_probe.{k}", False) for k in value)  # the probe's stream, not run's
        else:
            out.append((key, key in identity))
    return out


def test_at_least_80_percent_of_each_gpus_facts_carry_the_stream_name(both):
    doc, stream = both
    assert len(doc["gpus"]) == 4
    shares = []
    for gpu in doc["gpus"]:
        facts = facts_of(gpu, stream[gpu["uuid"]])
        named = [path for path, ok in facts if ok]
        others = [path for path, ok in facts if not ok]
        share = len(named) / len(facts)
        assert share >= 0.8, f"GPU {gpu['index']}: {share:.0%} of {len(facts)} facts named as streamed; not: {others}"
        shares.append(share)
        print(f"GPU {gpu['index']}: {share:.0%} of {len(facts)}; other names: {others}")
    print("share of facts with the stream's name, per GPU:", [f"{s:.0%}" for s in shares])


def same(inspected: Any, streamed: Any) -> bool:
    if isinstance(inspected, float) or isinstance(streamed, float):
        return streamed == pytest.approx(inspected)
    if isinstance(streamed, str) and not isinstance(inspected, str):
        return streamed == str(inspected)  # a tag: a string in line protocol
    return streamed == inspected


def test_every_static_fact_has_the_same_value_in_both(both):
    doc, stream = both
    checked = 0
    for gpu in doc["gpus"]:
        points = stream[gpu["uuid"]]
        where = f"GPU {gpu['index']} ({gpu['name']})"
        for measurement, keys in STATIC.items():
            own = gpu[measurement]
            if own is None:  # no such measurement for this card: the stream has none either
                assert not points.get(measurement), f"{where}: {measurement} streamed but not inspected"
                continue
            tags, fields = gpu_point(points[measurement])
            for key in keys:
                if own.get(key) is None:
                    assert fields.get(key) is None, f"{where}: {measurement}.{key} streamed, n/a in inspect"
                else:
                    assert same(own[key], fields.get(key)), (
                        f"{where}: {measurement}.{key} {own[key]!r} != {fields.get(key)!r}"
                    )
                    checked += 1
        for measurement, (pair_tag, keys) in STATIC_POINTS.items():
            own = gpu[measurement]
            inspected = own["points"] if own else []
            streamed = [{**t, **f} for t, f in points.get(measurement, []) if pair_tag in t or pair_tag in f]
            assert len(inspected) == len(streamed), f"{where}: {measurement} points differ in number"
            by_key = {str(p[pair_tag]): p for p in streamed}
            for point in inspected:
                other = by_key[str(point[pair_tag])]
                for key in keys:
                    if point.get(key) is not None:
                        assert same(point[key], other.get(key)), (
                            f"{where}: {measurement} {pair_tag}={point[pair_tag]} {key}"
                        )
                        checked += 1
    # The MIG H100 alone has 2 devices x 8 static facts: the comparison is not vacuous.
    assert checked >= 100, checked


def test_mig_profile_names_and_power_limits_agree(both):
    """The drift of issue 20: profile names by another rule, the enforced limit under the management name."""
    doc, stream = both
    mig_gpu = next(g for g in doc["gpus"] if g["gpu_mig"] and g["gpu_mig"]["mig_mode_current"])
    streamed = sorted(t["mig_profile"] for t, _ in stream[mig_gpu["uuid"]]["gpu_mig"] if "mig_profile" in t)
    assert sorted(p["mig_profile"] for p in mig_gpu["gpu_mig"]["points"]) == streamed and streamed
    for gpu in doc["gpus"]:
        _, fields = gpu_point(stream[gpu["uuid"]]["gpu_power"])
        assert gpu["gpu_power"]["power_limit_w"] == pytest.approx(fields["power_limit_w"])
        assert gpu["gpu_power"]["enforced_power_limit_w"] == pytest.approx(fields["enforced_power_limit_w"])
