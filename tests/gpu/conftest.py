"""Real-GPU tests (`pytest -m gpu`): each skips, with the reason, where there is no NVIDIA driver."""

from __future__ import annotations

import pytest

NO_DRIVER_HINT = "run `pytest -m gpu` on a machine with an NVIDIA GPU (scripts/device-check.sh does)"


def real_gpu_count() -> tuple[int, str | None]:
    """(GPUs the real libnvidia-ml reports, None) or (0, why there is none)."""
    import pynvml

    from gpuagent import sim

    if sim.installed() is not None:  # a simulator left installed would answer instead of the driver
        sim.uninstall()
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError) as exc:
        return 0, f"no NVIDIA driver here (NVML: {exc}); {NO_DRIVER_HINT}"
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    return (count, None) if count else (0, "NVML reports no GPU on this machine")


@pytest.fixture(scope="module")
def real_gpus() -> int:
    """The number of real GPUs; skips the test (with the reason) when there is no driver or no GPU."""
    count, reason = real_gpu_count()
    if reason:
        pytest.skip(reason)
    return count


@pytest.fixture(scope="module")
def real_session(real_gpus):
    """An open NvmlSession on the real driver (never the simulator), closed after the module."""
    from gpuagent.gpus.nvml import open_nvml

    session = open_nvml(None)
    yield session
    session.close()
