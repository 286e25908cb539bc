"""Where the sweep runs: NumPy on the CPU, CuPy or PyTorch on a GPU, or a model of a simulated GPU.

NumPy, CuPy and PyTorch are optional: each is imported only when its backend
is built, and a missing one is an AgentError naming what to install.

Every backend reads the working set many times per timed sample (one call or
one kernel launch for the lot) so that call and launch overheads vanish even
for a set that is read in a microsecond.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuagent.errors import AgentError

CPU_TARGET_BYTES = 48 * (1 << 20)  # per sample: ~1 ms from cache, ~3 ms from DRAM on a server core
GPU_TARGET_BYTES = 4 << 30  # per sample: ~0.4 ms at 10 TB/s (L2), ~1 ms at 4.8 TB/s (H200 HBM3e)


# --- CPU ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuCache:
    level: int
    type: str  # "Data" or "Unified"
    bytes: int  # one instance (what one core sees), like lscpu's ONE-SIZE


def parse_size(text: str) -> int:
    """'512K', '8192K', '8M', '1 MiB' (sysfs and lscpu style, binary units) -> bytes."""
    t = text.strip().upper().replace(" ", "").removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


def cpu_caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> list[CpuCache]:
    """Data and unified caches of CPU 0, smallest level first (instruction caches left out)."""
    caches = []
    for index in sorted(root.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            if kind == "Instruction":
                continue
            caches.append(
                CpuCache(
                    int((index / "level").read_text()),
                    kind,
                    parse_size((index / "size").read_text()),
                )
            )
        except (OSError, ValueError):
            continue
    return sorted(caches, key=lambda c: c.level)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "cpu"


def _numpy():
    try:
        import numpy
    except ImportError:
        raise AgentError(
            "the probe needs NumPy: install gpuagent's probe extra (pip install '.[probe]' in its checkout)"
        ) from None
    return numpy


class NumpyBackend:
    """One CPU core reading the set with a NumPy reduction.

    ``bitwise_or.reduce`` over uint64 is vectorised and does almost no work per
    byte, so it runs at the speed the cache or DRAM delivers (a float sum is
    compute-bound inside L2 and would hide the L2 knee). The set is repeated
    with a zero-stride 2-D view, reduced along rows: one NumPy call reads it
    ``passes`` times.
    """

    name = "numpy-cpu"

    def __init__(self, target_bytes: int = CPU_TARGET_BYTES):
        self.np = _numpy()
        self.target_bytes = target_bytes
        self.device = f"{cpu_model()} (1 core)"
        self._buf: Any = None  # the backend's array, allocated by prepare()

    def prepare(self, max_bytes: int) -> None:
        np = self.np
        # Touched (filled), so no page fault lands in a timed sample.
        self._buf = np.full(max_bytes // 8 + 1, 0x0101010101010101, dtype=np.uint64)

    def read_gbps(self, nbytes: int) -> float:
        np = self.np
        data = self._buf[: nbytes // 8]
        passes = max(2, math.ceil(self.target_bytes / nbytes))
        view = np.lib.stride_tricks.as_strided(data, shape=(passes, data.size), strides=(0, 8), writeable=False)
        out = np.empty(passes, dtype=np.uint64)
        np.bitwise_or.reduce(view[:1], axis=1, out=out[:1])  # warm: the set is in cache (if it fits)
        t0 = time.perf_counter_ns()
        np.bitwise_or.reduce(view, axis=1, out=out)
        elapsed = time.perf_counter_ns() - t0
        return passes * data.nbytes / max(elapsed, 1)  # bytes/ns == GB/s

    def close(self) -> None:
        self._buf = None


# --- GPU ---------------------------------------------------------------------------------------

# Each thread sums float4s with ld.global.cg (cache in L2, not L1): with L1 in play, a set
# smaller than the sum of every SM's L1 (33 MB on an H100) would be measured at L1 speed.
_CUDA_KERNEL = r"""
extern "C" __global__ void stream_read(const float4* __restrict__ a, long long n4, int passes, float* out) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    long long stride = (long long)blockDim.x * gridDim.x;
    long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (int p = 0; p < passes; ++p) {
        #pragma unroll 4
        for (long long i = first; i < n4; i += stride) {
            float4 v = __ldcg(a + i);
            acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
        }
    }
    float s = acc.x + acc.y + acc.z + acc.w;
    if (s == -1.0f) out[0] = s;  // never true (the buffer holds zeros): keeps the loads alive
}
"""


class CupyBackend:
    name = "cupy"

    def __init__(self, cuda_index: int, target_bytes: int = GPU_TARGET_BYTES):
        import cupy

        self.cp = cupy
        self.target_bytes = target_bytes
        self.dev = cupy.cuda.Device(cuda_index)
        self.dev.use()
        attrs = self.dev.attributes
        self.l2_bytes = int(attrs.get("L2CacheSize", 0)) or None
        self.sm_count = int(attrs.get("MultiProcessorCount", 80))
        props = cupy.cuda.runtime.getDeviceProperties(cuda_index)
        self.device = f"{props['name'].decode()} (cuda:{cuda_index})"
        self._kernel = cupy.RawKernel(_CUDA_KERNEL, "stream_read")
        if hasattr(self._kernel, "compile"):
            self._kernel.compile()  # now, so that a missing NVRTC falls back to PyTorch (gpu_backend)
        self._buf: Any = None  # the backend's array, allocated by prepare()
        self._out = cupy.zeros(1, dtype=cupy.float32)

    def prepare(self, max_bytes: int) -> None:
        self._buf = self.cp.zeros(max_bytes // 4 + 4, dtype=self.cp.float32)

    def read_gbps(self, nbytes: int) -> float:
        cp = self.cp
        n4 = nbytes // 16
        passes = max(2, math.ceil(self.target_bytes / nbytes))
        threads = 256
        blocks = min(self.sm_count * 8, max(1, math.ceil(n4 / threads)))
        args = (self._buf, cp.int64(n4), cp.int32(1), self._out)
        self._kernel((blocks,), (threads,), args)  # warm: pulls the set into L2
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        self._kernel((blocks,), (threads,), (self._buf, cp.int64(n4), cp.int32(passes), self._out))
        end.record()
        end.synchronize()
        ms = cp.cuda.get_elapsed_time(start, end)
        return passes * n4 * 16 / (ms * 1e-3) / 1e9

    def close(self) -> None:
        self._buf = None
        self.cp.get_default_memory_pool().free_all_blocks()


class TorchBackend:
    """PyTorch has no portable custom kernel, so: a row sum over a zero-stride expanded view.

    One reduction launch reads the set ``passes`` times (each row is the whole
    set); sizes start at 1 MiB, above any one SM's L1.
    """

    name = "torch"

    def __init__(self, cuda_index: int, target_bytes: int = GPU_TARGET_BYTES):
        import torch

        self.torch = torch
        self.target_bytes = target_bytes
        self.dev = torch.device("cuda", cuda_index)
        torch.cuda.set_device(self.dev)  # events record on the current device's stream
        props = torch.cuda.get_device_properties(self.dev)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0)) or None
        self.device = f"{props.name} (cuda:{cuda_index})"
        self._buf: Any = None  # the backend's array, allocated by prepare()

    def prepare(self, max_bytes: int) -> None:
        self._buf = self.torch.zeros(max_bytes // 4 + 4, dtype=self.torch.float32, device=self.dev)

    def read_gbps(self, nbytes: int) -> float:
        torch = self.torch
        n = nbytes // 4
        passes = max(2, math.ceil(self.target_bytes / nbytes))
        data = self._buf[:n]
        data.expand(1, n).sum(dim=1)  # warm
        view = data.expand(passes, n)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        view.sum(dim=1)
        end.record()
        end.synchronize()
        return passes * n * 4 / (start.elapsed_time(end) * 1e-3) / 1e9

    def close(self) -> None:
        self._buf = None
        self.torch.cuda.empty_cache()


def cuda_index_for(pci_bus_id: str) -> int | None:
    """The CUDA ordinal of the GPU NVML knows by ``pci_bus_id`` (CUDA's default order is not NVML's)."""
    want = _norm_bus_id(pci_bus_id)
    try:
        import cupy

        for i in range(cupy.cuda.runtime.getDeviceCount()):
            if _norm_bus_id(cupy.cuda.Device(i).pci_bus_id) == want:
                return i
    except ImportError:
        pass
    except Exception:  # no usable CUDA runtime: the caller says so
        return None
    try:
        import torch

        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            if not hasattr(p, "pci_bus_id"):
                return None  # an older PyTorch: the caller falls back to the NVML index
            bus = f"{p.pci_domain_id:x}:{p.pci_bus_id:x}:{p.pci_device_id:x}.0"
            if _norm_bus_id(bus) == want:
                return i
    except ImportError:
        pass
    return None


def _norm_bus_id(bus: str) -> str:
    """'00000000:1B:00.0' (NVML), '0000:1b:00.0' (CUDA) -> '0:1b:00.0', comparable."""
    parts = bus.strip().lower().split(":")
    domain = int(parts[-3], 16) if len(parts) >= 3 else 0
    device, _, function = parts[-1].partition(".")
    return f"{domain:x}:{int(parts[-2], 16):x}:{int(device, 16):x}.{function or '0'}"


def gpu_backend(cuda_index: int, prefer: str | None = None):
    """CuPy if installed (its kernel bypasses L1), else PyTorch; AgentError when neither is."""
    errors = []
    for name, cls in (("cupy", CupyBackend), ("torch", TorchBackend)):
        if prefer and name != prefer:
            continue
        try:
            return cls(cuda_index)
        except ImportError:
            errors.append(f"{name} not installed")
        except Exception as exc:  # installed but no working CUDA (driver, NVRTC, …)
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
    raise AgentError(
        "no GPU backend for the probe (" + "; ".join(errors) + "): install CuPy (pip install cupy-cuda12x) "
        "or PyTorch, or run the CPU sweep with --cpu"
    )


# --- simulated GPU -----------------------------------------------------------------------------

# From the published figures in DESIGN.md: product-name fragment -> (L2 bytes, peak DRAM GB/s).
# L2 in MiB, as the CUDA driver and the simulator's profiles count it (an "L2 of 96 MB" is 96 MiB).
# Also the fallback for a real GPU's L2 size when the CUDA driver cannot be asked.
GPU_SPECS: tuple[tuple[str, int, float], ...] = (
    ("L40S", 96 << 20, 864.0),
    ("RTX 4090", 72 << 20, 1008.0),
    ("A100", 40 << 20, 2039.0),
    ("H100 PCIe", 50 << 20, 2039.0),
    ("H100", 50 << 20, 3352.0),
    ("H200", 60 << 20, 4800.0),
)


def spec_for(model: str) -> tuple[int, float] | None:
    for fragment, l2, dram in GPU_SPECS:
        if fragment.lower() in model.lower():
            return l2, dram
    return None


class SimulatedBackend:
    """A model of a GPU's curve for --simulate: L2-speed plateau, DRAM plateau, seeded noise.

    Not a measurement: it lets `probe l2 --send`, compare and inspect run on a
    simulated fleet. DRAM runs at 90% of the spec peak, L2 at 3x that (at
    least 5 TB/s), with a hit fraction 1 / (1 + (size / L2)^8) and 2% noise.
    """

    name = "simulated"
    target_bytes = 0

    def __init__(self, model: str, l2_bytes: int | None = None, dram_gbps: float | None = None, seed: int = 0):
        spec = spec_for(model) or (40 << 20, 2000.0)
        self.l2_bytes = l2_bytes or spec[0]
        self.dram_gbps = 0.9 * (dram_gbps or spec[1])
        self.l2_gbps = max(3 * self.dram_gbps, 5000.0)
        self.device = f"{model} (simulated)"
        self._rng = random.Random(seed)

    def prepare(self, max_bytes: int) -> None:
        pass

    def read_gbps(self, nbytes: int) -> float:
        hit = 1 / (1 + (nbytes / self.l2_bytes) ** 8)
        bw = 1 / (hit / self.l2_gbps + (1 - hit) / self.dram_gbps)
        return bw * math.exp(self._rng.gauss(0, 0.02))

    def close(self) -> None:
        pass
