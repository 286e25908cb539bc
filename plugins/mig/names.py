"""MIG device profile names as ``nvidia-smi -L`` prints them, read from NVML's profile tables.

``nvidia-smi -L`` names a MIG device by its GPU instance profile (``3g.40gb``, H200
``1g.18gb``) and, for a compute instance smaller than its GPU instance, by the compute
instance profile (``1c.3g.71gb``). Those names are NVML's own (the ``name`` of
nvmlGpuInstanceProfileInfo_v2 / nvmlComputeInstanceProfileInfo_v2, "MIG 1c.3g.71gb");
rounding the memory size does not give them (H200: 1g.16gb where NVML says 1g.18gb).

Two ways, the same answer:

- with privileges: the device's GPU instance (nvmlDeviceGetGpuInstanceById) and compute
  instance give their profile ids; the compute instance profile table gives the name;
- without (nvml.h: GetGpuInstances / ...ById "Requires privileged user"): the MIG device
  handle's own attributes (nvmlDeviceGetAttributes_v2: slices, memory) pick the matching
  entry of the GPU instance profile table, which any user may read; a smaller compute
  instance is prefixed "Nc." as nvidia-smi does.

The memory-rounding formula is the last resort, for drivers without profile names.
"""

from __future__ import annotations

import math
from typing import Any

import pynvml

from gpuagent.gpus.gpu import Gpu, GpuLost, as_str


def _on(fn):
    """``fn`` on another handle (MIG device, GPU/compute instance) through ``gpu.query``."""

    def call(_parent_handle: Any, handle: Any, *args: Any) -> Any:
        return fn(handle, *args)

    call.__name__ = getattr(fn, "__name__", "nvml_call")
    return call


def _ask(gpu: Gpu, fn, *args: Any) -> Any:
    """``gpu.query``, with any refusal (NO_PERMISSION, NOT_FOUND ...) as None; a lost GPU still raises."""
    try:
        return gpu.query(fn, *args)
    except GpuLost:
        raise
    except pynvml.NVMLError:
        return None


def _strip(name: Any) -> str | None:
    text = as_str(name).strip() if name is not None else ""
    return text.removeprefix("MIG ").strip() or None


def gpu_instance_profiles(gpu: Gpu) -> list[Any]:
    """The GPU's GPU instance profile table (one entry per NVML_GPU_INSTANCE_PROFILE_* it has)."""

    def read() -> list[Any]:
        table = []
        for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            info = _ask(gpu, pynvml.nvmlDeviceGetGpuInstanceProfileInfo, index)
            if info is not None:
                table.append(info)
        return table

    return gpu.remember("mig_gi_profile_table", read)


def rounded_name(attrs: Any) -> str | None:
    """The memory-rounding name (``3g.40gb``, ``1c.3g.40gb``): only where NVML gives no table."""
    gi_slices = int(attrs.gpuInstanceSliceCount)
    ci_slices = int(attrs.computeInstanceSliceCount)
    memory_mb = int(attrs.memorySizeMB)
    if not gi_slices or not memory_mb:
        return None
    name = f"{gi_slices}g.{math.ceil(memory_mb / 1024)}gb"
    return name if ci_slices in (0, gi_slices) else f"{ci_slices}c.{name}"


def _from_instances(gpu: Gpu, gi_id: int, ci_id: int | None) -> str | None:
    """Privileged: the instances' profile ids, named by the profile tables."""
    instance = _ask(gpu, pynvml.nvmlDeviceGetGpuInstanceById, gi_id)
    if instance is None:
        return None
    gi_info = _ask(gpu, _on(pynvml.nvmlGpuInstanceGetInfo), instance)
    if gi_info is None:
        return None
    gi_name = next(
        (_strip(p.name) for p in gpu_instance_profiles(gpu) if int(p.id) == int(gi_info.profileId)),
        None,
    )
    if ci_id is None:
        return gi_name
    ci = _ask(gpu, _on(pynvml.nvmlGpuInstanceGetComputeInstanceById), instance, ci_id)
    ci_info = _ask(gpu, _on(pynvml.nvmlComputeInstanceGetInfo), ci) if ci is not None else None
    if ci_info is None:
        return gi_name
    # The compute instance table is indexed by NVML_COMPUTE_INSTANCE_PROFILE_*; each entry has its id.
    for index in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        info = _ask(
            gpu,
            _on(pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo),
            instance,
            index,
            pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
        )
        if info is not None and int(info.id) == int(ci_info.profileId):
            return _strip(info.name) or gi_name
    return gi_name


def _from_attributes(gpu: Gpu, attrs: Any) -> str | None:
    """Unprivileged: the GPU instance profile whose slices and memory the MIG device has."""
    gi_slices = int(attrs.gpuInstanceSliceCount)
    ci_slices = int(attrs.computeInstanceSliceCount)
    memory = int(attrs.memorySizeMB)
    candidates = [p for p in gpu_instance_profiles(gpu) if int(p.sliceCount) == gi_slices]
    if not candidates or not memory:
        return None
    # Same slices and memory; where two share both (1g.10gb, 1g.10gb+me), the engine counts decide.
    best = min(
        candidates,
        key=lambda p: (
            abs(int(p.memorySizeMB) - memory),
            int(p.jpegCount) != int(attrs.sharedJpegCount),
            int(p.ofaCount) != int(attrs.sharedOfaCount),
        ),
    )
    name = _strip(best.name)
    if not name:
        return None
    return name if ci_slices in (0, gi_slices) else f"{ci_slices}c.{name}"


def mig_profile_name(
    gpu: Gpu,
    handle: Any,
    attrs: Any = None,
    gi_id: int | None = None,
    ci_id: int | None = None,
) -> str | None:
    """The ``nvidia-smi -L`` name of the MIG device ``handle`` of ``gpu`` (None if NVML tells nothing).

    ``attrs`` (nvmlDeviceGetAttributes_v2 of the handle), ``gi_id`` and ``ci_id`` are read here
    when the caller has not read them already.
    """
    if gi_id is None:
        gi_id = _ask(gpu, _on(pynvml.nvmlDeviceGetGpuInstanceId), handle)
    if ci_id is None:
        ci_id = _ask(gpu, _on(pynvml.nvmlDeviceGetComputeInstanceId), handle)
    name = _from_instances(gpu, gi_id, ci_id) if gi_id is not None else None
    if name:
        return name
    if attrs is None:
        attrs = _ask(gpu, _on(pynvml.nvmlDeviceGetAttributes_v2), handle)
    if attrs is None:
        return None
    return _from_attributes(gpu, attrs) or rounded_name(attrs)
