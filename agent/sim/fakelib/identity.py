"""What a device is: name, UUID, serial, board part number, VBIOS/InfoROM, minor number, index,
brand, architecture, compute capability, PCI info, display/persistence/compute modes, board and
NUMA ids, and the event types it supports.

The answers come from the device's profile and place in the fleet, fixed for a run. A MIG
device answers with its parent GPU's minor number, architecture and PCI location, as the real
library does. _fill_pci and _event_mask are module functions because other areas answer with
the same struct (NVLink remote PCI info) and the same mask (event registration).
"""

from __future__ import annotations

import pynvml

from gpuagent.sim.fakelib.args import E_INVALID, E_NS, OK, NvmlCalls, _int, _out, _put_str
from gpuagent.sim.fakelib.calls import device_call
from gpuagent.sim.machine import SimDevice


def _fill_pci(out, bus_id: bytes, bus: int, device_id: int, subsystem: int) -> int:
    o = _out(out)
    if o is None:
        return E_INVALID
    o.busIdLegacy = bus_id[-12:] if len(bus_id) > 15 else bus_id
    o.busId = bus_id
    o.domain = 0
    o.bus = bus
    o.device = 0
    o.pciDeviceId = device_id
    o.pciSubSystemId = subsystem
    return OK


def _inforom(dev) -> dict:
    """The profile's InfoROM versions ({} for a built-in profile: the H100 capture's are used)."""
    return (dev.gpu if dev.is_mig else dev).profile.get("inforom") or {}


def _event_mask(dev: SimDevice) -> int:
    mask = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypePState | pynvml.nvmlEventTypeClock
    if dev.ecc:
        mask |= pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
    return mask


class IdentityCalls(NvmlCalls):
    @device_call
    def nvmlDeviceGetName(self, dev, buf=None, size=None):
        return _put_str(buf, dev.name, size)

    @device_call
    def nvmlDeviceGetUUID(self, dev, buf=None, size=None):
        return _put_str(buf, dev.uuid, size)

    @device_call
    def nvmlDeviceGetSerial(self, dev, buf=None, size=None):
        return _put_str(buf, dev.serial.encode(), size)

    @device_call
    def nvmlDeviceGetBoardPartNumber(self, dev, buf=None, size=None):
        return _put_str(buf, dev.board_part_number.encode(), size)

    @device_call
    def nvmlDeviceGetVbiosVersion(self, dev, buf=None, size=None):
        return _put_str(buf, dev.vbios.encode(), size)

    @device_call
    def nvmlDeviceGetInforomImageVersion(self, dev, buf=None, size=None):
        # An imported capture's "Inforom Version / Image Version"; else the H100 capture's.
        image = _inforom(dev).get("image", "G520.0200.00.05")
        return E_NS if image is None else _put_str(buf, image.encode(), size)

    @device_call
    def nvmlDeviceGetInforomVersion(self, dev, obj=None, buf=None, size=None):
        # NVML_INFOROM_OEM / ECC / POWER; the H100 capture: OEM 2.1, ECC 7.16, Power N/A.
        key = {pynvml.NVML_INFOROM_OEM: "oem", pynvml.NVML_INFOROM_ECC: "ecc", pynvml.NVML_INFOROM_POWER: "power"}
        name = key.get(_int(obj))
        if name is None:
            return E_INVALID
        gpu = dev.gpu if dev.is_mig else dev
        # Cards without ECC have no ECC object ("ECC Object: N/A" on the GeForce captures).
        value = _inforom(dev).get(name, {"oem": "2.1", "ecc": "7.16" if gpu.ecc else None, "power": None}[name])
        return E_NS if value is None else _put_str(buf, value.encode(), size)

    @device_call
    def nvmlDeviceGetMinorNumber(self, dev, out=None):
        return self._put(out, (dev.gpu if dev.is_mig else dev).minor)

    @device_call
    def nvmlDeviceGetIndex(self, dev, out=None):
        return self._put(out, dev.index)

    @device_call
    def nvmlDeviceGetBrand(self, dev, out=None):
        gpu = dev.gpu if dev.is_mig else dev
        brand = pynvml.NVML_BRAND_GEFORCE if gpu.profile.get("brand") == "GeForce" else pynvml.NVML_BRAND_NVIDIA
        return self._put(out, brand)

    @device_call
    def nvmlDeviceGetArchitecture(self, dev, out=None):
        return self._put(out, (dev.gpu if dev.is_mig else dev).arch)

    @device_call
    def nvmlDeviceGetCudaComputeCapability(self, dev, major=None, minor=None):
        from gpuagent.sim.machine import COMPUTE_CAPABILITY

        gpu = dev.gpu if dev.is_mig else dev
        cc = COMPUTE_CAPABILITY.get(gpu.profile["architecture"], (8, 0))
        if self._put(major, cc[0]) != OK:
            return E_INVALID
        return self._put(minor, cc[1])

    @device_call
    def nvmlDeviceGetPciInfo_v3(self, dev, out=None):
        gpu = dev.gpu if dev.is_mig else dev
        return _fill_pci(out, gpu.bus_id, gpu.pci_bus, gpu.pci_device_id, gpu.pci_subsystem_id)

    @device_call
    def nvmlDeviceGetDisplayMode(self, dev, out=None):
        return self._put(out, 0)

    @device_call
    def nvmlDeviceGetDisplayActive(self, dev, out=None):
        return self._put(out, 0)

    @device_call
    def nvmlDeviceGetPersistenceMode(self, dev, out=None):
        # An imported capture's "Persistence Mode" (N/A on Windows: NOT_SUPPORTED); else enabled.
        mode = (dev.gpu if dev.is_mig else dev).profile.get("persistence_mode", True)
        return E_NS if mode is None else self._put(out, 1 if mode else 0)

    @device_call
    def nvmlDeviceGetComputeMode(self, dev, out=None):
        return self._put(out, pynvml.NVML_COMPUTEMODE_DEFAULT)

    @device_call
    def nvmlDeviceGetMultiGpuBoard(self, dev, out=None):
        return self._put(out, 0)

    @device_call
    def nvmlDeviceGetBoardId(self, dev, out=None):
        # An imported capture's "Board ID" on the first GPU of its SPEC item; the others (and
        # built-in profiles) derive one a board apart, as their UUIDs are derived.
        stated = dev.profile.get("board_id")
        if stated is not None:
            return self._put(out, int(stated) + dev.local * 0x100)
        return self._put(out, 0x100 + dev.index * 0x100)

    @device_call
    def nvmlDeviceGetNumaNodeId(self, dev, out=None):
        return self._put(out, dev.numa)

    @device_call
    def nvmlDeviceGetSupportedEventTypes(self, dev, out=None):
        return self._put(out, _event_mask(dev))
