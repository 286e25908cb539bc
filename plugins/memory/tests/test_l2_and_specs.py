"""gpuagent.gpus.specs (published figures) and gpuagent.gpus.cuda_attrs (L2 size from libcuda)."""

from __future__ import annotations

import ctypes.util

import pytest

from gpuagent.gpus import cuda_attrs, specs
from gpuagent.plugins.memory import peak_dram_gbps
from gpuagent.sim import load_profile

MIB = 1 << 20


def test_lookup_by_nvml_pci_device_id_bare_id_and_name():
    assert specs.lookup(0x26B910DE).profile == "l40s"  # NVML's pciDeviceId: device << 16 | vendor
    assert specs.lookup(0x2330).profile == "h100-sxm"
    assert specs.lookup(None, "nvidia geforce rtx 4090").profile == "rtx4090"
    assert specs.lookup(0x26B91002) is None  # same device id, another vendor
    assert specs.lookup(0x2FFF10DE, "NVIDIA Mystery GPU") is None


def test_published_figures():
    l40s = specs.lookup(0x26B9)
    assert l40s.l2_cache_bytes == 100663296 and l40s.bus_width_bits == 384 and l40s.peak_dram_gbps == 864
    assert specs.lookup(0x20B2).l2_cache_bytes == 40 * MIB
    assert len({s.pci_device_id for s in specs.SPECS}) == len(specs.SPECS)


@pytest.mark.parametrize("name", ["l40s", "rtx4090", "a100-sxm4", "h100-pcie", "h100-sxm", "h200"])
def test_table_agrees_with_the_simulator_profiles(name):
    # Two sources of the same figures: the table's peak must follow from the profile's bus and clock.
    profile = load_profile(name)
    spec = specs.lookup(int(profile["pci_device_id"], 16), profile["product_name"])
    assert spec is not None, name
    assert spec.l2_cache_bytes == profile["l2_cache_bytes"]
    assert spec.bus_width_bits == profile["memory"]["bus_width_bits"]
    derived = peak_dram_gbps(spec.bus_width_bits, profile["clocks_mhz"]["max"]["memory"])
    assert derived == pytest.approx(spec.peak_dram_gbps, rel=0.01)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("00000000:01:00.0", "0000:01:00.0"),  # NVML
        ("0000:01:00.0", "0000:01:00.0"),  # CUDA
        ("0000:C1:00.0", "0000:c1:00.0"),
        (b"00000001:81:00.1\x00", "0001:81:00.1"),
        ("01:00.0", "0000:01:00.0"),
        ("not a bus id", None),
    ],
)
def test_bus_ids_from_nvml_and_cuda_compare_equal(text, expected):
    assert cuda_attrs.normalize_bus_id(text) == expected


def test_no_libcuda_is_an_empty_map():
    assert cuda_attrs.read_attribute(cuda_attrs.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "libcuda-absent.so.1") == {}
    assert cuda_attrs.l2_cache_bytes("00000000:01:00.0", "libcuda-absent.so.1") is None


def test_a_library_without_the_cuda_symbols_is_an_empty_map():
    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no libc found to stand in for a broken libcuda")
    assert cuda_attrs.read_attribute(cuda_attrs.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, libc) == {}


@pytest.mark.gpu
def test_l2_from_the_real_cuda_driver():
    sizes = cuda_attrs.l2_cache_sizes()
    if not sizes:
        pytest.skip("no CUDA driver or no CUDA device here")
    assert all(size >= MIB for size in sizes.values()), sizes
