"""The simulated node: its GPUs (with MIG devices and vGPU instances), clock and faults."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import threading
from collections import Counter
from importlib import resources
from typing import Any

import pynvml

from gpuagent.errors import AgentError
from gpuagent.sim.clock import ManualClock, MonotonicClock
from gpuagent.sim.faults import (
    Fault,
    ForceFault,
    LostFault,
    ProcFault,
    UnprivilegedFault,
    XidFault,
    error_code,
)
from gpuagent.sim.fleet import FleetItem, Topology, parse_spec
from gpuagent.sim.load import LoadModel, LoadState, check_scenario

NS = pynvml.NVML_ERROR_NOT_SUPPORTED

ARCH_CODES = {
    "Kepler": pynvml.NVML_DEVICE_ARCH_KEPLER,
    "Maxwell": pynvml.NVML_DEVICE_ARCH_MAXWELL,
    "Pascal": pynvml.NVML_DEVICE_ARCH_PASCAL,
    "Volta": pynvml.NVML_DEVICE_ARCH_VOLTA,
    "Turing": pynvml.NVML_DEVICE_ARCH_TURING,
    "Ampere": pynvml.NVML_DEVICE_ARCH_AMPERE,
    "Ada Lovelace": pynvml.NVML_DEVICE_ARCH_ADA,
    "Ada": pynvml.NVML_DEVICE_ARCH_ADA,
    "Hopper": pynvml.NVML_DEVICE_ARCH_HOPPER,
    "Blackwell": pynvml.NVML_DEVICE_ARCH_BLACKWELL,
}
COMPUTE_CAPABILITY = {
    "Ampere": (8, 0),
    "Ada Lovelace": (8, 9),
    "Ada": (8, 9),
    "Hopper": (9, 0),
    "Blackwell": (10, 0),
}
# Architectures whose captures show the five "Clocks Event Reasons Counters" with values, GeForce
# included: RTX 2080 SUPER (Turing, 595/610), RTX 3080 (Ampere, XML v13), RTX 4080 SUPER (Ada, 595),
# L40S, H100. Older XML schemas (v12) do not print the section, so Pascal and older stay without.
REASON_COUNTER_ARCHS = ("Turing", "Ampere", "Ada Lovelace", "Ada", "Hopper", "Blackwell")
VIRT_MODES = {
    "none": pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE,
    "passthrough": pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
    "vgpu": pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU,
    "host_vgpu": pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU,
    "host_vsga": pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VSGA,
}

# Calls a MIG device handle answers; everything else is NOT_SUPPORTED on it (as on hardware).
MIG_HANDLE_CALLS = frozenset(
    {
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetBAR1MemoryInfo",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
        "nvmlDeviceGetMPSComputeRunningProcesses_v3",
        "nvmlDeviceIsMigDeviceHandle",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        "nvmlDeviceGetAttributes_v2",
        "nvmlDeviceGetArchitecture",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetBrand",
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetMemoryErrorCounter",
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetMinorNumber",
    }
)

# Calls that only make sense with a feature; NOT_SUPPORTED on a card without it.
FAN_CALLS = (
    "nvmlDeviceGetFanSpeed",
    "nvmlDeviceGetFanSpeed_v2",
    "nvmlDeviceGetNumFans",
    "nvmlDeviceGetFanSpeedRPM",
    "nvmlDeviceGetTargetFanSpeed",
    "nvmlDeviceGetMinMaxFanSpeed",
    "nvmlDeviceGetFanControlPolicy_v2",
)
ECC_CALLS = (
    "nvmlDeviceGetEccMode",
    "nvmlDeviceGetDefaultEccMode",
    "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetMemoryErrorCounter",
    "nvmlDeviceGetDetailedEccErrors",
)
REMAP_CALLS = ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetRowRemapperHistogram")
RETIRED_CALLS = (
    "nvmlDeviceGetRetiredPages",
    "nvmlDeviceGetRetiredPages_v2",
    "nvmlDeviceGetRetiredPagesPendingStatus",
)
NVLINK_CALLS = (
    "nvmlDeviceGetNvLinkState",
    "nvmlDeviceGetNvLinkVersion",
    "nvmlDeviceGetNvLinkCapability",
    "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    "nvmlDeviceGetNvLinkRemoteDeviceType",
    "nvmlDeviceGetNvLinkErrorCounter",
    "nvmlDeviceGetNvLinkUtilizationCounter",
)
MIG_CALLS = (
    "nvmlDeviceGetMigMode",
    "nvmlDeviceGetMaxMigDeviceCount",
    "nvmlDeviceGetMigDeviceHandleByIndex",
    "nvmlDeviceGetGpuInstanceProfileInfo",
    "nvmlDeviceGetGpuInstanceProfileInfoV",
    "nvmlDeviceGetGpuInstances",
    "nvmlDeviceGetGpuInstanceById",
    "nvmlDeviceGetGpuInstanceRemainingCapacity",
    "nvmlGpmMigSampleGet",
)
HOST_VGPU_CALLS = (
    "nvmlDeviceGetHostVgpuMode",
    "nvmlDeviceGetActiveVgpus",
    "nvmlDeviceGetVgpuUtilization",
    "nvmlDeviceGetSupportedVgpus",
    "nvmlDeviceGetCreatableVgpus",
    "nvmlVgpuTypeGetMaxInstances",
)
GPM_CALLS = ("nvmlGpmSampleGet", "nvmlGpmMigSampleGet")
MIG_ON_UTILIZATION_CALLS = (
    "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization",
    "nvmlDeviceGetJpgUtilization",
    "nvmlDeviceGetOfaUtilization",
)


# C symbol names in slot order; each fake-library entry point takes a slot when defined.
CALL_SYMBOLS: list[str] = []
SYSTEM_SYMBOLS: set[str] = set()  # the calls without a device handle (fakelib's system_call)
_CALL_SLOTS: dict[str, int] = {}


def call_slot(name: str) -> int:
    """The index of C symbol ``name`` in the call-count lists (a new one the first time)."""
    slot = _CALL_SLOTS.get(name)
    if slot is None:
        slot = _CALL_SLOTS[name] = len(CALL_SYMBOLS)
        CALL_SYMBOLS.append(name)
    return slot


def _counter(counts: list[int]) -> Counter[str]:
    return Counter({CALL_SYMBOLS[i]: n for i, n in enumerate(counts) if n})


def _uuid(seed: int, *parts: Any, prefix: str = "GPU") -> str:
    h = hashlib.sha1(repr((seed,) + parts).encode()).hexdigest()
    return f"{prefix}-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _serial(profile: dict, local: int, index: int) -> str | None:
    """A GPU's serial: a capture's as stated (masked "0000000000000" too: a machine of masked
    cards shows the same mask on each) on its SPEC item's first GPU; the others, and a built-in
    profile's GPUs, count up from it with its width kept (leading zeros stay)."""
    serial = profile.get("serial")
    if not serial or not str(serial).isdigit() or set(str(serial)) == {"0"}:
        return serial
    text = str(serial)
    step = local if profile.get("captured") else index
    return f"{int(text) + step:0{len(text)}d}"


