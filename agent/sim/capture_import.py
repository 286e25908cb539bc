"""Build a simulator profile from an nvidia-smi capture (``-q`` text or ``-q -x`` XML).

Text captures may be raw ``nvidia-smi -q`` output or capture files with one
section per command (``# $ nvidia-smi -q`` headers): the first ``-q`` section
is used. Every "N/A" in the capture becomes a NOT_SUPPORTED call in the
profile. What nvidia-smi does not show (memory bus width, L2 size, NVLink
links, MIG profile table) comes from the built-in profile with the same PCI
device id, or from a small table of known cards, else stays unknown.
"""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from gpuagent.errors import AgentError
from gpuagent.sim.profile import BUILTIN_NAMES, load_profile, validate

MiB = 1 << 20

# Cards without a built-in profile: (bus width bits, L2 bytes, GPM).
KNOWN_CARDS = {
    0x2702: (256, 64 * MiB),  # GeForce RTX 4080 SUPER
    0x2704: (256, 64 * MiB),  # GeForce RTX 4080
    0x27B0: (160, 48 * MiB),  # RTX 4000 SFF Ada
    0x27B2: (160, 48 * MiB),  # RTX 4000 Ada
    0x26B1: (384, 96 * MiB),  # RTX 6000 Ada
    0x26B5: (384, 96 * MiB),  # L40
    0x20B0: (5120, 40 * MiB),  # A100-SXM4-40GB
    0x20F1: (5120, 40 * MiB),  # A100-PCIE-40GB
    0x20B5: (5120, 40 * MiB),  # A100 80GB PCIe
    # Cards of the captures without a built-in profile; bus widths and L2 sizes from NVIDIA's
    # product pages and the Turing/Ampere whitepapers (not in any capture: unverified here).
    0x1E81: (256, 4 * MiB),  # GeForce RTX 2080 SUPER (TU104)
    0x2184: (192, 1536 * 1024),  # GeForce GTX 1660 Ti (TU116)
    0x1C30: (160, 1280 * 1024),  # Quadro P2000 (GP106)
    0x2487: (192, 3 * MiB),  # GeForce RTX 3060 (GA104)
    0x2503: (192, 3 * MiB),  # GeForce RTX 3060 (GA106)
    0x2216: (320, 5 * MiB),  # GeForce RTX 3080 LHR (GA102)
    0x2206: (320, 5 * MiB),  # GeForce RTX 3080 (GA102)
}
ARCH_ALIASES = {"Ada": "Ada Lovelace"}


# -- text (-q) ---------------------------------------------------------------

_KV = re.compile(r"^(.*?\S)\s+:\s?(.*)$")


def first_q_section(text: str) -> str:
    """The first ``nvidia-smi -q`` section of a capture file (the whole text when there are no headers)."""
    sections = q_sections(text)
    return sections[0] if sections else text


def q_sections(text: str) -> list[str]:
    """Every ``nvidia-smi -q`` section of a capture file, in order: the idle run first, the
    loaded run second (the captures' README); [] when the text has no section headers."""
    lines = text.splitlines()
    starts = [i + 1 for i, line in enumerate(lines) if re.match(r"^#\s*\$\s*nvidia-smi\s+-q\s*$", line.strip())]
    return [_section_from(lines, start) for start in starts]


def _section_from(lines: list[str], start: int) -> str:
    out: list[str] = []
    for line in lines[start:]:
        if line.startswith("# $ ") or (line.startswith("####") and out and any(o.strip() for o in out)):
            break
        if line.startswith("####"):
            continue
        out.append(line)
    return "\n".join(out)


def parse_text_tree(text: str) -> dict[str, Any]:
    """Indentation tree of ``nvidia-smi -q``; repeated keys (MIG Device, GPU ...) become lists."""
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict]] = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip() or raw.strip().startswith("=") or raw.startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        content = raw.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        match = _KV.match(content)
        if match:
            _insert(parent, match.group(1).strip(), match.group(2).strip())
        else:
            child: dict[str, Any] = {}
            _insert(parent, content, child)
            stack.append((indent, child))
    return root


def _insert(parent: dict, key: str, value: Any) -> None:
    if key in parent:
        if isinstance(parent[key], list):
            parent[key].append(value)
        else:
            parent[key] = [parent[key], value]
    else:
        parent[key] = value


