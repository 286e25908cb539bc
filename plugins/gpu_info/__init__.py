"""gpu_info collector: what each GPU is and runs (driver, CUDA, VBIOS, serial, board part number,
InfoROM versions, persistence mode) as one gpu_info point, the way DCGM labels its metrics with
DRIVER_VERSION and its identity fields.

The record changes only when someone flashes a VBIOS, swaps a board or reloads the driver, so it
is read every 5 minutes (an interval of its own) and sent at start, when a value changes, and
every ``resend_every`` (1 h) so that any range of an hour holds it. The Prometheus sink keeps its
series on /metrics between sends (every scrape has it).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pynvml

import gpuagent
from gpuagent.plugins.gpu_info.schema import SCHEMA
from gpuagent.schema.measurements import GPU_INFO

MEASUREMENT = GPU_INFO

# field -> (NVML call, its arguments): strings the card may not offer (then left out).
STRING_CALLS: dict[str, tuple[Callable, tuple]] = {
    "vbios_version": (pynvml.nvmlDeviceGetVbiosVersion, ()),
    "serial": (pynvml.nvmlDeviceGetSerial, ()),
    "board_part_number": (pynvml.nvmlDeviceGetBoardPartNumber, ()),
    "inforom_image_version": (pynvml.nvmlDeviceGetInforomImageVersion, ()),
    "inforom_oem_version": (pynvml.nvmlDeviceGetInforomVersion, (pynvml.NVML_INFOROM_OEM,)),
    "inforom_ecc_version": (pynvml.nvmlDeviceGetInforomVersion, (pynvml.NVML_INFOROM_ECC,)),
    "inforom_power_version": (pynvml.nvmlDeviceGetInforomVersion, (pynvml.NVML_INFOROM_POWER,)),
}


class GpuInfoConfig(gpuagent.CollectorConfig):
    # A record unchanged for this long is sent again (so any range this long holds one).
    resend_every: gpuagent.Duration = 3600.0


def _text(value) -> str | None:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return value.strip() or None if isinstance(value, str) else None


def cuda_text(version: int | None) -> str | None:
    """NVML's 13010 as "13.1", as nvidia-smi prints it."""
    return f"{version // 1000}.{version % 1000 // 10}" if version else None


def _system(session, attr: str, fn: Callable):
    """The session's value (read at start), else the system call (a session built without it)."""
    value = getattr(session, attr, None)
    if value is not None:
        return value
    try:
        return fn()
    except pynvml.NVMLError:
        return None


def read_gpu(gpu: gpuagent.Gpu, session) -> dict[str, str | bool | None]:
    """One GPU's identity record; the driver's versions come from the NVML session (read at start)."""
    fields: dict[str, str | bool | None] = {
        "driver_version": _text(_system(session, "driver_version", pynvml.nvmlSystemGetDriverVersion)),
        "nvml_version": _text(_system(session, "nvml_version", pynvml.nvmlSystemGetNVMLVersion)),
        "cuda_driver_version": cuda_text(
            _system(session, "cuda_driver_version", pynvml.nvmlSystemGetCudaDriverVersion_v2)
        ),
    }
    for name, (fn, args) in STRING_CALLS.items():
        fields[name] = _text(gpu.query(fn, *args))
    mode = gpu.query(pynvml.nvmlDeviceGetPersistenceMode)
    fields["persistence_mode"] = None if mode is None else bool(mode)
    return fields


class GpuInfoCollector(gpuagent.Collector):
    name = "gpu_info"
    schema = SCHEMA
    Config = GpuInfoConfig
    default_interval = 300.0
    requires_gpus = True
    clock: Callable[[], float] = staticmethod(time.monotonic)

    def __init__(self, config, context):
        super().__init__(config, context)
        self._sent: dict[str, tuple[dict, float]] = {}  # uuid -> (record, when sent)

    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: gpuagent.Gpu) -> None:
        fields = read_gpu(gpu, self.context.nvml)
        # The batch's own time where it has one (`sim fleet` backfills), else the monotonic clock.
        now = acc.time_ns / 1e9 if getattr(acc, "time_ns", None) else self.clock()
        last = self._sent.get(gpu.uuid)
        if last is not None and last[0] == fields and now - last[1] < self.config.resend_every:
            return
        self._sent[gpu.uuid] = (fields, now)
        acc.add_fields(MEASUREMENT, fields, tags=gpu.tags)


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(GpuInfoCollector)