class _Handle:
    """A unique address standing in for an opaque NVML handle (kept alive by its owner)."""

    __slots__ = ("buffer", "addr")

    def __init__(self) -> None:
        self.buffer = ctypes.create_string_buffer(8)
        self.addr = ctypes.addressof(self.buffer)


@functools.cache
def privileged_calls() -> dict[str, Any]:
    """nvml.h's calls that need root/admin (nvml_privileged.json names the header version)."""
    text = resources.files("gpuagent.sim").joinpath("nvml_privileged.json").read_text()
    return json.loads(text)


# NVML_COMPUTE_INSTANCE_PROFILE_* by slice count (nvml.h; a compute instance profile's id is its index).
CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


class SimGpuInstance:
    def __init__(self, gpu: SimDevice, spec: dict, start: int):
        self.gpu = gpu
        self.id = int(spec["gi_id"])
        # The profile's id as NVML reports it (nvmlGpuInstanceInfo_t.profileId), not its index.
        self.profile_id = int(spec["profile_id"])
        table = (gpu.mig or {}).get("gpu_instance_profiles") or []
        self.table_entry = next((p for p in table if int(p["profile_id"]) == self.profile_id), None)
        self.profile_name = spec.get("profile") or (self.table_entry or {}).get("name", "")
        self.slices = int(
            spec.get("slices") or (self.table_entry or {}).get("slices") or int(self.profile_name[:1] or 1)
        )
        self.sm_count = int(spec.get("gi_sm_count") or (self.table_entry or {}).get("sm_count") or 0)
        self.start = start
        self.handle = _Handle()
        self.compute_instances: list[SimComputeInstance] = []


