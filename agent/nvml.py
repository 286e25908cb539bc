"""Opening NVML: the real libnvidia-ml, or the simulator installed in its place."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pynvml

from gpuagent.errors import NvmlUnavailable
from gpuagent.gpu import Gpu, as_str

log = logging.getLogger("gpuagent.nvml")

NO_DRIVER_HINT = "run with --simulate SPEC (e.g. --simulate l40s:2) to use a simulated fleet"


@dataclass
class NvmlSession:
    gpus: list[Gpu]
    simulated: bool
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_driver_version: int | None = None
    machine: Any = None  # the simulated machine, when simulated
    spec: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
        if self.simulated:
            from gpuagent import sim

            sim.uninstall()


def open_nvml(simulate: str | None = None, seed: int = 0) -> NvmlSession:
    """Initialise NVML (simulated when ``simulate`` is a fleet SPEC) and enumerate GPUs."""
    machine = None
    if simulate:
        from gpuagent import sim

        machine = sim.install(simulate, seed=seed)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        if simulate:
            raise
        raise NvmlUnavailable(f"no NVIDIA driver found (NVML: {exc}); {NO_DRIVER_HINT}") from None
    except OSError as exc:  # a broken libnvidia-ml that ctypes cannot load
        raise NvmlUnavailable(f"no NVIDIA driver found ({exc}); {NO_DRIVER_HINT}") from None
    gpus: list[Gpu] = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        try:
            gpus.append(Gpu(index, pynvml.nvmlDeviceGetHandleByIndex(index)))
        except pynvml.NVMLError_GpuIsLost as exc:
            gpus.append(Gpu._lost_at_start(index, str(exc)))
    session = NvmlSession(gpus=gpus, simulated=bool(simulate), machine=machine, spec=simulate)
    session.driver_version = _optional(lambda: as_str(pynvml.nvmlSystemGetDriverVersion()))
    session.nvml_version = _optional(lambda: as_str(pynvml.nvmlSystemGetNVMLVersion()))
    session.cuda_driver_version = _optional(pynvml.nvmlSystemGetCudaDriverVersion_v2)
    return session


def _optional(fn):
    try:
        return fn()
    except pynvml.NVMLError:
        return None