def _g(d: Any, *path: str) -> Any:
    for key in path:
        if isinstance(d, list):
            d = d[0]
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def capture_section(text: str, name: str) -> list[str] | None:
    """Body lines of a capture file's ``# <phase> :: NAME`` section (None when it has none)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^#\s*[\w-]+\s*::\s*" + re.escape(name) + r"\s*$", line.strip()):
            body: list[str] = []
            j = i + 1
            while j < len(lines) and lines[j].startswith("#"):
                j += 1  # the command line, the sha256 note and the closing rule
            for line in lines[j:]:
                if line.startswith("####"):
                    break
                body.append(line)
            return body
    return None


def nvml_symbols(text: str) -> list[str] | None:
    """The ``capabilities :: nvml-symbols`` list (functions the driver's libnvidia-ml exports)."""
    body = capture_section(text, "nvml-symbols")
    if body is None:
        return None
    names = sorted({line.strip() for line in body if line.strip().startswith("nvml")})
    return names or None


def query_gpu_row(text: str) -> dict[str, str]:
    """The first ``--query-gpu`` CSV row as {column: value} ({} when the capture has none)."""
    body = capture_section(text, "query-gpu (csv, what the exporter parses)")
    rows = [line for line in body or [] if line.strip()]
    if len(rows) < 2:
        return {}
    head = [c.strip() for c in rows[0].split(",")]
    values = [c.strip() for c in rows[1].split(",")]
    return dict(zip(head, values, strict=False))


def smi_list_mig_names(text: str) -> list[str]:
    """The MIG profile names of the first GPU in the ``nvidia-smi -L`` section, by device index."""
    names: list[str] = []
    for line in capture_section(text, "list (-L)") or []:
        if line.startswith("GPU ") and names:
            break
        match = re.match(r"^\s+MIG (\S+)\s+Device\s+(\d+):", line)
        if match and int(match.group(2)) == len(names):
            names.append(match.group(1))
    return names


def _version(value: Any) -> str | None:
    """'610.62 [Deprecated; ... Use KMD Version instead]' -> '610.62' (driver 610's text)."""
    if not isinstance(value, str):
        return None
    return value.split("[")[0].strip() or None


def _text_gpu(section: str) -> tuple[dict[str, Any], dict[str, Any], str] | None:
    """(tree, first GPU's node, the GPU header's bus id) of one ``-q`` section; None without a GPU."""
    tree = parse_text_tree(section)
    gpus = [k for k in tree if k.startswith("GPU ") and isinstance(tree[k], dict | list)]
    if not gpus:
        return None
    gpu = tree[gpus[0]]
    if isinstance(gpu, list):
        gpu = gpu[0]
    return tree, gpu, gpus[0][4:].strip()


def _pstate(value: Any) -> int | None:
    """'P8' -> 8; None for N/A."""
    match = re.match(r"^\s*P(\d+)", str(value or ""))
    return int(match.group(1)) if match else None


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else ([] if value is None else [value])


def _processes_readable(node: Any) -> bool:
    if node is None or (isinstance(node, str) and node.strip().lower() == "none"):
        return True
    if not isinstance(node, dict):
        return False
    pids = len(_as_list(node.get("Process ID")))
    return pids > 0 and pids >= max(len(_as_list(node.get(k))) for k in ("Type", "Name", "Used GPU Memory"))


def _text_processes(node: Any) -> list[dict[str, Any]]:
    """`Processes` of ``-q``: its KV lines repeat per process (Process ID, Type, Name, Used GPU
    Memory, with GPU/Compute instance ID under MIG); "None" when there are none."""
    if not isinstance(node, dict):
        return []
    pids = _as_list(node.get("Process ID"))
    kinds = _as_list(node.get("Type"))
    names = _as_list(node.get("Name"))
    used = _as_list(node.get("Used GPU Memory"))
    gis = _as_list(node.get("GPU instance ID") or node.get("GPU Instance ID"))
    out = []
    for n, pid in enumerate(pids):
        out.append(
            {
                "pid": _num(pid),
                "type": kinds[n] if n < len(kinds) else "C",
                "name": names[n] if n < len(names) else "",
                "used_mib": _num(used[n]) if n < len(used) else None,
                "gi_id": _num(gis[n]) if n < len(gis) else None,
            }
        )
    return [p for p in out if p["pid"] is not None]


# Clock-event reason bits (nvml.h nvmlClocksEventReason*) by the words ``-q`` prints them with.
REASON_BITS_TEXT = {
    "Idle": 0x1,
    "Applications Clocks Setting": 0x2,
    "SW Power Cap": 0x4,
    "HW Slowdown": 0x8,
    "Sync Boost": 0x10,
    "SW Thermal Slowdown": 0x20,
    "HW Thermal Slowdown": 0x40,
    "HW Power Brake Slowdown": 0x80,
    "Display Clock Setting": 0x100,
}
# ... and by the XML tags' stems (clocks_event_reason_<stem>, clocks_throttle_reason_<stem>).
REASON_BITS_XML = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}
# The five reason-time counters (nvml.h NVML_FI_DEV_CLOCKS_EVENT_REASON_*, ns; nvidia-smi prints us).
COUNTER_NAMES_TEXT = {
    "SW Power Capping": "sw_power_cap",
    "Sync Boost": "sync_boost",
    "SW Thermal Slowdown": "sw_thermal_slowdown",
    "HW Thermal Slowdown": "hw_thermal_slowdown",
    "HW Power Braking": "hw_power_brake",
}
COUNTER_NAMES_XML = {
    "sw_power_cap": "sw_power_cap",
    "sync_boost": "sync_boost",
    "sw_therm_slowdown": "sw_thermal_slowdown",
    "hw_therm_slowdown": "hw_thermal_slowdown",
    "hw_power_brake": "hw_power_brake",
}
UTIL_KEYS = ("gpu", "memory", "encoder", "decoder", "jpeg", "ofa")


def reasons_mask(states: dict[str, Any], bits: dict[str, int]) -> int | None:
    """The active-reasons mask from each reason's "Active" / "Not Active"; None when no reason is stated."""
    mask, stated = 0, False
    for label, bit in bits.items():
        value = str(states.get(label) or "").strip().lower()
        if value in ("active", "not active"):
            stated = True
            mask |= bit if value == "active" else 0
    return mask if stated else None


def _said_na(value: Any) -> bool:
    """The capture printed the line and said N/A (not: the line is absent)."""
    return isinstance(value, str) and not_available(value)


def _text_readings(gpu: dict[str, Any]) -> dict[str, Any]:
    """What one ``-q`` run showed changing with load: power, temperatures, clocks, P-state, fan,
    utilisation, memory in use, BAR1 in use, PCIe throughput, clock-event reasons, the MIG
    devices' memory in use and the processes."""
    power = _g(gpu, "GPU Power Readings") or _g(gpu, "Power Readings") or {}
    temp = _g(gpu, "Temperature") or {}
    clocks = _g(gpu, "Clocks") or {}
    util = _g(gpu, "Utilization") or {}
    reasons = _g(gpu, "Clocks Event Reasons") or _g(gpu, "Clocks Throttle Reasons")
    migs = _as_list(_g(gpu, "MIG Device") if "MIG Device" in gpu else None)
    procs_node = gpu.get("Processes")
    return {
        "bar1_used_mib": _num(_g(gpu, "BAR1 Memory Usage", "Used")),
        "pcie_tx_kbps": _num(_g(gpu, "PCI", "Tx Throughput")),
        "pcie_rx_kbps": _num(_g(gpu, "PCI", "Rx Throughput")),
        "reasons": reasons_mask(reasons, REASON_BITS_TEXT) if isinstance(reasons, dict) else None,
        "util_na": [
            k
            for k, label in zip(UTIL_KEYS, ("GPU", "Memory", "Encoder", "Decoder", "JPEG", "OFA"), strict=True)
            if _said_na(util.get(label))
        ],
        "mig_used_mib": [
            _num(_g(m, "Shared FB Memory Usage", "Used") or _g(m, "FB Memory Usage", "Used"))
            for m in migs
            if isinstance(m, dict)
        ],
        "mig_bar1_used_mib": [
            _num(_g(m, "Shared BAR1 Memory", "Used") or _g(m, "BAR1 Memory Usage", "Used"))
            for m in migs
            if isinstance(m, dict)
        ],
        # "None": no processes; a block with a "Process ID" line per process: read; anything
        # else (another layout, names without pids): not read.
        "processes_read": _processes_readable(procs_node),
        "power_average_w": _num(power.get("Average Power Draw")),
        "power_instant_w": _num(power.get("Instantaneous Power Draw") or power.get("Power Draw")),
        "temp_c": _num(temp.get("GPU Current Temp")),
        "memory_temp_c": _num(temp.get("Memory Current Temp")),
        "clocks": {
            k: _num(clocks.get(label))
            for k, label in (("graphics", "Graphics"), ("sm", "SM"), ("memory", "Memory"), ("video", "Video"))
        },
        "pstate": _pstate(gpu.get("Performance State")),
        "fan_pct": _num(gpu.get("Fan Speed")),
        "util": {
            k: _num(util.get(label))
            for k, label in (
                ("gpu", "GPU"),
                ("memory", "Memory"),
                ("encoder", "Encoder"),
                ("decoder", "Decoder"),
                ("jpeg", "JPEG"),
                ("ofa", "OFA"),
            )
        },
        "memory_used_mib": _num(_g(gpu, "FB Memory Usage", "Used")),
        "processes": _text_processes(gpu.get("Processes")),
    }