class SimComputeInstance:
    def __init__(self, gi: SimGpuInstance, ci_id: int, slices: int | None = None):
        self.gi = gi
        self.id = ci_id
        # A compute instance may use fewer slices than its GPU instance ("1c.3g.71gb").
        self.slices = int(slices or gi.slices)
        self.profile_id = CI_PROFILE_BY_SLICES.get(self.slices, 0)
        self.start = sum(c.slices for c in gi.compute_instances)
        self.handle = _Handle()


class SimMigDevice:
    """A MIG device (GPU instance + compute instance), with its own handle."""

    is_mig = True

    def __init__(self, gpu: SimDevice, n: int, spec: dict, gi: SimGpuInstance, ci: SimComputeInstance):
        self.gpu = gpu
        self.n = n
        self.spec = spec
        self.gi = gi
        self.ci = ci
        self.gi_id = gi.id
        self.ci_id = ci.id
        # As `nvidia-smi -L` names it: the GPU instance profile, prefixed "Nc." for a compute
        # instance smaller than its GPU instance (nvidia-smi mig -lcip: "MIG 1c.3g.40gb").
        gi_name = gi.profile_name
        self.profile = gi_name if ci.slices == gi.slices else f"{ci.slices}c.{gi_name}"
        self.name = f"{gpu.name.decode()} MIG {self.profile}".encode()
        self.uuid = _uuid(gpu.machine.seed, gpu.index, "mig", gi.id, ci.id, prefix="MIG").encode()
        self.sm_count = int(spec.get("sm_count", 0))
        self.memory_bytes = int(spec.get("memory_mib", 0)) << 20
        self.bar1_bytes = int(spec.get("bar1_mib", spec.get("memory_mib", 0))) << 20
        self.slices = gi.slices
        self.ci_slices = ci.slices
        self.share = 1.0 if n == 0 else 0.55 + 0.3 * ((n * 37) % 10) / 10  # busier first instance
        self.handle = _Handle()
        self.fixed: dict[str, int] = {}


