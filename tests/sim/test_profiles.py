"""Built-in profiles: the DESIGN.md published figures, schema validation."""

import pytest

from gpuagent.errors import AgentError
from gpuagent.sim.profile import BUILTIN_NAMES, load_profile, peak_dram_gbps, validate

MB = 1 << 20
# profile: (product name, PCI device id, memory GB, bus bits, peak DRAM GB/s, L2 MB, board power W, NVLink links)
TABLE = {
    "l40s": ("NVIDIA L40S", 0x26B9, 48, 384, 864, 96, 350, 0),
    "rtx4090": ("NVIDIA GeForce RTX 4090", 0x2684, 24, 384, 1008, 72, 450, 0),
    "a100-sxm4": ("NVIDIA A100-SXM4-80GB", 0x20B2, 80, 5120, 2039, 40, 400, 12),
    "h100-pcie": ("NVIDIA H100 PCIe", 0x2331, 80, 5120, 2039, 50, 350, 12),
    "h100-sxm": ("NVIDIA H100 80GB HBM3", 0x2330, 80, 5120, 3352, 50, 700, 18),
    "h200": ("NVIDIA H200", 0x2335, 141, 6144, 4800, 50, 700, 18),  # L2: GH100's, unverified
}


@pytest.mark.parametrize("name", sorted(TABLE))
def test_published_figures(name):
    product, dev_id, mem_gb, bus, dram, l2, power, links = TABLE[name]
    p = load_profile(name)
    assert p["product_name"] == product
    assert int(p["pci_device_id"], 16) >> 16 == dev_id
    assert p["memory"]["bus_width_bits"] == bus
    assert peak_dram_gbps(p) == pytest.approx(dram, rel=0.01)
    assert p["l2_cache_bytes"] == l2 * MB
    assert p["power_w"]["limit"] == power
    assert (p["nvlink"] or {}).get("links", 0) == links
    assert abs(p["memory"]["total_mib"] / 1024 - mem_gb) / mem_gb < 0.08  # GB vs GiB, ECC reserve


def test_variants():
    assert load_profile("h100-sxm-mig")["mig"]["enabled"] is True
    assert [i["profile"] for i in load_profile("a100-sxm4-mig")["mig"]["instances"]] == [
        "3g.40gb",
        "3g.40gb",
    ]
    assert [i["profile"] for i in load_profile("h100-sxm-mig")["mig"]["instances"]] == [
        "3g.40gb",
        "3g.40gb",
    ]
    vgpu = load_profile("l40s-vgpu")["virtualization"]
    assert vgpu["mode"] == "host_vgpu" and len(vgpu["vgpu_instances"]) == 2
    assert load_profile("rtx4090")["ecc"] is None
    assert all(load_profile(n)["gpm"] == (load_profile(n)["architecture"] == "Hopper") for n in BUILTIN_NAMES)


def test_load_profile_returns_fresh_copies():
    a = load_profile("l40s")
    a["product_name"] = "changed"
    assert load_profile("l40s")["product_name"] == "NVIDIA L40S"


def test_validation_names_the_problem():
    with pytest.raises(AgentError, match="missing key"):
        validate({"name": "x"}, "test")
    p = load_profile("l40s")
    p["clocks_mhz"]["max"]["memory"] = "fast"
    with pytest.raises(AgentError, match="bad or missing value"):
        validate(p, "test")
    p = load_profile("l40s")
    p["schema"] = 9
    with pytest.raises(AgentError, match="schema"):
        validate(p, "test")


def test_h200_names_what_no_source_gives():
    """Issue 32 item 8: the h200 figures from no capture or datasheet are marked unverified."""
    from gpuagent.sim.profile import load_profile

    unverified = load_profile("h200")["unverified"]
    for key in ("clocks_mhz.max.memory", "memory.reserved_mib", "mig.gpu_instance_profiles", "l2_cache_bytes"):
        assert unverified[key], key
    assert load_profile("h200")["l2_cache_bytes"] == 50 * 1024 * 1024  # GH100's, as the H100 SXM