def nvlink_status(text: str) -> str | None:
    """What ``nvidia-smi nvlink -s`` said: "inactive" (links present, all down), "absent"
    (no NVLink), "mig" (not queried in MIG mode), "links" (a speed per link); None if not captured."""
    body = " ".join(capture_section(text, "nvlink -s") or [])
    if not body.strip():
        return None
    lowered = body.lower()
    if "all links are inactive" in lowered:
        return "inactive"
    if "does not have or support nvlink" in lowered:
        return "absent"
    if "mig mode" in lowered:
        return "mig"
    return "links" if re.search(r"Link \d+:", body) else None


# A MIG device's engines ("Device Attributes / Shared"), as nvmlDeviceGetAttributes_v2 counts them.
MIG_ENGINES_TEXT = {
    "ce_count": "Copy Engine count",
    "encoder_count": "Encoder count",
    "decoder_count": "Decoder count",
    "ofa_count": "OFA count",
    "jpeg_count": "JPG count",
}
MIG_ENGINES_XML = {
    "ce_count": "copy_engine_count",
    "encoder_count": "encoder_count",
    "decoder_count": "decoder_count",
    "ofa_count": "ofa_count",
    "jpeg_count": "jpg_count",
}


def facts_from_text(text: str) -> dict[str, Any]:
    sections = q_sections(text) or [text]
    found = _text_gpu(sections[0])
    if found is None:
        raise AgentError("no GPU section found (expected `nvidia-smi -q` output)")
    tree, gpu, header_bus = found
    loaded = _text_gpu(sections[1]) if len(sections) > 1 else None
    temp = _g(gpu, "Temperature") or {}
    inforom = _g(gpu, "Inforom Version") or {}
    power = _g(gpu, "GPU Power Readings") or _g(gpu, "Power Readings") or {}
    migs = _g(gpu, "MIG Device")
    if isinstance(migs, dict):
        migs = [migs]
    mig_devices = []
    for m in migs or []:
        mig_devices.append(
            {
                "gi_id": _num(m.get("GPU Instance ID")),
                "ci_id": _num(m.get("Compute Instance ID")),
                "sm_count": _num(_g(m, "Device Attributes", "Shared", "Multiprocessor count")),
                "memory_mib": _num(_g(m, "Shared FB Memory Usage", "Total") or _g(m, "FB Memory Usage", "Total")),
                "bar1_mib": _num(_g(m, "Shared BAR1 Memory", "Total") or _g(m, "BAR1 Memory Usage", "Total")),
                **{key: _num(_g(m, "Device Attributes", "Shared", label)) for key, label in MIG_ENGINES_TEXT.items()},
            }
        )
    retired = _g(gpu, "Retired Pages")
    remapped = _g(gpu, "Remapped Rows")
    # Driver 610 nests the limits: "GPU Ceiling Power Limit" / "Current Power Limit".
    ceiling = power.get("GPU Ceiling Power Limit")
    ceiling = ceiling if isinstance(ceiling, dict) else {}
    counters = _g(gpu, "Clocks Event Reasons Counters")
    row = query_gpu_row(text)
    return _first_of_repeated(
        {
            # 610 marks "Driver Version" deprecated in favour of "KMD Version".
            "driver_version": _version(tree.get("KMD Version")) or _version(tree.get("Driver Version")),
            "cuda_version": _version(tree.get("CUDA UMD Version")) or _version(tree.get("CUDA Version")),
            "nvml_symbols": nvml_symbols(text),
            "reasons_supported": row.get("clocks_event_reasons.supported")
            or row.get("clocks_throttle_reasons.supported"),
            "reason_counters": list(counters.values()) if isinstance(counters, dict) else None,
            "reason_counters_us": {
                COUNTER_NAMES_TEXT[k]: _num(v) for k, v in counters.items() if k in COUNTER_NAMES_TEXT
            }
            if isinstance(counters, dict)
            else None,
            "board_id": gpu.get("Board ID"),
            "temp_target": temp.get("GPU Target Temperature") or temp.get("GPU Target Temperature Specification"),
            "product_name": gpu.get("Product Name"),
            "brand": gpu.get("Product Brand"),
            "architecture": gpu.get("Product Architecture"),
            "serial": gpu.get("Serial Number"),
            "vbios_version": gpu.get("VBIOS Version"),
            "board_part_number": gpu.get("Board Part Number"),
            "mig_mode": _g(gpu, "MIG Mode", "Current"),
            "mig_devices": mig_devices,
            "mig_list_names": smi_list_mig_names(text),
            "virtualization_mode": _g(gpu, "GPU Virtualization Mode", "Virtualization Mode"),
            "host_vgpu_mode": _g(gpu, "GPU Virtualization Mode", "Host VGPU Mode"),
            "pci_device_id": _g(gpu, "PCI", "Device Id"),
            "pci_subsystem_id": _g(gpu, "PCI", "Sub System Id"),
            "pcie_max_gen": _g(gpu, "PCI", "GPU Link Info", "PCIe Generation", "Max"),
            "pcie_current_gen": _g(gpu, "PCI", "GPU Link Info", "PCIe Generation", "Current"),
            "pcie_max_width": _g(gpu, "PCI", "GPU Link Info", "Link Width", "Max"),
            "pcie_current_width": _g(gpu, "PCI", "GPU Link Info", "Link Width", "Current"),
            "pcie_replays": _g(gpu, "PCI", "Replays Since Reset"),
            "fan": gpu.get("Fan Speed"),
            "memory_total": _g(gpu, "FB Memory Usage", "Total"),
            "memory_reserved": _g(gpu, "FB Memory Usage", "Reserved"),
            "bar1_total": _g(gpu, "BAR1 Memory Usage", "Total"),
            "ecc_mode": _g(gpu, "ECC Mode", "Current"),
            "retired_pages": None if retired in (None, "N/A") else _g(retired, "Single Bit ECC"),
            "remapped_rows": remapped if isinstance(remapped, str) else ("yes" if remapped else None),
            "temp_current": _g(gpu, "Temperature", "GPU Current Temp"),
            "temp_slowdown": _g(gpu, "Temperature", "GPU Slowdown Temp"),
            "temp_shutdown": _g(gpu, "Temperature", "GPU Shutdown Temp"),
            "power_draw": power.get("Average Power Draw") or power.get("Power Draw"),
            "power_limit": ceiling.get("Current Power Limit")
            or power.get("Current Power Limit")
            or power.get("Enforced Power Limit")
            or power.get("Power Limit"),
            "power_default": ceiling.get("Default Power Limit") or power.get("Default Power Limit"),
            "power_min": power.get("Min Power Limit"),
            "power_max": power.get("Max Power Limit"),
            "max_graphics": _g(gpu, "Max Clocks", "Graphics"),
            "max_sm": _g(gpu, "Max Clocks", "SM"),
            "max_memory": _g(gpu, "Max Clocks", "Memory"),
            "max_video": _g(gpu, "Max Clocks", "Video"),
            "app_graphics": _g(gpu, "Applications Clocks", "Graphics"),
            "app_memory": _g(gpu, "Applications Clocks", "Memory"),
            "default_app_graphics": _g(gpu, "Default Applications Clocks", "Graphics"),
            "max_boost_graphics": _g(gpu, "Max Customer Boost Clocks", "Graphics"),
            "uuid": gpu.get("GPU UUID"),
            "bus_id": _g(gpu, "PCI", "Bus Id") or header_bus,
            "persistence_mode": gpu.get("Persistence Mode"),
            "inforom": {
                "image": inforom.get("Image Version"),
                "oem": inforom.get("OEM Object"),
                "ecc": inforom.get("ECC Object"),
                "power": inforom.get("Power Management Object") or inforom.get("Power Management"),
            },
            "power_management": (_g(gpu, "GPU Power Readings") or _g(gpu, "Power Readings") or {}).get(
                "Power Management"
            )
            or row.get("power.management"),
            "temp_gpu_max": temp.get("GPU Max Operating Temp"),
            "temp_mem_max": temp.get("Memory Max Operating Temp"),
            "tlimit": {
                "margin": temp.get("GPU T.Limit Temp"),
                "shutdown": temp.get("GPU Shutdown T.Limit Temp"),
                "slowdown": temp.get("GPU Slowdown T.Limit Temp"),
                "gpu_max": temp.get("GPU Max Operating T.Limit Temp"),
                "memory_max": temp.get("Memory Max Operating T.Limit Temp"),
            },
            "histogram_max": _g(gpu, "Remapped Rows", "Bank Remap Availability Histogram", "Max"),
            "nvlink_status": nvlink_status(text),
            "idle": _text_readings(gpu),
            "load": _text_readings(loaded[1]) if loaded else None,
        }
    )