class SimDevice:
    """One simulated physical GPU."""

    is_mig = False

    def __init__(self, machine: SimMachine, index: int, item: FleetItem, scenario: str | None):
        self.machine = machine
        self.index = index
        self.local = index - item.first_index
        p = self.profile = item.profile
        self.profile_name = item.name
        self.name = p["product_name"].encode()
        self.arch = ARCH_CODES.get(p["architecture"], pynvml.NVML_DEVICE_ARCH_UNKNOWN)
        # An imported capture's identity goes to the first GPU of its SPEC item; the others
        # (COUNT > 1) derive distinct ones, as every GPU of a built-in profile does.
        captured_uuid = p.get("uuid") if self.local == 0 else None
        self.uuid = (captured_uuid or _uuid(machine.seed, index, p["product_name"])).encode()
        self.serial = _serial(p, self.local, index)
        self.board_part_number = p.get("board_part_number")
        self.vbios = p.get("vbios_version")
        self.pci_device_id = int(str(p["pci_device_id"]), 16)
        self.pci_subsystem_id = int(str(p.get("pci_subsystem_id") or "0"), 16)
        slot = machine.topology.slots[index]
        self.numa = slot.numa
        self.pci_bus = slot.bus
        self.bus_id = f"00000000:{slot.bus:02X}:00.0".encode()
        captured_bus = p.get("pci_bus_id") if self.local == 0 else None
        if captured_bus and captured_bus.encode() not in machine.taken_bus_ids:
            self.bus_id = captured_bus.encode()
            self.pci_bus = int(captured_bus.split(":")[1], 16)
        machine.taken_bus_ids.add(self.bus_id)
        self.minor = index
        mem = p["memory"]
        self.total_bytes = int(mem["total_mib"]) << 20
        self.reserved_bytes = int(mem.get("reserved_mib", 0)) << 20
        self.bar1_bytes = int(mem.get("bar1_total_mib", 256)) << 20
        self.bus_width = mem.get("bus_width_bits")
        self.clocks = p["clocks_mhz"]
        self.power = p["power_w"]
        self.pcie = p["pcie"]
        self.ecc = p.get("ecc")
        self.nvlink = p.get("nvlink")
        self.mig = p.get("mig")
        self.mig_enabled = bool(self.mig and self.mig.get("enabled"))
        virt = p.get("virtualization") or {}
        self.virt_mode = VIRT_MODES.get(virt.get("mode", "none"), 0)
        self.host_vgpu = self.virt_mode == pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU
        self.host_vgpu_mode = (
            pynvml.NVML_HOST_VGPU_MODE_SRIOV
            if virt.get("host_vgpu_mode", "sriov") == "sriov"
            else pynvml.NVML_HOST_VGPU_MODE_NON_SRIOV
        )
        self.vgpu_types = {int(t["type_id"]): t for t in virt.get("vgpu_types") or []}
        self.vgpu_instances = {}
        for n, v in enumerate(virt.get("vgpu_instances") or []):
            inst = dict(v)
            inst["instance_id"] = int(v["instance_id"]) + index * 16
            inst["uuid"] = _uuid(machine.seed, index, "vgpu", n, prefix="").lstrip("-").encode()
            self.vgpu_instances[inst["instance_id"]] = inst
        self.gpm = bool(p.get("gpm"))
        # "Accounting Mode: Enabled/Disabled" in nvidia-smi -q (Disabled in most captures).
        self.accounting = str(p.get("accounting_mode", "Disabled")).lower() == "enabled"
        # Per-reason clock-event time counters (field values): Turing and newer, GeForce too
        # (REASON_COUNTER_ARCHS); a profile may say otherwise with "clocks_event_reason_counters".
        counters = p.get("clocks_event_reason_counters")
        self.reason_counters = bool(counters) if counters is not None else p["architecture"] in REASON_COUNTER_ARCHS
        self.handle = _Handle()
        # Calls received with a handle of this GPU (its own, MIG, GPU/compute instance, vGPU),
        # one slot per C symbol (see call_slot).
        self.call_counts: list[int] = [0] * len(CALL_SYMBOLS)
        # No scenario given: a profile's own default (an imported capture replays its idle run).
        self.model = LoadModel(p, machine.seed, index, scenario or p.get("default_scenario"))
        run = (p.get("captured") or {}).get("idle" if self.model.scenario == "idle" else "load")
        # The processes the replayed run lists ("C" compute, "G" graphics, "C+G" both).
        self.captured_procs = (
            [
                # "Used GPU Memory: N/A" (WDDM on Windows) is NVML_VALUE_NOT_AVAILABLE, not 0.
                (
                    int(q["pid"]),
                    int(q["used_mib"]) << 20 if q.get("used_mib") is not None else (1 << 64) - 1,
                    str(q.get("type") or "C"),
                )
                for q in (run or {}).get("processes") or []
            ]
            if run is not None
            else None
        )
        for q in (run or {}).get("processes") or []:
            machine.process_names[int(q["pid"])] = str(q.get("name") or "").encode()
        self.lost_at: float | None = None
        self.unprivileged = False  # set by the @unprivileged SPEC modifier
        self.lost_until: float | None = None  # set by a reset (gpuagent.sim.health_faults.reset_gpu)
        self.ecc_counts = {"corrected": 0, "uncorrected": 0}
        # "Replays Since Reset" of an imported capture: the counter starts where it stood.
        self.pcie_replays = int(p.get("pcie_replays_start") or 0)
        self._state_t: float | None = None
        self._state: LoadState | None = None
        self._lock = threading.Lock()
        self.fixed = self._fixed_answers()
        # MIG
        self.gpu_instances: list[SimGpuInstance] = []
        self.mig_devices: list[SimMigDevice] = []
        if self.mig_enabled:
            start = 0
            by_id: dict[int, SimGpuInstance] = {}
            for n, spec in enumerate((self.mig or {}).get("instances") or []):  # mig_enabled: a table
                # Entries with the same gi_id are compute instances of one GPU instance.
                gi = by_id.get(int(spec["gi_id"]))
                if gi is None:
                    gi = by_id[int(spec["gi_id"])] = SimGpuInstance(self, spec, start)
                    start += gi.slices
                    self.gpu_instances.append(gi)
                ci = SimComputeInstance(gi, int(spec.get("ci_id", 0)), spec.get("ci_slices"))
                gi.compute_instances.append(ci)
                self.mig_devices.append(SimMigDevice(self, n, spec, gi, ci))

    def _fixed_answers(self) -> dict[str, int]:
        """C symbol -> the NVML error this card answers it with (NOT_SUPPORTED mostly)."""
        p = self.profile
        out: dict[str, int] = {}

        def ns(names):
            for name in names:
                out[name] = NS

        if not p.get("fan_pct"):
            ns(FAN_CALLS)
        if not self.ecc:
            ns(ECC_CALLS)
        if not p.get("remapped_rows"):
            ns(REMAP_CALLS)
        if not p.get("retired_pages"):
            ns(RETIRED_CALLS)
        if not self.nvlink:
            ns(NVLINK_CALLS)
        if not self.mig:
            ns(MIG_CALLS)
        elif self.mig_enabled:
            ns(("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetRemappedRows"))
            # With MIG on, nvidia-smi says N/A for every engine's utilisation (the H100 MIG
            # capture, the A100 XML one): the codec calls are NOT_SUPPORTED too.
            ns(MIG_ON_UTILIZATION_CALLS)
            # "Nvlink queries are not supported for Devices in MIG mode" (H100 MIG capture).
            ns(NVLINK_CALLS)
        if not self.host_vgpu:
            ns(HOST_VGPU_CALLS)
        if not self.gpm:
            ns(GPM_CALLS)
        if not self.serial:
            ns(("nvmlDeviceGetSerial", "nvmlDeviceGetHandleBySerial"))
        if not self.board_part_number:
            ns(("nvmlDeviceGetBoardPartNumber",))
        if not self.vbios:
            ns(("nvmlDeviceGetVbiosVersion",))
        if not self.clocks.get("applications"):
            ns(("nvmlDeviceGetApplicationsClock", "nvmlDeviceGetDefaultApplicationsClock"))
        if not self.bus_width:
            ns(("nvmlDeviceGetMemoryBusWidth",))
        ns(p.get("unsupported") or [])
        for name, code in (p.get("errors") or {}).items():
            out[name] = error_code(code)
        return out

    def state(self) -> LoadState:
        """The load model at the current clock tick (evaluated at most once per tick).

        The clock is read under the lock, so collector threads see time move
        forward in the order they evaluate (the model steps forward, never replays).
        """
        with self._lock:
            t = self.machine.now()
            if t != self._state_t:
                self._state = self.model.state(t)
                self._state_t = t
            return self._state  # type: ignore[return-value]

    def processes(self, gi_id: int | None = None) -> list[tuple[int, int, int, int]]:
        """(pid, used bytes, gi id, ci id) of the compute processes on this GPU (or one MIG instance)."""
        if self.host_vgpu:
            return []  # a vGPU host does not see its guests' processes
        shown = self.shown_processes()
        if shown is not None:
            return [p for p in shown if gi_id is None or p[2] == gi_id]
        if self.captured_procs is not None:
            return self.captured_processes("C", gi_id)
        st = self.state()
        pids = self.machine.process_pids
        if self.mig_devices:
            out = []
            for n, mig in enumerate(self.mig_devices):
                if gi_id is not None and mig.gi_id != gi_id:
                    continue
                if self.model.scenario == "idle":
                    continue
                used = int(mig.memory_bytes * self.model.mem_frac * 0.9)
                out.append((pids[n % len(pids)], used, mig.gi_id, mig.ci_id))
            return out
        if st.mem_used_bytes <= 0:
            return []
        if self.model.scenario == "inference" and len(pids) > 1:
            first = int(st.mem_used_bytes * 0.6)
            return [
                (pids[0], first, 0xFFFFFFFF, 0xFFFFFFFF),
                (pids[1], st.mem_used_bytes - first, 0xFFFFFFFF, 0xFFFFFFFF),
            ]
        return [(pids[0], st.mem_used_bytes, 0xFFFFFFFF, 0xFFFFFFFF)]

    def captured_processes(self, kind: str, gi_id: int | None = None) -> list[tuple[int, int, int, int]]:
        """The replayed run's processes of ``kind`` ("C" or "G"; "C+G" counts as both), spread
        over the MIG instances in turn; [] for a profile that is no capture."""
        out = []
        for n, (pid, nbytes, types) in enumerate(self.captured_procs or []):
            if kind not in types.split("+"):
                continue
            if self.mig_devices:
                mig = self.mig_devices[n % len(self.mig_devices)]
                if gi_id is None or mig.gi_id == gi_id:
                    out.append((pid, nbytes, mig.gi_id, mig.ci_id))
            elif gi_id is None:
                out.append((pid, nbytes, 0xFFFFFFFF, 0xFFFFFFFF))
        return out

    def shown_processes(self) -> list[tuple[int, int, int, int]] | None:
        """The processes ``@proc`` (real host processes) or a job book (``sim fleet``) put on
        this GPU, spread over its MIG instances in turn; None when neither names this GPU."""
        m = self.machine
        shown = m.shown_procs.get(self.index)
        if shown is None and m.job_book is not None:
            shown = m.job_book.processes(self.index, m.now())
        if shown is None:
            return None
        used = self.state().mem_used_bytes
        out = []
        for n, (pid, mib) in enumerate(shown):
            share = used // max(1, len(shown)) or 256 << 20
            nbytes = (mib << 20) if mib else share
            if self.mig_devices:
                mig = self.mig_devices[n % len(self.mig_devices)]
                out.append((pid, nbytes, mig.gi_id, mig.ci_id))
            else:
                out.append((pid, nbytes, 0xFFFFFFFF, 0xFFFFFFFF))
        return out


