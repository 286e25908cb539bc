"""Opening NVML: the real libnvidia-ml, or the simulator installed in its place."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pynvml

from gpuagent.errors import NvmlUnavailable
from gpuagent.gpus.gpu import Gpu, NvmlErrors, UnavailableGpu, as_str, error_name, lost_at_start

log = logging.getLogger("gpuagent.gpus.nvml")

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
    # GPUs NVML lists but that could not be opened (handle or identity refused): reported, never read.
    unavailable: list[UnavailableGpu] = field(default_factory=list)
    # Every NVML refusal of this session, by collector, call and code (see gpuagent.gpus.gpu).
    errors: NvmlErrors = field(default_factory=NvmlErrors)

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
            raise NvmlUnavailable(f"the simulated NVML refused nvmlInit: {exc}") from None
        raise NvmlUnavailable(f"no NVIDIA driver found (NVML: {exc}); {NO_DRIVER_HINT}") from None
    except OSError as exc:  # a broken libnvidia-ml that ctypes cannot load
        raise NvmlUnavailable(f"no NVIDIA driver found ({exc}); {NO_DRIVER_HINT}") from None
    errors = NvmlErrors()
    gpus, unavailable = open_gpus(errors)
    session = NvmlSession(
        gpus=gpus,
        simulated=bool(simulate),
        machine=machine,
        spec=simulate,
        unavailable=unavailable,
        errors=errors,
    )
    session.driver_version = _optional(errors, pynvml.nvmlSystemGetDriverVersion, as_str)
    session.nvml_version = _optional(errors, pynvml.nvmlSystemGetNVMLVersion, as_str)
    session.cuda_driver_version = _optional(errors, pynvml.nvmlSystemGetCudaDriverVersion_v2)
    return session


def _optional(errors: NvmlErrors, fn, convert=lambda v: v):
    """A system fact, or None when NVML refuses it (counted like every refusal; never fatal)."""
    try:
        return convert(fn())
    except pynvml.NVMLError as exc:
        errors.add(fn.__name__, exc.value, None)
        log.info("%s answered %s; shown as n/a", fn.__name__, error_name(exc.value))
        return None


def open_gpus(errors: NvmlErrors | None = None) -> tuple[list[Gpu], list[UnavailableGpu]]:
    """Every GPU NVML lists: opened, lost at start, or unavailable (its handle or identity refused).

    One GPU that cannot be opened never costs the others: it is logged, with the call and the
    code, counted, and reported (the `gpuagent` measurement, `inspect`) while the others run.
    """
    errors = errors if errors is not None else NvmlErrors()
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML cannot count the GPUs (nvmlDeviceGetCount: {exc})") from None
    gpus: list[Gpu] = []
    unavailable: list[UnavailableGpu] = []
    for index in range(count):
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(Gpu(index, handle, errors=errors))
            continue
        except pynvml.NVMLError_GpuIsLost as exc:
            gpus.append(lost_at_start(index, str(exc), errors=errors))
            continue
        except pynvml.NVMLError:
            pass
        gpu, call, code = _unavailable(index)
        errors.add(call, code, index)
        log.error("GPU %d cannot be opened (%s); reporting it as unavailable, the others run", index, gpu.reason)
        unavailable.append(gpu)
    return gpus, unavailable


# The calls that open a GPU, in order: any of them refused makes the GPU unavailable.
IDENTITY_CALLS = (
    ("uuid", "nvmlDeviceGetUUID", lambda h: as_str(pynvml.nvmlDeviceGetUUID(h))),
    ("name", "nvmlDeviceGetName", lambda h: as_str(pynvml.nvmlDeviceGetName(h))),
    ("pci_bus_id", "nvmlDeviceGetPciInfo", lambda h: as_str(pynvml.nvmlDeviceGetPciInfo_v3(h).busId)),
)


def _unavailable(index: int) -> tuple[UnavailableGpu, str, int]:
    """What is known of a GPU that cannot be opened, and the first call that refused (name, code)."""
    gpu = UnavailableGpu(index, reason="")
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError as exc:
        gpu.reason = f"nvmlDeviceGetHandleByIndex: {error_name(exc.value)} ({exc})"
        return gpu, "nvmlDeviceGetHandleByIndex", exc.value
    first: tuple[str, int] | None = None
    for attr, call, read in IDENTITY_CALLS:
        try:
            setattr(gpu, attr, read(handle))
        except pynvml.NVMLError as exc:
            if first is None:
                first = (call, exc.value)
                gpu.reason = f"{call}: {error_name(exc.value)} ({exc})"
    if first is None:  # it answered this time: still reported, as the first try failed
        first = ("identity", pynvml.NVML_ERROR_UNKNOWN)
        gpu.reason = "identity: the GPU's identity could not be read when the agent started"
    return gpu, *first
