"""Device attributes NVML lacks, read from the CUDA driver (libcuda) where it is installed.

NVML has no L2 cache size; the CUDA driver does (cuDeviceGetAttribute,
CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE). CUDA and NVML number devices differently
(CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER), so devices are matched by PCI bus
id. No libcuda, or any CUDA error: an empty map, never an exception. Only
cuInit is called: no context is created and no GPU memory is used.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import re

log = logging.getLogger("gpuagent.gpus.cuda_attrs")

LIBCUDA = "libcuda.so.1"
CUDA_SUCCESS = 0
CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38

_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def normalize_bus_id(bus_id: str | bytes) -> str | None:
    """One spelling for NVML's "00000000:01:00.0" and CUDA's "0000:01:00.0": "0000:01:00.0"."""
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode(errors="replace")
    match = _BUS_ID.match(bus_id.strip().rstrip("\x00"))
    if not match:
        return None
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{int(function, 16)}"


def read_attribute(attribute: int, library: str = LIBCUDA) -> dict[str, int]:
    """Normalized PCI bus id -> the attribute's value, for every device the CUDA driver sees."""
    try:
        cuda = ctypes.CDLL(library)
    except OSError as exc:
        log.debug("no CUDA driver (%s): %s", library, exc)
        return {}
    try:
        if cuda.cuInit(0) != CUDA_SUCCESS:
            log.debug("cuInit failed; no CUDA device attributes")
            return {}
        count = ctypes.c_int(0)
        if cuda.cuDeviceGetCount(ctypes.byref(count)) != CUDA_SUCCESS:
            return {}
        values: dict[str, int] = {}
        for ordinal in range(count.value):
            device = ctypes.c_int(0)
            if cuda.cuDeviceGet(ctypes.byref(device), ctypes.c_int(ordinal)) != CUDA_SUCCESS:
                continue
            bus_id = ctypes.create_string_buffer(32)
            if cuda.cuDeviceGetPCIBusId(bus_id, ctypes.c_int(len(bus_id)), device) != CUDA_SUCCESS:
                continue
            value = ctypes.c_int(0)
            if cuda.cuDeviceGetAttribute(ctypes.byref(value), ctypes.c_int(attribute), device) != CUDA_SUCCESS:
                continue
            key = normalize_bus_id(bus_id.value)
            if key is not None and value.value > 0:
                values[key] = value.value
        return values
    except (AttributeError, OSError) as exc:  # a libcuda without these symbols
        log.debug("CUDA driver unusable: %s", exc)
        return {}


@functools.cache
def l2_cache_sizes(library: str = LIBCUDA) -> dict[str, int]:
    """Normalized PCI bus id -> L2 cache bytes; read once per process."""
    return read_attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, library)


def l2_cache_bytes(pci_bus_id: str, library: str = LIBCUDA) -> int | None:
    key = normalize_bus_id(pci_bus_id)
    return l2_cache_sizes(library).get(key) if key else None