class SimMachine:
    """A simulated node built from a fleet SPEC.

    ``devices`` are the physical GPUs (SimDevice); ``gpus`` is filled by the
    test fixture with gpuagent.Gpu objects once NVML is initialised.
    """

    def __init__(
        self,
        spec: str,
        seed: int = 0,
        clock: Any = None,
        scenario: str | None = None,
        driver_version: str | None = None,
    ):
        self.spec = spec
        self.seed = int(seed)
        self.scenario = check_scenario(scenario)
        self.clock = clock if clock is not None else MonotonicClock()
        self.t0 = self.clock.now()
        self.items = parse_spec(spec)
        self.topology = Topology(self.items)
        first = self.items[0].profile
        self.driver_version = (driver_version or first.get("driver_version") or "595.80").encode()
        self.cuda_version = int(first.get("cuda_driver_version") or 13020)
        # The symbols the driver's libnvidia-ml exports (a capture's `nvml-symbols`), else all.
        symbols = first.get("nvml_symbols")
        self.exported_symbols = frozenset(symbols) if symbols else None
        self.process_pids = [os.getpid(), os.getppid() or os.getpid()]
        self.process_names = {os.getpid(): b"python3", os.getppid(): b"python3"}
        self.taken_bus_ids: set[bytes] = set()
        # GPU index -> [(pid, MiB or None)]: real processes shown with @proc (see shown_processes).
        self.shown_procs: dict[int, list[tuple[int, int | None]]] = {}
        # Simulated jobs for `sim fleet --with-jobs`: .processes(gpu, t) -> [(pid, MiB)] or None.
        self.job_book: Any = None
        self.init_count = 0
        # Calls the fake library received (errors included), one slot per C symbol: a list
        # increment is the cheapest count on the hot path (a Counter costs ~0.3 us a call).
        # Exact from one thread; concurrent threads may lose a few increments.
        self.call_counts: list[int] = [0] * len(CALL_SYMBOLS)
        self.lock = threading.Lock()
        self.devices: list[SimDevice] = []
        for item in self.items:
            for local in range(item.count):
                # None when no scenario was given: each profile's default_scenario, else mixed.
                self.devices.append(SimDevice(self, item.first_index + local, item, scenario))
        self.gpus: list[Any] = []
        # Handle address -> object
        self.by_addr: dict[int, Any] = {}
        for d in self.devices:
            self.by_addr[d.handle.addr] = d
            for m in d.mig_devices:
                self.by_addr[m.handle.addr] = m
        self.gi_by_addr = {gi.handle.addr: gi for d in self.devices for gi in d.gpu_instances}
        self.ci_by_addr = {
            ci.handle.addr: ci for d in self.devices for gi in d.gpu_instances for ci in gi.compute_instances
        }
        self.by_uuid: dict[bytes, SimDevice | SimMigDevice] = {d.uuid: d for d in self.devices}
        self.by_uuid.update({m.uuid: m for d in self.devices for m in d.mig_devices})
        self.by_bus_id = {d.bus_id.upper(): d for d in self.devices}
        self.vgpu_by_id = {vid: (d, v) for d in self.devices for vid, v in d.vgpu_instances.items()}
        self.vgpu_types = {tid: t for d in self.devices for tid, t in d.vgpu_types.items()}
        # Faults
        self.forced: dict[tuple[str, int | None], int] = {}
        # (time, seq, gpu, code, gpu instance id, compute instance id); ids 0xFFFFFFFF: whole GPU
        self.xids: list[tuple[float, int, int, int, int, int]] = []
        self._seq = 0
        self.event_sets: dict[int, Any] = {}
        self.gpm_samples: dict[int, Any] = {}
        # GPU index -> DeviceHealth (gpuagent.sim.health_faults); set here so a read finds it at once
        self.health_faults: dict[int, Any] = {}
        for item in self.items:
            for fault in item.faults:
                self.apply(fault)

    # -- time ------------------------------------------------------------
    def now(self) -> float:
        """Seconds since the machine was built, on its clock."""
        return self.clock.now() - self.t0

    def _when(self, at: float | None) -> float:
        return self.now() if at is None else float(at)

    # -- faults ----------------------------------------------------------
    def apply(self, fault: Fault) -> None:
        if isinstance(fault, XidFault):
            self.inject_xid(fault.gpu, fault.code, fault.at)
        elif isinstance(fault, LostFault):
            self.lose_gpu(fault.gpu, fault.at)
        elif isinstance(fault, ForceFault):
            if fault.gpus and fault.symbol not in SYSTEM_SYMBOLS:
                for gpu in fault.gpus:
                    self.force(fault.symbol, fault.code, gpu)
            else:
                self.force(fault.symbol, fault.code, fault.gpu)
        elif isinstance(fault, UnprivilegedFault):
            for gpu in fault.gpus:
                self.unprivilege(gpu)
        elif isinstance(fault, ProcFault):
            self.show_process(fault.gpu, fault.pid, fault.mib)
        else:  # health faults (gpuagent.sim.health_faults) schedule themselves
            fault.apply_to(self)

    def unprivilege(self, gpu: int) -> None:
        """GPU ``gpu`` answers as to a user without root/admin (nvml.h's privileged calls).

        A call the card does not support keeps its NOT_SUPPORTED (the feature is absent
        whoever asks); the MIG-parent list applies only while MIG is on (nvml.h: "In MIG
        mode, if device handle is provided ... only if the caller has appropriate
        privileges"), and MIG device handles still answer for their own instance.
        """
        dev = self.device(gpu)
        dev.unprivileged = True
        table = privileged_calls()
        names = list(table["always"]) + (list(table["mig_parent"]) if dev.mig_enabled else [])
        for name in names:
            dev.fixed.setdefault(name, pynvml.NVML_ERROR_NO_PERMISSION)

    def show_process(self, gpu: int, pid: int, mib: int | None = None) -> None:
        """Show host process ``pid`` as a compute process on GPU ``gpu`` (``@proc=GPU:PID[:MIB]``).
        Once any is shown, that GPU lists only the shown processes."""
        self.device(gpu)
        self.shown_procs.setdefault(gpu, []).append((int(pid), mib))

    def device(self, gpu: int) -> SimDevice:
        """Simulated GPU `gpu`; a one-line AgentError for one the machine has not."""
        if not isinstance(gpu, int) or not 0 <= gpu < len(self.devices):
            raise AgentError(f"no simulated GPU {gpu!r} (the machine has {len(self.devices)})")
        return self.devices[gpu]

    def inject_xid(
        self,
        gpu: int,
        code: int,
        at: float | None = None,
        gi_id: int | None = None,
        ci_id: int | None = None,
    ) -> None:
        """An XID event on GPU ``gpu`` at machine time ``at`` (seconds; default now).

        ``gi_id`` / ``ci_id`` tie it to a MIG instance (the event's gpuInstanceId /
        computeInstanceId); the GPU must have MIG on and that GPU instance. ``ci_id``
        without ``gi_id`` is refused; ``gi_id`` alone leaves the compute instance 0xFFFFFFFF.
        """
        dev = self.device(gpu)
        if gi_id is None and ci_id is not None:
            raise AgentError("inject_xid: ci_id needs gi_id")
        if gi_id is not None:
            gi = next((g for g in dev.gpu_instances if g.id == gi_id), None)
            if gi is None:
                have = sorted(g.id for g in dev.gpu_instances)
                raise AgentError(f"simulated GPU {gpu} has no MIG GPU instance {gi_id!r} (it has {have or 'none'})")
            if ci_id is not None and all(c.id != ci_id for c in gi.compute_instances):
                raise AgentError(f"simulated GPU {gpu}, GPU instance {gi_id}: no compute instance {ci_id!r}")
        gi_code = 0xFFFFFFFF if gi_id is None else int(gi_id)
        ci_code = 0xFFFFFFFF if ci_id is None else int(ci_id)
        if int(code) == 79:  # fallen off the bus: GPU_IS_LOST from then on, as on hardware
            self._mark_lost(dev, self._when(at))
        with self.lock:
            self._seq += 1
            # a new sorted list, swapped in whole: waiters iterate the old one safely
            self.xids = sorted([*self.xids, (self._when(at), self._seq, gpu, int(code), gi_code, ci_code)])

    def lose_gpu(self, gpu: int, at: float | None = None) -> None:
        """GPU ``gpu`` falls off the bus at ``at``: XID 79, then GPU_IS_LOST on every call."""
        self.inject_xid(gpu, 79, self._when(at))

    @staticmethod
    def _mark_lost(dev: SimDevice, when: float) -> None:
        from gpuagent.sim.health_faults import reset_after

        if dev.lost_until is not None and when >= dev.lost_until:  # lost again after a reset
            dev.lost_at, dev.lost_until = when, None
        else:
            dev.lost_at = when if dev.lost_at is None else min(dev.lost_at, when)
        dev.lost_until = reset_after(dev.machine, dev.index, dev.lost_at)  # a reset already scheduled

    def reset_gpu(self, gpu: int, at: float | None = None) -> None:
        """GPU ``gpu`` is reset at ``at`` (default now): a lost GPU answers again, a pending row
        remapping is applied, the recovery action returns to none (gpuagent.sim.health_faults)."""
        from gpuagent.sim.health_faults import reset_gpu

        reset_gpu(self, gpu, at)

    def force(self, symbol: str, code: int | str, gpu: int | None = None) -> None:
        """Make ``symbol`` answer ``code`` (on one GPU, or everywhere); SUCCESS/0 clears it.
        A symbol libnvidia-ml does not have is refused: forcing it would test nothing."""
        from gpuagent.sim.faults import check_symbol

        check_symbol(symbol)
        if gpu is not None:
            self.device(gpu)
        code = error_code(code)
        if code == pynvml.NVML_SUCCESS:
            self.forced.pop((symbol, gpu), None)
        else:
            self.forced[(symbol, gpu)] = code

    def add_ecc_errors(self, gpu: int, corrected: int = 0, uncorrected: int = 0) -> None:
        """Raise GPU ``gpu``'s volatile/aggregate ECC counters (uncorrected ones also count as remapped rows)."""
        dev = self.device(gpu)
        dev.ecc_counts["corrected"] += int(corrected)
        dev.ecc_counts["uncorrected"] += int(uncorrected)

    def add_pcie_replays(self, gpu: int, count: int) -> None:
        self.device(gpu).pcie_replays += int(count)

    @property
    def calls(self) -> Counter[str]:
        """C symbol -> calls received so far: a new Counter (a snapshot) on every read, so
        ``after - before`` gives the calls in between. ``reset_calls()`` starts afresh."""
        return _counter(self.call_counts)

    @property
    def calls_by_gpu(self) -> list[Counter[str]]:
        """Per GPU index: C symbol -> calls received with a handle of that GPU (snapshots)."""
        return [_counter(d.call_counts) for d in self.devices]

    def unasked_forced(self) -> list[str]:
        """The forced symbols nothing has called: a fault on them changes nothing."""
        calls = self.calls
        return sorted({symbol for symbol, _ in self.forced if not calls.get(symbol)})

    def reset_calls(self) -> None:
        """Start counting calls afresh (machine-wide and per GPU)."""
        for counts in [self.call_counts, *(d.call_counts for d in self.devices)]:
            counts[:] = [0] * len(counts)

    def size_call_counts(self) -> None:
        """Give every C symbol known now a slot (symbols can be registered after construction)."""
        for counts in [self.call_counts, *(d.call_counts for d in self.devices)]:
            counts.extend([0] * (len(CALL_SYMBOLS) - len(counts)))

    def clear_forced(self) -> None:
        self.forced.clear()

    def advance(self, seconds: float) -> None:
        """Move a manual clock forward (convenience for tests)."""
        if not isinstance(self.clock, ManualClock):
            raise AgentError("advance() needs a ManualClock")
        self.clock.advance(seconds)

    def __repr__(self) -> str:
        return f"<SimMachine {self.spec!r} seed={self.seed} scenario={self.scenario} gpus={len(self.devices)}>"
