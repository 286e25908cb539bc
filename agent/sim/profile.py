"""Simulator profiles: one GPU model as JSON data (static facts + load model).

Schema (version 1; docs/simulator.md has the full description). Keys marked
? are optional; a missing or null reading makes the matching NVML call answer
NOT_SUPPORTED, as the real card does when nvidia-smi shows "N/A".

    schema                 1
    name                   short id ("l40s")
    driver_version?        the driver the facts were read from ("590.48.01"); the machine's
                           nvmlSystemGetDriverVersion answers the first profile's
    product_name           nvmlDeviceGetName ("NVIDIA L40S")
    brand?                 "NVIDIA" | "GeForce" | ...
    architecture           "Ampere" | "Ada Lovelace" | "Hopper" | ...
    pci_device_id          "0x26B910DE" (device << 16 | vendor, as NVML reports)
    pci_subsystem_id?      "0x185110DE"
    serial?, board_part_number?, vbios_version?   strings or null (NOT_SUPPORTED)
    memory                 {total_mib, reserved_mib, bar1_total_mib, bus_width_bits?, type?}
    l2_cache_bytes?        int (not an NVML reading; used for spec-derived fields)
    clocks_mhz             {max: {graphics, sm, memory, video},
                            idle: {graphics, sm, memory, video},
                            applications?: {graphics, memory} or null}
    power_w                {limit, default, min, max, idle}
    pcie                   {max_gen, current_gen, idle_gen?, max_width, current_width}
    temperature_c          {idle, max, slowdown?, shutdown?, target? (the acoustic threshold)}
    fan_pct?               {idle, max} or null (fan-less datacenter cards: NOT_SUPPORTED)
    ecc?                   {enabled: bool} or null (no ECC: GeForce)
    remapped_rows          bool   (row remapping; Ampere+ datacenter cards)
    retired_pages          bool   (page retirement; pre-Ampere)
    gpm                    bool   (GPM metrics; Hopper and newer)
    nvlink?                {links, version, speed_mbps?, topology: "switch" | "bridge"} or null
    mig?                   {enabled, max_devices,
                            gpu_instance_profiles: [{index (NVML_GPU_INSTANCE_PROFILE_*),
                                profile_id (the id NVML reports: H100 1g.10gb 19 ... 7g 0),
                                name, slices, instance_count, sm_count, memory_mib}],
                            instances: [{gi_id, ci_id, profile_id, profile, sm_count,
                                         memory_mib, bar1_mib?, ci_slices?}]} or null
                           (entries sharing a gi_id are compute instances of one GPU instance;
                            ci_slices below the GI's slices names the device "1c.3g.71gb")
    virtualization         {mode: "none" | "passthrough" | "vgpu" | "host_vgpu",
                            host_vgpu_mode?: "sriov" | "non_sriov",
                            vgpu_types?: [{type_id, name, class?, fb_mib, max_instances}],
                            vgpu_instances?: [{instance_id, type_id, vm_id, fb_used_mib, licensed}]}
    clocks_event_reasons_supported   int mask
    clocks_event_reason_counters?    bool: per-reason time field values (default: Turing and
                                     newer, GeForce too, as the captures show; else NOT_SUPPORTED)
    clocks_event_reason_counters_start_us?  {sw_power_cap, sync_boost, sw_thermal_slowdown,
                                     hw_thermal_slowdown, hw_power_brake}: a capture's counters
    board_id?, pcie_replays_start?   a capture's "Board ID" and "Replays Since Reset"
    captured?              {idle, load?}: an imported capture's runs, replayed by the idle
                           scenario as stated (power, clocks, reasons, memory, BAR1, PCIe
                           throughput, utilisation, MIG devices' memory, processes)
    unsupported            [C symbol, ...]: answered NOT_SUPPORTED on this card
    nvml_symbols?          [C symbol, ...]: what the driver's libnvidia-ml exports (a capture's
                           `nvml-symbols` section); any other symbol answers FUNCTION_NOT_FOUND
    not_in_capture?        [fact, ...]: what an imported capture did not show (informational)
    unverified?            {key path: why}: figures no capture or datasheet gives (informational)
    errors?                {C symbol: NVML error name}: any other fixed answer
    load                   {ambient_c?, thermal_tau_s?, demand_w?: {idle, training, inference},
                            memory_used_frac?: {idle, training, inference},
                            pcie_kbps?, nvlink_gbps?}
    faults?                [{type: "xid", gpu?, code, at} | {type: "lost", gpu?, at}
                            | {type: "force", symbol, code, gpu?}]
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from gpuagent.errors import AgentError

BUILTIN_NAMES = (
    "l40s",
    "rtx4090",
    "a100-sxm4",
    "h100-pcie",
    "h100-sxm",
    "h200",
    "a100-sxm4-mig",
    "h100-sxm-mig",
    "l40s-vgpu",
)

SCHEMA_VERSION = 1
REQUIRED = (
    "name",
    "product_name",
    "architecture",
    "pci_device_id",
    "memory",
    "clocks_mhz",
    "power_w",
    "pcie",
)


def builtin_names() -> tuple[str, ...]:
    return BUILTIN_NAMES


@cache
def _builtin_text(name: str) -> str:
    return resources.files("gpuagent.sim").joinpath("profiles", f"{name}.json").read_text()


def load_profile(name_or_path: str) -> dict[str, Any]:
    """A built-in profile by name, or a profile JSON file by path (a fresh dict each call)."""
    if name_or_path in BUILTIN_NAMES:
        data = json.loads(_builtin_text(name_or_path))
        source = f"built-in profile {name_or_path!r}"
    else:
        path = Path(name_or_path)
        if not (path.suffix == ".json" or "/" in name_or_path or path.exists()):
            raise AgentError(
                f"unknown simulator profile {name_or_path!r}; known: {', '.join(BUILTIN_NAMES)} "
                "(or the path of a profile JSON file)"
            )
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise AgentError(
                f"simulator profile file {name_or_path!r} not found; known profiles: {', '.join(BUILTIN_NAMES)}"
            ) from None
        except (OSError, ValueError) as exc:
            raise AgentError(f"cannot read simulator profile {name_or_path!r}: {exc}") from None
        source = f"profile file {name_or_path!r}"
    return validate(data, source)


def validate(data: Any, source: str = "profile") -> dict[str, Any]:
    """Check the shape a simulated device needs; fill defaults. One-line AgentError otherwise."""
    if not isinstance(data, dict):
        raise AgentError(f"{source}: a profile must be a JSON object")
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise AgentError(f"{source}: missing key(s) {', '.join(missing)}")
    if data.get("schema", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise AgentError(f"{source}: unsupported schema {data.get('schema')!r} (expected {SCHEMA_VERSION})")
    try:
        int(str(data["pci_device_id"]), 16)
        if data.get("pci_subsystem_id") is not None:
            int(str(data["pci_subsystem_id"]), 16)
        mem = data["memory"]
        int(mem["total_mib"])
        clocks = data["clocks_mhz"]
        for key in ("graphics", "sm", "memory"):
            int(clocks["max"][key])
        power = data["power_w"]
        float(power["limit"])
        pcie = data["pcie"]
        int(pcie["max_gen"]), int(pcie["max_width"])
    except (KeyError, TypeError, ValueError) as exc:
        raise AgentError(f"{source}: bad or missing value ({exc.__class__.__name__}: {exc})") from None
    data.setdefault("schema", SCHEMA_VERSION)
    data.setdefault("brand", "NVIDIA")
    mem.setdefault("reserved_mib", 0)
    mem.setdefault("bar1_total_mib", 256)
    mem.setdefault("bus_width_bits", None)
    data.setdefault("l2_cache_bytes", None)
    clocks.setdefault("idle", {})
    clocks["max"].setdefault("video", clocks["max"]["graphics"])
    for key, frac in (("graphics", 0.1), ("sm", 0.1), ("memory", 0.1), ("video", 0.4)):
        clocks["idle"].setdefault(key, max(1, int(clocks["max"][key] * frac)))
    clocks.setdefault("applications", None)
    power.setdefault("default", power["limit"])
    power.setdefault("min", round(power["limit"] * 0.3))
    power.setdefault("max", power["limit"])
    power.setdefault("idle", round(power["limit"] * 0.1))
    pcie.setdefault("current_gen", pcie["max_gen"])
    pcie.setdefault("idle_gen", pcie["current_gen"])
    pcie.setdefault("current_width", pcie["max_width"])
    data.setdefault("temperature_c", {})
    data["temperature_c"].setdefault("idle", 30)
    data["temperature_c"].setdefault("max", 80)
    data.setdefault("fan_pct", None)
    data.setdefault("ecc", None)
    data.setdefault("remapped_rows", False)
    data.setdefault("retired_pages", False)
    data.setdefault("gpm", False)
    data.setdefault("nvlink", None)
    data.setdefault("mig", None)
    data.setdefault("virtualization", {"mode": "none"})
    data["virtualization"].setdefault("mode", "none")
    data.setdefault("clocks_event_reasons_supported", 0x1FF)
    data.setdefault("unsupported", [])
    data.setdefault("errors", {})
    data.setdefault("load", {})
    data.setdefault("faults", [])
    for entry in (data.get("mig") or {}).get("gpu_instance_profiles") or []:
        # Older profile files gave only the NVML_GPU_INSTANCE_PROFILE_* index, as profile_id.
        entry.setdefault("index", entry.get("profile_id"))
    if not isinstance(data["unsupported"], list):
        raise AgentError(f"{source}: 'unsupported' must be a list of NVML C symbol names")
    return data


def peak_dram_gbps(profile: dict[str, Any]) -> float | None:
    """bus width / 8 x max memory clock x 2 (DDR), in GB/s; None when the bus width is unknown."""
    bus = profile["memory"].get("bus_width_bits")
    if not bus:
        return None
    return bus / 8 * profile["clocks_mhz"]["max"]["memory"] * 2 / 1000
