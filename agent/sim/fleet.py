"""Fleet SPEC parsing and the node's topology (PCIe tree, NUMA, NVLink, P2P matrix).

SPEC: comma-separated items ``NAME[:COUNT][@FAULT...]``; NAME is a built-in
profile or the path of a profile JSON file; faults are described in
gpuagent.sim.faults. Examples: ``l40s:4``, ``h100-sxm:8@xid=3:79:20s``,
``l40s:2,rtx4090:2,h100-pcie:1``.

Topology rules (consistent with how such machines are built):

- GPUs are split over two CPU sockets (NUMA nodes) when there are 4 or more;
  GPUs on different sockets are SYS apart and have no PCIe P2P.
- Datacenter cards sit behind PCIe switches, two per leaf switch, two leaf
  switches per upper switch: same leaf = PIX (SINGLE), same upper = PXB
  (MULTIPLE), otherwise NODE. GeForce cards sit on CPU root ports: PHB.
- Cards of different models are NODE (same socket) or SYS apart and have no P2P.
- GeForce pairs report P2P CHIPSET_NOT_SUPPORTED (as an RTX 4090 does).
- NVLink ``topology: switch`` (SXM boards with NVSwitch): every pair of the same
  model is NVLink-connected; ``bridge`` (H100 PCIe): NVLink bridges pair GPUs
  0-1, 2-3, ... of the item.
- MIG-enabled GPUs report no P2P (CUDA P2P is unavailable in MIG mode).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml

from gpuagent.errors import AgentError
from gpuagent.sim.faults import Fault, faults_from_profile, parse_fault
from gpuagent.sim.profile import BUILTIN_NAMES, load_profile

MAX_GPUS = 64

P2P_OK = pynvml.NVML_P2P_STATUS_OK
P2P_CNS = pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED
P2P_GNS = pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED
P2P_TNS = pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED
P2P_NS = pynvml.NVML_P2P_STATUS_NOT_SUPPORTED
CAPS_NVLINK = pynvml.NVML_P2P_CAPS_INDEX_NVLINK


@dataclass
class FleetItem:
    name: str
    profile: dict
    count: int
    first_index: int
    faults: list[Fault] = field(default_factory=list)


def parse_spec(spec: str) -> list[FleetItem]:
    """``l40s:2,h100-sxm:1@lost=0:30s`` -> items; AgentError naming the bad item otherwise."""
    if not isinstance(spec, str) or not spec.strip():
        raise AgentError(f"empty simulator SPEC; use NAME[:COUNT],... with NAME one of {', '.join(BUILTIN_NAMES)}")
    items: list[FleetItem] = []
    index = 0
    for raw in spec.split(","):
        item = raw.strip()
        try:
            head, *fault_texts = item.split("@")
            name, count = head, 1
            base, sep, tail = head.rpartition(":")
            if sep and tail.strip().isdigit():
                name, count = base, int(tail)
            elif sep and not ("/" in head or head.endswith(".json")):
                raise AgentError(f"COUNT {tail!r} must be a positive whole number (1..{MAX_GPUS})")
            name = name.strip()
            if not name:
                raise AgentError("missing profile name")
            if not 1 <= count <= MAX_GPUS:
                raise AgentError(f"COUNT must be 1..{MAX_GPUS}")
            profile = load_profile(name)
            faults = faults_from_profile(profile.get("faults"), index, count, f"profile {name!r}")
            for text in fault_texts:
                faults.extend([parse_fault(text, offset=index, count=count)])
        except AgentError as exc:
            hint = (
                ""
                if "known" in str(exc)
                else (
                    f" (SPEC is NAME[:COUNT][@FAULT...],...; known profiles: {', '.join(BUILTIN_NAMES)} or a profile JSON path)"
                )
            )
            raise AgentError(f"bad simulator SPEC item {item!r}: {exc}{hint}") from None
        items.append(FleetItem(name, profile, count, index, faults))
        index += count
        if index > MAX_GPUS:
            raise AgentError(f"simulator SPEC {spec!r} has more than {MAX_GPUS} GPUs")
    return items


@dataclass
class Slot:
    """Where one GPU sits in the node."""

    index: int
    item: int  # which SPEC item
    local: int  # index within the item
    model: str  # product name
    numa: int
    leaf: int | None  # PCIe leaf switch id (None: on a CPU root port)
    upper: int | None
    bus: int
    nvlink_topology: str | None
    mig_enabled: bool
    geforce: bool


class Topology:
    def __init__(self, items: list[FleetItem]):
        total = sum(it.count for it in items)
        half = (total + 1) // 2 if total >= 4 else total
        self.slots: list[Slot] = []
        for n, it in enumerate(items):
            p = it.profile
            geforce = not p.get("pcie", {}).get("behind_switch", p.get("brand") != "GeForce")
            nvl = (p.get("nvlink") or {}).get("topology") if p.get("nvlink") else None
            mig = bool((p.get("mig") or {}).get("enabled"))
            for local in range(it.count):
                g = it.first_index + local
                numa = 0 if g < half else 1
                self.slots.append(Slot(g, n, local, p["product_name"], numa, None, None, 0, nvl, mig, geforce))
        # Switch ids: two GPUs per leaf within an item and socket, two leaves per upper switch.
        leaf_id = 0
        counts: dict[tuple[int, int], int] = {}
        for s in self.slots:
            if s.geforce:
                continue
            key = (s.item, s.numa)
            k = counts.get(key, 0)
            counts[key] = k + 1
            if k % 2 == 0:
                leaf_id += 1
            s.leaf = leaf_id
            s.upper = hash((s.item, s.numa, k // 4))
        per_numa = [0, 0]
        for s in self.slots:
            base = 0x01 if s.numa == 0 else 0x81
            s.bus = base + per_numa[s.numa] * (0x10 if total <= 8 else 0x04)
            per_numa[s.numa] += 1

    def level(self, i: int, j: int) -> int:
        if i == j:
            return pynvml.NVML_TOPOLOGY_INTERNAL
        a, b = self.slots[i], self.slots[j]
        if a.numa != b.numa:
            return pynvml.NVML_TOPOLOGY_SYSTEM
        if a.model != b.model or a.item != b.item:
            return pynvml.NVML_TOPOLOGY_NODE
        if a.geforce or b.geforce:
            return pynvml.NVML_TOPOLOGY_HOSTBRIDGE
        if a.leaf == b.leaf:
            return pynvml.NVML_TOPOLOGY_SINGLE
        if a.upper == b.upper:
            return pynvml.NVML_TOPOLOGY_MULTIPLE
        return pynvml.NVML_TOPOLOGY_NODE

    def nvlink_peer(self, i: int) -> int | None:
        """The bridged partner of an NVLink-bridge GPU (None without one)."""
        s = self.slots[i]
        if s.nvlink_topology != "bridge":
            return None
        partner_local = s.local ^ 1
        for t in self.slots:
            if t.item == s.item and t.local == partner_local:
                return t.index
        return None

    def nvlinked(self, i: int, j: int) -> bool:
        if i == j:
            return False
        a, b = self.slots[i], self.slots[j]
        if a.nvlink_topology is None or a.model != b.model:
            return False
        if a.nvlink_topology == "switch":
            return b.nvlink_topology == "switch"
        return self.nvlink_peer(i) == j

    def p2p(self, i: int, j: int, caps: int) -> int:
        a, b = self.slots[i], self.slots[j]
        if i == j:
            return P2P_NS
        if a.mig_enabled or b.mig_enabled:
            return P2P_NS
        if a.model != b.model:
            return P2P_GNS
        linked = self.nvlinked(i, j)
        if caps == CAPS_NVLINK:
            return P2P_OK if linked else P2P_NS
        if a.geforce:
            return P2P_CNS
        if linked or a.numa == b.numa:
            return P2P_OK
        return P2P_TNS
