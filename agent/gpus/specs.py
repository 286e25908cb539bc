"""Published figures for the GPUs the project knows (DESIGN.md, "Published figures").

Used for spec-derived fields when the hardware does not report them: NVML has
no L2 size, and old drivers lack the memory bus width. A card that is not in
the table gets no spec-derived field at all: absent, never guessed.

Sizes in MB are binary (the CUDA driver reports the L40S's 96 MB L2 as
100663296 bytes). Peak DRAM GB/s = bus width / 8 x max memory clock x 2 / 1000.
"""

from __future__ import annotations

from dataclasses import dataclass

NVIDIA_VENDOR_ID = 0x10DE
MIB = 1 << 20


@dataclass(frozen=True)
class GpuSpec:
    profile: str
    product_name: str
    arch: str
    pci_device_id: int  # the 16-bit device id, e.g. 0x26B9
    memory: str
    bus_width_bits: int
    peak_dram_gbps: float
    l2_cache_bytes: int
    board_power_w: int


# fmt: off
SPECS: tuple[GpuSpec, ...] = (
    GpuSpec("l40s", "NVIDIA L40S", "Ada Lovelace", 0x26B9, "48 GB GDDR6 ECC", 384, 864.0, 96 * MIB, 350),
    GpuSpec("rtx4090", "NVIDIA GeForce RTX 4090", "Ada Lovelace", 0x2684, "24 GB GDDR6X", 384, 1008.0, 72 * MIB, 450),
    GpuSpec("a100-sxm4", "NVIDIA A100-SXM4-80GB", "Ampere", 0x20B2, "80 GB HBM2e", 5120, 2039.0, 40 * MIB, 400),
    GpuSpec("h100-pcie", "NVIDIA H100 PCIe", "Hopper", 0x2331, "80 GB HBM2e", 5120, 2039.0, 50 * MIB, 350),
    GpuSpec("h100-sxm", "NVIDIA H100 80GB HBM3", "Hopper", 0x2330, "80 GB HBM3", 5120, 3352.0, 50 * MIB, 700),
    # L2: 50 MB as GH100 in the H100 SXM; NVIDIA publishes no H200 figure (unverified).
    GpuSpec("h200", "NVIDIA H200", "Hopper", 0x2335, "141 GB HBM3e", 6144, 4800.0, 50 * MIB, 700),
)
# fmt: on

_BY_DEVICE_ID = {s.pci_device_id: s for s in SPECS}
_BY_NAME = {s.product_name.casefold(): s for s in SPECS}


def device_id(pci_device_id: int) -> int | None:
    """The 16-bit NVIDIA device id from NVML's pciDeviceId (device << 16 | vendor) or a bare id."""
    if pci_device_id > 0xFFFF:
        if pci_device_id & 0xFFFF != NVIDIA_VENDOR_ID:
            return None
        return (pci_device_id >> 16) & 0xFFFF
    return pci_device_id


def lookup(pci_device_id: int | None = None, product_name: str | None = None) -> GpuSpec | None:
    """The card's published figures, by PCI device id first, then by exact product name."""
    if pci_device_id:
        dev = device_id(pci_device_id)
        if dev is not None and dev in _BY_DEVICE_ID:
            return _BY_DEVICE_ID[dev]
    if product_name:
        return _BY_NAME.get(product_name.strip().casefold())
    return None
