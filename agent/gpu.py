"""One GPU as collectors see it: identity tags, cached static facts, guarded NVML calls."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pynvml

log = logging.getLogger("gpuagent.gpu")

ARCH_NAMES = {
    pynvml.NVML_DEVICE_ARCH_KEPLER: "Kepler",
    pynvml.NVML_DEVICE_ARCH_MAXWELL: "Maxwell",
    pynvml.NVML_DEVICE_ARCH_PASCAL: "Pascal",
    pynvml.NVML_DEVICE_ARCH_VOLTA: "Volta",
    pynvml.NVML_DEVICE_ARCH_TURING: "Turing",
    pynvml.NVML_DEVICE_ARCH_AMPERE: "Ampere",
    pynvml.NVML_DEVICE_ARCH_ADA: "Ada Lovelace",
    pynvml.NVML_DEVICE_ARCH_HOPPER: "Hopper",
    pynvml.NVML_DEVICE_ARCH_BLACKWELL: "Blackwell",
}

# Return codes that mean "this card or driver does not offer the reading":
# the reading becomes a missing field, never an error.
MISSING_CODES = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_NOT_FOUND,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    }
)


_UNSET = object()


class GpuLost(Exception):
    """The GPU answered NVML_ERROR_GPU_IS_LOST; it is skipped from now on."""

    def __init__(self, gpu: Gpu):
        super().__init__(f"GPU {gpu.index} ({gpu.uuid}) is lost")
        self.gpu = gpu


def as_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Gpu:
    """A GPU on this machine (real or simulated; nothing here knows which)."""

    def __init__(self, index: int, handle: Any):
        self.index = index
        self.handle = handle
        self.lost = False
        self.lost_reason = ""
        self._static: dict[str, Any] = {}
        self._missing_logged: set[str] = set()
        # (function, args) the card refused: see gpuagent.nvml_read.poll.
        self.refused_calls: set[tuple[Any, tuple]] = set()
        self.uuid = as_str(pynvml.nvmlDeviceGetUUID(handle))
        self.name = as_str(pynvml.nvmlDeviceGetName(handle))
        self.pci_bus_id = as_str(pynvml.nvmlDeviceGetPciInfo_v3(handle).busId)
        arch = self.query(pynvml.nvmlDeviceGetArchitecture)
        self.arch = ARCH_NAMES.get(arch, "unknown") if arch is not None else "unknown"
        self.tags: dict[str, str] = {
            "gpu": str(index),
            "uuid": self.uuid,
            "model": self.name,
            "pci_bus_id": self.pci_bus_id,
            "arch": self.arch,
        }

    @classmethod
    def _lost_at_start(cls, index: int, reason: str) -> Gpu:
        """A GPU that NVML lists but that is already lost: kept so it is reported, never read."""
        gpu = cls.__new__(cls)
        gpu.index, gpu.handle = index, None
        gpu.lost, gpu.lost_reason = True, reason
        gpu._static, gpu._missing_logged = {}, set()
        gpu.refused_calls = set()
        gpu.uuid = gpu.name = gpu.pci_bus_id = gpu.arch = "unknown"
        gpu.tags = {"gpu": str(index), "uuid": "unknown", "model": "unknown", "pci_bus_id": "unknown", "arch": "unknown"}
        log.error("GPU %d is lost: %s; skipping it", index, reason)
        return gpu

    def __repr__(self) -> str:
        return f"<Gpu {self.index} {self.name} {self.pci_bus_id}{' LOST' if self.lost else ''}>"

    def query(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call ``fn(handle, *args)``; None where the card does not support it.

        A lost GPU raises GpuLost (and stays lost); any other NVML error
        propagates and is counted as the collector's error.
        """
        if self.lost:
            raise GpuLost(self)
        try:
            return fn(self.handle, *args)
        except pynvml.NVMLError as exc:
            code = exc.value
            if code in MISSING_CODES:
                key = getattr(fn, "__name__", repr(fn))
                if key not in self._missing_logged:
                    self._missing_logged.add(key)
                    log.debug("GPU %d: %s unavailable (%s); leaving it out", self.index, key, exc)
                return None
            if code == pynvml.NVML_ERROR_GPU_IS_LOST:
                self.mark_lost(str(exc))
                raise GpuLost(self) from exc
            raise

    def static(self, key: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``query`` once and cache: for facts that never change (limits, bus width, L2 size)."""
        value = self._static.get(key, _UNSET)
        if value is _UNSET:
            value = self._static[key] = self.query(fn, *args)
        return value

    def remember(self, key: str, compute: Callable[[], Any]) -> Any:
        """Cache any derived static value under ``key``.

        No lock: dict reads and writes are atomic, and two collectors racing on
        a first read both compute the same fact; this runs several times per GPU
        per cycle.
        """
        value = self._static.get(key, _UNSET)
        if value is _UNSET:
            value = self._static[key] = compute()
        return value

    def mark_lost(self, reason: str) -> None:
        if not self.lost:
            self.lost = True
            self.lost_reason = reason
            log.error("GPU %d (%s, %s) is lost: %s; skipping it from now on", self.index, self.name, self.uuid, reason)

    def try_recover(self) -> bool:
        """A lost GPU that answers again (after a reset) is taken back; True when it is live.

        The GPU is looked up afresh (by UUID when known, else by index) and must be the same GPU;
        it then gets a new handle and empty caches (a reset may change what it supports), keeping
        this object so every collector holding it sees it come back.
        """
        if not self.lost:
            return True
        try:
            if self.uuid != "unknown":
                handle = pynvml.nvmlDeviceGetHandleByUUID(self.uuid.encode())
            else:
                handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            fresh = Gpu(self.index, handle)
        except pynvml.NVMLError:
            return False
        if self.uuid not in ("unknown", fresh.uuid):
            return False
        self.__dict__.update(fresh.__dict__)
        log.warning("GPU %d (%s, %s) answers again; reading it again", self.index, self.name, self.uuid)
        return True