# Facts that are lists by nature; every other fact is one value.
_LIST_FACTS = frozenset({"nvml_symbols", "reason_counters", "mig_devices", "mig_list_names"})
# Facts that are dicts of their own (a run's readings, the T.Limit lines, the InfoROM versions).
_DICT_FACTS = frozenset({"idle", "load", "tlimit", "inforom"})
# A run's readings that are lists by nature.
_LIST_READINGS = frozenset({"processes", "util_na", "mig_used_mib", "mig_bar1_used_mib"})


def _first_of_repeated(facts: dict[str, Any]) -> dict[str, Any]:
    """A key nvidia-smi prints once but the file repeats (a damaged or concatenated capture) reads
    as a list: the first, as the first GPU section shows it, is the fact."""
    for key, value in facts.items():
        if key in _DICT_FACTS:
            if isinstance(value, dict):
                for k, v in value.items():
                    if isinstance(v, list) and k not in _LIST_READINGS:
                        value[k] = next((x for x in v if isinstance(x, str)), None)
            continue
        if key not in _LIST_FACTS and isinstance(value, list):
            facts[key] = next((v for v in value if isinstance(v, str)), None)
    return facts


# -- XML (-q -x) -------------------------------------------------------------


def facts_from_xml(text: str) -> dict[str, Any]:
    try:
        root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", text, count=1))
    except ET.ParseError as exc:
        raise AgentError(f"not valid nvidia-smi XML ({exc})") from None
    gpu = root.find("gpu")
    if gpu is None:
        raise AgentError("no <gpu> element found (expected `nvidia-smi -q -x` output)")

    def t(path: str, node: ET.Element = gpu) -> str | None:
        el = node.find(path)
        return (
            el.text.strip()
            if el is not None and el.text is not None and el.text.strip()
            else (None if el is None or len(el) == 0 else "present")
        )

    power = gpu.find("gpu_power_readings")
    if power is None:
        power = gpu.find("power_readings")
    pw = (lambda p: t(p, power)) if power is not None else (lambda p: None)
    mig_devices = []
    for m in gpu.findall("mig_devices/mig_device"):
        mig_devices.append(
            {
                "gi_id": _num(t("gpu_instance_id", m)),
                "ci_id": _num(t("compute_instance_id", m)),
                "sm_count": _num(t("device_attributes/shared/multiprocessor_count", m)),
                "memory_mib": _num(t("fb_memory_usage/total", m)),
                "bar1_mib": _num(t("bar1_memory_usage/total", m)),
                **{key: _num(t(f"device_attributes/shared/{tag}", m)) for key, tag in MIG_ENGINES_XML.items()},
            }
        )
    dev_id = t("pci/pci_device_id")
    sub_id = t("pci/pci_sub_system_id")
    return {
        "driver_version": t("driver_version", root),
        "cuda_version": t("cuda_version", root),
        "product_name": t("product_name"),
        "brand": t("product_brand"),
        "architecture": t("product_architecture"),
        "serial": t("serial"),
        "vbios_version": t("vbios_version"),
        "board_part_number": t("board_part_number"),
        "mig_mode": t("mig_mode/current_mig"),
        "mig_devices": mig_devices,
        "virtualization_mode": t("gpu_virtualization_mode/virtualization_mode"),
        "host_vgpu_mode": t("gpu_virtualization_mode/host_vgpu_mode"),
        "pci_device_id": ("0x" + dev_id) if dev_id and not dev_id.startswith("0x") else dev_id,
        "pci_subsystem_id": ("0x" + sub_id) if sub_id and not sub_id.startswith("0x") else sub_id,
        "pcie_max_gen": t("pci/pci_gpu_link_info/pcie_gen/max_link_gen"),
        "pcie_current_gen": t("pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
        "pcie_max_width": t("pci/pci_gpu_link_info/link_widths/max_link_width"),
        "pcie_current_width": t("pci/pci_gpu_link_info/link_widths/current_link_width"),
        "pcie_replays": t("pci/replay_counter"),
        "fan": t("fan_speed"),
        "memory_total": t("fb_memory_usage/total"),
        "memory_reserved": t("fb_memory_usage/reserved"),
        "bar1_total": t("bar1_memory_usage/total"),
        "ecc_mode": t("ecc_mode/current_ecc"),
        "retired_pages": t("retired_pages/multiple_single_bit_retirement/retired_count"),
        "remapped_rows": t("remapped_rows"),
        "temp_current": t("temperature/gpu_temp"),
        "temp_slowdown": t("temperature/gpu_temp_slow_threshold"),
        "temp_shutdown": t("temperature/gpu_temp_max_threshold"),
        "power_draw": pw("average_power_draw") or pw("power_draw"),
        "power_limit": pw("current_power_limit") or pw("enforced_power_limit") or pw("power_limit"),
        "power_default": pw("default_power_limit"),
        "power_min": pw("min_power_limit"),
        "power_max": pw("max_power_limit"),
        "max_graphics": t("max_clocks/graphics_clock"),
        "max_sm": t("max_clocks/sm_clock"),
        "max_memory": t("max_clocks/mem_clock"),
        "max_video": t("max_clocks/video_clock"),
        "app_graphics": t("applications_clocks/graphics_clock"),
        "app_memory": t("applications_clocks/mem_clock"),
        "default_app_graphics": t("default_applications_clocks/graphics_clock"),
        "max_boost_graphics": t("max_customer_boost_clocks/graphics_clock"),
        "uuid": t("uuid"),
        "bus_id": t("pci/pci_bus_id") or gpu.get("id"),
        "persistence_mode": t("persistence_mode"),
        "inforom": {
            "image": t("inforom_version/img_version"),
            "oem": t("inforom_version/oem_object"),
            "ecc": t("inforom_version/ecc_object"),
            "power": t("inforom_version/pwr_object"),
        },
        "power_management": pw("power_management"),
        "temp_gpu_max": t("temperature/gpu_temp_max_gpu_threshold"),
        "temp_mem_max": t("temperature/gpu_temp_max_mem_threshold"),
        # Schema v13 on Ada prints T.Limit margins instead of absolute thresholds.
        "tlimit": {
            "margin": t("temperature/gpu_temp_tlimit"),
            "shutdown": t("temperature/gpu_temp_max_tlimit_threshold"),
            "slowdown": t("temperature/gpu_temp_slow_tlimit_threshold"),
            "gpu_max": t("temperature/gpu_temp_max_gpu_tlimit_threshold"),
            "memory_max": t("temperature/gpu_temp_max_mem_tlimit_threshold"),
        },
        "histogram_max": t("remapped_rows/row_remapper_histogram/row_remapper_histogram_max"),
        "nvlink_status": None,
        "idle": _xml_readings(gpu, t, pw),
        "load": None,  # an XML capture is one run
        "nvml_symbols": None,  # XML captures carry no symbol list
        "reasons_supported": None,
        "reason_counters": [
            el.text.strip() for el in gpu.findall("clocks_event_reasons_counters/*") if el.text and el.text.strip()
        ]
        or None,
        "reason_counters_us": {
            COUNTER_NAMES_XML[el.tag.removeprefix("clocks_event_reasons_counters_")]: _num(el.text)
            for el in gpu.findall("clocks_event_reasons_counters/*")
            if el.tag.removeprefix("clocks_event_reasons_counters_") in COUNTER_NAMES_XML
        }
        or None,
        "board_id": t("board_id"),
        "temp_target": t("temperature/gpu_target_temperature"),
    }


def _xml_readings(gpu: ET.Element, t: Any, pw: Any) -> dict[str, Any]:
    """What the XML snapshot showed changing with load (as _text_readings)."""
    processes = []
    for p in gpu.findall("processes/process_info"):
        processes.append(
            {
                "pid": _num(t("pid", p)),
                "type": t("type", p) or "C",
                "name": t("process_name", p) or "",
                "used_mib": _num(t("used_memory", p)),
                "gi_id": _num(t("gpu_instance_id", p)),
            }
        )
    reasons = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if reasons is None:
        reasons, prefix = gpu.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    states = {el.tag.removeprefix(prefix): el.text for el in reasons} if reasons is not None else {}
    migs = gpu.findall("mig_devices/mig_device")
    procs = gpu.find("processes")
    return {
        "bar1_used_mib": _num(t("bar1_memory_usage/used")),
        "pcie_tx_kbps": _num(t("pci/tx_util")),
        "pcie_rx_kbps": _num(t("pci/rx_util")),
        "reasons": reasons_mask(states, REASON_BITS_XML),
        "util_na": [k for k in UTIL_KEYS if _said_na(t(f"utilization/{k}_util"))],
        "mig_used_mib": [_num(t("fb_memory_usage/used", m)) for m in migs],
        "mig_bar1_used_mib": [_num(t("bar1_memory_usage/used", m)) for m in migs],
        # <processes/> with <process_info> children or none: read; other children: not read.
        "processes_read": procs is None or all(child.tag == "process_info" for child in procs),
        "power_average_w": _num(pw("average_power_draw")),
        "power_instant_w": _num(pw("instant_power_draw") or pw("power_draw")),
        "temp_c": _num(t("temperature/gpu_temp")),
        "memory_temp_c": _num(t("temperature/memory_temp")),
        "clocks": {
            k: _num(t(f"clocks/{tag}"))
            for k, tag in (
                ("graphics", "graphics_clock"),
                ("sm", "sm_clock"),
                ("memory", "mem_clock"),
                ("video", "video_clock"),
            )
        },
        "pstate": _pstate(t("performance_state")),
        "fan_pct": _num(t("fan_speed")),
        "util": {k: _num(t(f"utilization/{k}_util")) for k in ("gpu", "memory", "encoder", "decoder", "jpeg", "ofa")},
        "memory_used_mib": _num(t("fb_memory_usage/used")),
        "processes": [p for p in processes if p["pid"] is not None],
    }


# -- facts -> profile ------------------------------------------------------------


def _num(value: Any) -> float | int | None:
    """'46068 MiB' -> 46068, '350.00 W' -> 350.0, '16x' -> 16; None for N/A and the like."""
    if value is None or isinstance(value, dict | list):
        return None
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", str(value))
    if not match:
        return None
    text = match.group(1)
    return float(text) if "." in text else int(text)


DEPRECATED_TEXT = "requested functionality has been deprecated"
# What a call the capture shows as deprecated answers: DEPRECATED, as the driver does.
DEPRECATED_ANSWER = "DEPRECATED"


def _deprecated(value: Any) -> bool:
    """nvidia-smi prints NVML_ERROR_DEPRECATED (26) as this sentence (captures' README)."""
    return isinstance(value, str) and DEPRECATED_TEXT in value.lower()


def not_available(value: Any) -> bool:
    """No value: None, or nvidia-smi's words for one it has not (N/A, [N/A], empty, "Not Supported", deprecated)."""
    return value is None or (
        isinstance(value, str)
        and (value.strip() in ("N/A", "", "[N/A]") or "deprecated" in value.lower() or "not supported" in value.lower())
    )


def _builtin_for(device_id: int) -> dict | None:
    for name in BUILTIN_NAMES:
        if name.endswith(("-mig", "-vgpu")):
            continue
        p = load_profile(name)
        if int(p["pci_device_id"], 16) >> 16 == device_id:
            return p
    return None


def _slug(product: str) -> str:
    s = product.lower().replace("nvidia", "").replace("geforce", "")
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-") or "gpu"


# Facts a capture may lack, and the NVML calls that then answer NOT_SUPPORTED.
MISSING_FACT_CALLS = {
    "product name": ("nvmlDeviceGetName",),
    "PCI device id": (),
    "power limit": (
        "nvmlDeviceGetPowerManagementLimit",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPowerManagementDefaultLimit",
        "nvmlDeviceGetPowerManagementLimitConstraints",
    ),
    "max clocks": ("nvmlDeviceGetMaxClockInfo",),
    "framebuffer size": ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo_v2"),
}


def profile_from_facts(f: dict[str, Any], source: str) -> dict[str, Any]:
    """A validated profile; facts the capture lacks are NOT_SUPPORTED and listed in ``not_in_capture``."""
    not_found: list[str] = []
    unsupported: list[str] = []
    errors: dict[str, str] = {}

    def lacks(fact: str) -> None:
        not_found.append(fact)
        unsupported.extend(MISSING_FACT_CALLS.get(fact, ()))

    if not f.get("product_name") or not_available(f.get("product_name")):
        lacks("product name")
    try:
        pci_full = int(str(f["pci_device_id"]), 16)
    except (KeyError, TypeError, ValueError):
        # Redacted or absent: no plausible number. The simulated card answers pciDeviceId 0 (no
        # PCI function has vendor 0), which inspect shows as unknown (null).
        lacks("PCI device id")
        pci_full = 0
    device_id = pci_full >> 16
    ref = _builtin_for(device_id) if device_id else None
    arch = ARCH_ALIASES.get(
        f.get("architecture") or "",
        f.get("architecture") or (ref or {}).get("architecture") or "unknown",
    )

    def text_or_none(key: str, symbol: str) -> str | None:
        value = f.get(key)
        if not_available(value):
            unsupported.append(symbol)
            return None
        return str(value)

    serial = text_or_none("serial", "nvmlDeviceGetSerial")
    board = text_or_none("board_part_number", "nvmlDeviceGetBoardPartNumber")
    vbios = text_or_none("vbios_version", "nvmlDeviceGetVbiosVersion")
    limit = _num(f.get("power_limit"))
    if limit is None:
        # The load model still needs a ceiling; the calls that would show it answer NOT_SUPPORTED.
        lacks("power limit")
        limit = (
            _num(f.get("power_default"))
            or _num(f.get("power_max"))
            or (ref or {}).get("power_w", {}).get("limit")
            or 100
        )
    idle = f.get("idle") or {}
    loaded = f.get("load") or {}
    averaged = arch not in INSTANT_POWER_ARCHS and not 0x2080 <= device_id <= 0x20FF
    idle_w = _draw(idle, averaged)
    if idle_w is None:
        lacks("idle power draw")
    power = {
        "limit": limit,
        "default": _num(f.get("power_default")) or limit,
        "min": _num(f.get("power_min")) or round(limit * 0.3),
        "max": _num(f.get("power_max")) or limit,
        "idle": idle_w if idle_w is not None else (ref or {}).get("power_w", {}).get("idle") or round(limit * 0.1),
    }
    maxc = {k: _num(f.get(f"max_{k}")) for k in ("graphics", "sm", "memory", "video")}
    if maxc["graphics"] is None or maxc["memory"] is None:
        lacks("max clocks")
        ref_max = (ref or {}).get("clocks_mhz", {}).get("max") or {}
        for key, guess in (("graphics", 1500), ("memory", 5000)):
            maxc[key] = maxc[key] or ref_max.get(key) or guess
    maxc["sm"] = maxc["sm"] or maxc["graphics"]
    maxc["video"] = maxc["video"] or maxc["graphics"]
    apps = None
    if not not_available(f.get("app_graphics")) and _num(f.get("app_graphics")):
        apps = {
            "graphics": _num(f["app_graphics"]),
            "memory": _num(f.get("app_memory")) or maxc["memory"],
        }
    idle_clocks = {k: v for k, v in (idle.get("clocks") or {}).items() if v is not None}
    if len(idle_clocks) < 4:
        lacks("idle clocks")
        ref_idle = copy.deepcopy((ref or {}).get("clocks_mhz", {}).get("idle")) or {}
        for key in ("graphics", "sm", "memory", "video"):
            if key not in idle_clocks:
                # Said, not silently filled: the built-in profile's idle clock, else the profile
                # model's share of max (gpuagent.sim.profile.validate: 10 %, video 40 %).
                model = f"built-in profile {ref['name']!r}" if key in ref_idle and ref else "a share of max"
                lacks(f"idle {key} clock (answered from {model})")
        idle_clocks = {**ref_idle, **idle_clocks}
    known = KNOWN_CARDS.get(device_id)
    bus_width = (ref or {}).get("memory", {}).get("bus_width_bits") or (known[0] if known else None)
    card = "the PCI device id is not stated" if not device_id else f"no table entry for device 0x{device_id:04X}"
    if bus_width is None:
        lacks(f"memory bus width (not shown by nvidia-smi; {card})")
    if not ((ref or {}).get("l2_cache_bytes") or known):
        lacks(f"L2 cache size (not shown by nvidia-smi; {card})")
    mem_total = _num(f.get("memory_total"))
    if mem_total is None:
        lacks("framebuffer size")
        mem_total = (ref or {}).get("memory", {}).get("total_mib") or 1024
    memory = {
        "type": (ref or {}).get("memory", {}).get("type"),
        "total_mib": mem_total,
        "reserved_mib": _num(f.get("memory_reserved")) or 0,
        "bar1_total_mib": _num(f.get("bar1_total")) or 256,
        "bus_width_bits": bus_width,
    }
    max_gen = _num(f.get("pcie_max_gen")) or 4
    pcie = {
        # The capture's current generation is what an idle card shows (links train down when idle).
        "max_gen": max_gen,
        "current_gen": max_gen,
        "idle_gen": _num(f.get("pcie_current_gen")) or max_gen,
        "max_width": _num(f.get("pcie_max_width")) or 16,
        "current_width": _num(f.get("pcie_current_width")) or _num(f.get("pcie_max_width")) or 16,
    }
    fan = None
    if not not_available(f.get("fan")):
        fan = {"idle": _num(f.get("fan")) or 0}
        if loaded.get("fan_pct") is not None:
            fan["max"] = loaded["fan_pct"]
        else:
            fan["max"] = fan["idle"]  # no loaded run: the fan stays where the capture shows it
            lacks("loaded fan speed")
    ecc_text = f.get("ecc_mode")
    ecc = None if not_available(ecc_text) else {"enabled": str(ecc_text).lower().startswith("enabled")}
    mig_text = f.get("mig_mode")
    mig = None
    if not not_available(mig_text):
        ref_mig = copy.deepcopy((ref or {}).get("mig")) or {
            "max_devices": 7,
            "gpu_instance_profiles": [],
        }
        mig = {
            "enabled": str(mig_text).lower().startswith("enabled"),
            "max_devices": ref_mig.get("max_devices", 7),
            "gpu_instance_profiles": ref_mig.get("gpu_instance_profiles", []),
            "instances": [],
        }
        if mig["enabled"]:
            listed = f.get("mig_list_names") or []
            mig["instances"] = [
                _mig_instance(d, mig["gpu_instance_profiles"], listed[n] if n < len(listed) else None)
                for n, d in enumerate(f.get("mig_devices") or [])
            ]
    virt_text = (f.get("virtualization_mode") or "None").lower().replace("-", "").replace(" ", "")
    virt_mode = {
        "none": "none",
        "passthrough": "passthrough",
        "vgpu": "vgpu",
        "hostvgpu": "host_vgpu",
        "hostvsga": "host_vsga",
    }.get(virt_text, "none")
    virtualization: dict[str, Any] = {"mode": virt_mode}
    if virt_mode == "host_vgpu":
        host = (f.get("host_vgpu_mode") or "").lower()
        virtualization["host_vgpu_mode"] = "non_sriov" if "non" in host else "sriov"
        virtualization["vgpu_types"] = []
        virtualization["vgpu_instances"] = []
    temps = temperatures(f, ref, lacks)
    if apps is None:
        unsupported += ["nvmlDeviceGetApplicationsClock", "nvmlDeviceGetDefaultApplicationsClock"]
    # "Requested functionality has been deprecated" is NVML_ERROR_DEPRECATED, not N/A.
    deprecated = []
    if _deprecated(f.get("app_graphics")):
        deprecated.append("nvmlDeviceGetApplicationsClock")
    if _deprecated(f.get("default_app_graphics")) or _deprecated(f.get("app_graphics")):
        deprecated.append("nvmlDeviceGetDefaultApplicationsClock")
    for symbol in deprecated:
        errors[symbol] = DEPRECATED_ANSWER
    if not_available(f.get("retired_pages")):
        unsupported += [
            "nvmlDeviceGetRetiredPages",
            "nvmlDeviceGetRetiredPages_v2",
            "nvmlDeviceGetRetiredPagesPendingStatus",
        ]
    remapped = not not_available(f.get("remapped_rows"))
    hopper_plus = arch in ("Hopper", "Blackwell")
    product = f["product_name"] if "product name" not in not_found else "NVIDIA GPU"
    name = _slug(product) + ("-mig" if mig and mig["enabled"] else "")
    reasons_mask = _num_hex(f.get("reasons_supported"))
    counters = f.get("reason_counters")
    if f.get("max_boost_graphics") is not None and not_available(f.get("max_boost_graphics")):
        # "Max Customer Boost Clocks / Graphics: N/A" (the GeForce captures)
        unsupported.append("nvmlDeviceGetMaxCustomerBoostClock")
    if _deprecated(f.get("power_management")):
        # 590+ captures: "Power Management: Requested functionality has been deprecated"
        # (nvml.h: DEPRECATED(13.0) nvmlDeviceGetPowerManagementMode).
        errors["nvmlDeviceGetPowerManagementMode"] = DEPRECATED_ANSWER
    captured = {"idle": _captured_run(idle, averaged)}
    if f.get("load"):
        captured["load"] = _captured_run(loaded, averaged)
    else:
        lacks("loaded run")
    # What nvidia-smi says N/A for (MIG on: every utilisation) is NOT_SUPPORTED, as the card answers.
    for key in idle.get("util_na") or []:
        unsupported.append(UTIL_CALLS[key])
    for key, fact in (
        ("bar1_used_mib", "BAR1 in use"),
        ("pcie_tx_kbps", "PCIe throughput"),
        ("reasons", "clock-event reasons"),
    ):
        if idle.get(key) is None:
            lacks(fact)
    if not idle.get("processes_read", True):
        lacks("processes (a layout the importer does not read)")
    uuid = f.get("uuid")
    if not_available(uuid) or not re.match(r"^GPU-[0-9a-fA-F-]{36}$", str(uuid)) or set(str(uuid)[4:]) <= {"0", "-"}:
        uuid = None  # masked with zeros (nvidia_gpu_exporter captures): derived from the seed
    captured_bus_id = str(f.get("bus_id") or "").upper()
    bus_id: str | None = captured_bus_id
    if not re.match(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$", captured_bus_id):
        bus_id = None  # absent or damaged: the simulator's own slot
        lacks("PCI bus id")
    cuda = _num(f.get("cuda_version"))
    cuda_int = None
    if cuda is not None:
        major, _, minor = str(f.get("cuda_version")).split("[")[0].strip().partition(".")
        cuda_int = int(major) * 1000 + int((minor or "0")[:2] or 0) * 10
    board_id = _num_hex(f.get("board_id"))
    if board_id is None:
        lacks("board id")
    counters_us = {k: v for k, v in (f.get("reason_counters_us") or {}).items() if v is not None}
    profile = {
        "schema": 1,
        "board_id": board_id,
        "name": name,
        "source": f"imported from {source}",
        "default_scenario": "idle",
        "uuid": uuid,
        "pci_bus_id": bus_id,
        "cuda_driver_version": cuda_int,
        "captured": captured,
        # None where the capture says N/A: those calls answer NOT_SUPPORTED.
        "inforom": {k: (None if not_available(v) else str(v)) for k, v in (f.get("inforom") or {}).items()},
        "persistence_mode": None
        if not_available(f.get("persistence_mode"))
        else str(f.get("persistence_mode")).lower().startswith("enabled"),
        "pstate": {k: v for k, v in (("idle", idle.get("pstate")), ("active", loaded.get("pstate"))) if v is not None},
        "driver_version": f.get("driver_version"),
        "product_name": product,
        "brand": "GeForce" if "geforce" in product.lower() else (f.get("brand") or "NVIDIA"),
        "architecture": arch,
        "pci_device_id": f"0x{pci_full:08X}",
        # Optional: a value that is not hex (N/A, a damaged line) is left out, as NVML's 0 would be.
        "pci_subsystem_id": f"0x{sub:08X}" if (sub := _num_hex(f.get("pci_subsystem_id"))) is not None else None,
        "serial": serial,
        "board_part_number": board,
        "vbios_version": vbios,
        "memory": memory,
        "l2_cache_bytes": (ref or {}).get("l2_cache_bytes") or (known[1] if known else None),
        "clocks_mhz": {"max": maxc, "idle": idle_clocks, "applications": apps},
        "power_w": power,
        "pcie": pcie,
        "temperature_c": temps,
        "fan_pct": fan,
        "ecc": ecc,
        "remapped_rows": remapped,
        "retired_pages": not not_available(f.get("retired_pages")),
        "gpm": hopper_plus,
        "nvlink": copy.deepcopy((ref or {}).get("nvlink")),
        "mig": mig,
        "virtualization": virtualization,
        # The capture's --query-gpu clocks_event_reasons.supported where it has one (0x1FF on GeForce).
        "clocks_event_reasons_supported": reasons_mask
        if reasons_mask is not None
        else (ref or {}).get("clocks_event_reasons_supported", 0x1EF),
        "unsupported": sorted(set(unsupported) - set(errors)),
        "errors": errors,
        "load": copy.deepcopy((ref or {}).get("load")) or {},
        "faults": [],
        "not_in_capture": not_found,
    }
    hist_max = _num(f.get("histogram_max"))
    if remapped and hist_max is not None:
        profile["remap_histogram_banks"] = hist_max
    status = f.get("nvlink_status")
    if status == "inactive" and not profile["nvlink"]:
        # "Unable to retrieve Nvlink information as all links are inActive" (RTX 2080 SUPER):
        # the card has NVLink (one bridge link, TU104; unverified) and every link is down.
        profile["nvlink"] = {"links": 1, "version": 2, "topology": "bridge", "all_inactive": True}
    elif status == "absent":
        profile["nvlink"] = None
    if counters is not None:
        # "Clocks Event Reasons Counters" with values (e.g. "0 us") means the time fields answer.
        profile["clocks_event_reason_counters"] = any(not not_available(v) for v in counters)
    replays = _num(f.get("pcie_replays"))
    if replays:
        profile["pcie_replays_start"] = replays
    if counters_us:
        # The counters count from the driver's load: the simulated ones start where the capture's stood.
        profile["clocks_event_reason_counters_start_us"] = counters_us
    if f.get("nvml_symbols"):
        profile["nvml_symbols"] = f["nvml_symbols"]
    return validate(profile, source)


# nvml.h (nvmlDeviceGetPowerUsage): averaged over 1 s on Ampere (except GA100) and newer,
# instantaneous before; the power collector picks the same way.
INSTANT_POWER_ARCHS = frozenset({"Kepler", "Maxwell", "Pascal", "Volta", "Turing", "unknown"})


def _draw(run: dict[str, Any], averaged: bool) -> float | None:
    """The power nvmlDeviceGetPowerUsage gave in that run (average or instantaneous by arch)."""
    first, second = ("power_average_w", "power_instant_w") if averaged else ("power_instant_w", "power_average_w")
    value = run.get(first)
    return value if value is not None else run.get(second)


# nvidia-smi's utilisation lines and the NVML call behind each.
UTIL_CALLS = {
    "gpu": "nvmlDeviceGetUtilizationRates",
    "memory": "nvmlDeviceGetUtilizationRates",
    "encoder": "nvmlDeviceGetEncoderUtilization",
    "decoder": "nvmlDeviceGetDecoderUtilization",
    "jpeg": "nvmlDeviceGetJpgUtilization",
    "ofa": "nvmlDeviceGetOfaUtilization",
}


def _captured_run(run: dict[str, Any], averaged: bool) -> dict[str, Any]:
    """One captured run as the simulator replays it (None where the capture says N/A)."""
    return {
        "bar1_used_mib": run.get("bar1_used_mib"),
        "pcie_tx_kbps": run.get("pcie_tx_kbps"),
        "pcie_rx_kbps": run.get("pcie_rx_kbps"),
        "reasons": run.get("reasons"),
        "mig_used_mib": run.get("mig_used_mib") or [],
        "mig_bar1_used_mib": run.get("mig_bar1_used_mib") or [],
        "power_w": _draw(run, averaged),
        "temp_c": run.get("temp_c"),
        "memory_temp_c": run.get("memory_temp_c"),
        "clocks": run.get("clocks") or {},
        "pstate": run.get("pstate"),
        "fan_pct": run.get("fan_pct"),
        "util": run.get("util") or {},
        "memory_used_mib": run.get("memory_used_mib"),
        "processes": run.get("processes") or [],
    }


def temperatures(f: dict[str, Any], ref: dict | None, lacks: Any) -> dict[str, Any]:
    """temperature_c: idle and loaded from the two runs; thresholds as the capture prints them.

    Driver 590 on Hopper (and schema v13 on Ada) prints T.Limit margins, not thresholds: "GPU
    T.Limit Temp 46 C" at "GPU Current Temp 41 C" puts max operating at 41 + 46 = 87 °C, and a
    threshold printed as "-2 C" lies 2 °C past it (slowdown 89 °C). The margins are the facts
    (tlimit); absolute thresholds derived from them are marked in thresholds_derived_from_tlimit.
    """
    idle = (f.get("idle") or {}).get("temp_c")
    if idle is None:
        idle = _num(f.get("temp_current"))
    loaded = (f.get("load") or {}).get("temp_c")
    temps: dict[str, Any] = {"idle": idle if idle is not None else 30}
    if idle is None:
        lacks("GPU temperature")
    if loaded is not None:
        temps["max"] = loaded
    else:
        ref_max = ((ref or {}).get("temperature_c") or {}).get("max")
        temps["max"] = ref_max if ref_max is not None else temps["idle"]
        temps["max_source"] = (
            f"built-in profile {ref['name']!r}" if ref_max is not None and ref else "idle (no loaded run)"
        )
    for key, src in (
        ("target", "temp_target"),
        ("slowdown", "temp_slowdown"),
        ("shutdown", "temp_shutdown"),
        ("gpu_max", "temp_gpu_max"),
        ("memory_max", "temp_mem_max"),
    ):
        value = _num(f.get(src))
        if value is not None:
            temps[key] = value
    tl = {k: _num(v) for k, v in (f.get("tlimit") or {}).items()}
    margin = tl.get("margin")
    if margin is not None:
        temps["tlimit"] = {k: v for k, v in tl.items() if v is not None}
        current = _num(f.get("temp_current")) if idle is None else idle
        if current is not None:
            base = current + margin
            derived = []
            for key in ("shutdown", "slowdown", "gpu_max"):
                below = tl.get(key)
                if key not in temps and below is not None:
                    temps[key] = base - below
                    derived.append(key)
            if derived:
                temps["thresholds_derived_from_tlimit"] = derived
    return temps


def _num_hex(value: Any) -> int | None:
    """'0x00000000000001FF' -> 511; None for N/A or absent."""
    try:
        return int(str(value), 16) if value and str(value).lower().startswith("0x") else None
    except ValueError:
        return None


def _mig_instance(d: dict, table: list[dict], listed: str | None = None) -> dict[str, Any]:
    """A capture's MIG device: the profile `nvidia-smi -L` names (where the capture lists it),
    else the GPU instance profile that best matches its memory and SM count."""
    ci_slices = None
    by_name = None
    if listed:
        # "1c.3g.71gb": a one-slice compute instance of a 3g.71gb GPU instance.
        prefix, _, gi_name = listed.partition(".") if re.match(r"^\d+c\.", listed) else ("", "", listed)
        by_name = next((p for p in table if p["name"] == gi_name), None)
        if prefix:
            ci_slices = int(prefix[:-1])
    best = None
    for p in table:
        score = abs(int(p["memory_mib"]) - (d.get("memory_mib") or 0)) + 1000 * abs(
            int(p["sm_count"]) - (d.get("sm_count") or 0)
        )
        if best is None or score < best[0]:
            best = (score, p)
    p = by_name or (best[1] if best else {"profile_id": 0, "name": "unknown", "slices": 1})
    out = {
        "gi_id": d.get("gi_id") or 0,
        "ci_id": d.get("ci_id") or 0,
        "profile_id": int(p["profile_id"]),
        "profile": p["name"],
        "slices": int(p.get("slices", 1)),
        "sm_count": d.get("sm_count") or p.get("sm_count", 0),
        "memory_mib": d.get("memory_mib") or p.get("memory_mib", 0),
        "bar1_mib": d.get("bar1_mib") or 0,
        # The engines the capture counts (Device Attributes / Shared), where it states them.
        **{key: d[key] for key in MIG_ENGINES_TEXT if d.get(key) is not None},
    }
    if ci_slices:
        out["ci_slices"] = ci_slices
    return out


def import_capture(path: str | Path) -> dict[str, Any]:
    """Read a capture file (text or XML, detected by content) into a validated profile."""
    return import_capture_facts(path)[0]


def import_capture_facts(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(validated profile, the facts parsed from the capture) of a capture file."""
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise AgentError(f"cannot read capture {str(path)!r}: {exc.strerror or exc}") from None
    head = text.lstrip()[:200]
    try:
        facts = (
            facts_from_xml(text)
            if head.startswith("<?xml") or head.startswith("<nvidia_smi_log")
            else facts_from_text(text)
        )
    except AgentError as exc:
        raise AgentError(f"capture {path.name}: {exc}") from None
    return profile_from_facts(copy.deepcopy(facts), path.name), facts
