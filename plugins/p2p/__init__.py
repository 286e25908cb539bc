"""p2p: which GPUs can reach each other directly, and over what (gpu_p2p, one point per ordered pair)."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import pynvml

import gpuagent
from gpuagent.gpus.gpu import Gpu, GpuLost, as_str
from gpuagent.gpus.nvlinks import card_links, link_states
from gpuagent.plugins.p2p.schema import SCHEMA
from gpuagent.schema.measurements import GPU_P2P

MEASUREMENT = GPU_P2P

# The P2P capability indices, as plain ints. In current nvidia-ml-py
# NVML_P2P_CAPS_INDEX_READ is the tuple (0,) (a stray trailing comma), which
# ctypes refuses as an enum argument; never pass pynvml's constants directly.
P2P_CAPS = {
    "read": 0,  # NVML_P2P_CAPS_INDEX_READ
    "write": 1,  # NVML_P2P_CAPS_INDEX_WRITE
    "nvlink": 2,  # NVML_P2P_CAPS_INDEX_NVLINK
    "atomics": 3,  # NVML_P2P_CAPS_INDEX_ATOMICS
    "prop": 4,  # NVML_P2P_CAPS_INDEX_PROP (PCI)
}

P2P_STATUS = {
    pynvml.NVML_P2P_STATUS_OK: "ok",
    pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED: "chipset_not_supported",
    pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED: "gpu_not_supported",
    pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED: "topology_not_supported",
    pynvml.NVML_P2P_STATUS_DISABLED_BY_REGKEY: "disabled_by_regkey",
    pynvml.NVML_P2P_STATUS_NOT_SUPPORTED: "not_supported",
    pynvml.NVML_P2P_STATUS_UNKNOWN: "unknown",
}

# nvidia-smi topo -m names for nvmlDeviceGetTopologyCommonAncestor's levels.
TOPOLOGY_NAMES = {
    pynvml.NVML_TOPOLOGY_INTERNAL: "X",
    pynvml.NVML_TOPOLOGY_SINGLE: "PIX",
    pynvml.NVML_TOPOLOGY_MULTIPLE: "PXB",
    pynvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
    pynvml.NVML_TOPOLOGY_NODE: "NODE",
    pynvml.NVML_TOPOLOGY_SYSTEM: "SYS",
}


def caps_index(value: int | tuple[int, ...]) -> int:
    """An NVML P2P caps index as the int ctypes needs, whether pynvml spelt it ``0`` or ``(0,)``."""
    if isinstance(value, tuple):
        (value,) = value
    return int(value)


def status_name(code: int | None) -> str:
    return P2P_STATUS.get(code, "unknown") if code is not None else "unknown"


def normalize_bus_id(bus_id: str) -> str:
    """PCI bus ids compare case-blind and with NVML's 8- or 4-digit domain."""
    bus_id = bus_id.strip().lower()
    domain, sep, rest = bus_id.partition(":")
    if sep and len(domain) > 4 and rest.count(":") == 1:
        domain = domain[-4:]
    return f"{domain}{sep}{rest}"


class NvlinkMap:
    """Where each GPU's active NVLinks go: direct peers (by PCI bus id) or NVSwitches."""

    def __init__(self) -> None:
        self.direct: dict[str, dict[str, int]] = {}  # uuid -> peer bus id -> active links
        self.switch_links: dict[str, int] = {}  # uuid -> active links ending at an NVSwitch

    def links_between(self, gpu: Gpu, peer: Gpu) -> int:
        direct = self.direct.get(gpu.uuid, {}).get(normalize_bus_id(peer.pci_bus_id), 0)
        if direct:
            return direct
        # Through NVSwitches (HGX): every GPU on the fabric reaches every other
        # over all its switch links; nvidia-smi shows that count as NV#.
        if self.switch_links.get(gpu.uuid) and self.switch_links.get(peer.uuid):
            return self.switch_links[gpu.uuid]
        return 0


def map_nvlinks(gpus: Iterable[Gpu]) -> NvlinkMap:
    gpus = list(gpus)
    gpu_bus_ids = {normalize_bus_id(g.pci_bus_id) for g in gpus}
    result = NvlinkMap()
    for gpu in gpus:
        try:
            peers: dict[str, int] = {}
            switch = 0
            links = card_links(gpu)
            states = link_states(gpu, links)  # one field-values call for every link
            for link in links:
                if states.get(link) != pynvml.NVML_FEATURE_ENABLED:
                    continue
                # The far end of a link holds while it stays up: read once.
                bus_id, remote_type = gpu.remember(f"p2p.remote:{link}", functools.partial(remote_end, gpu, link))
                if remote_type == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH or (
                    remote_type is None and bus_id and bus_id not in gpu_bus_ids
                ):
                    switch += 1
                elif bus_id:
                    peers[bus_id] = peers.get(bus_id, 0) + 1
            result.direct[gpu.uuid] = peers
            result.switch_links[gpu.uuid] = switch
        except GpuLost:
            continue
    return result


def remote_end(gpu: Gpu, link: int) -> tuple[str, int | None]:
    """(normalised PCI bus id or "", NVML device type or None) at the far end of a link."""
    remote = gpu.query(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, link)
    remote_type = gpu.query(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, link)
    return (normalize_bus_id(as_str(remote.busId)) if remote is not None else ""), remote_type


def pair_facts(gpu: Gpu, peer: Gpu) -> tuple[dict[str, object], int | None]:
    """P2P statuses and the PCIe common ancestor of a pair: they change only with hardware,
    BIOS or driver (read once per pair; a transient refusal is asked again)."""

    def read() -> tuple[dict[str, object], int | None]:
        fields: dict[str, object] = {}
        for cap, index in P2P_CAPS.items():
            code = gpu.query(pynvml.nvmlDeviceGetP2PStatus, peer.handle, index)
            name = status_name(code)
            fields[f"{cap}_status"] = name
            fields[f"{cap}_ok"] = name == "ok"
        return fields, gpu.query(pynvml.nvmlDeviceGetTopologyCommonAncestor, peer.handle)

    return gpu.remember(f"p2p.pair:{peer.uuid}", read)


def read_pair(gpu: Gpu, peer: Gpu, nvlinks: NvlinkMap) -> dict[str, object]:
    """The gpu_p2p fields of one ordered pair (what the collector emits and `inspect` shows)."""
    static, level = pair_facts(gpu, peer)
    fields: dict[str, object] = dict(static)
    links = nvlinks.links_between(gpu, peer)
    pcie_topology = TOPOLOGY_NAMES.get(level) if level is not None else None
    fields["nvlink_count"] = links
    fields["pcie_topology"] = pcie_topology
    fields["topology"] = f"NV{links}" if links else pcie_topology
    return fields


def pair_tags(gpu: Gpu, peer: Gpu) -> dict[str, str]:
    return {**gpu.tags, "peer_gpu": str(peer.index), "peer_uuid": peer.uuid}


def read_points(
    gpus: Iterable[Gpu], rows: Iterable[Gpu] | None = None
) -> list[tuple[dict[str, str], dict[str, object]]]:
    """(tags, fields) of every gpu_p2p point: each GPU of ``rows`` (default: all) to every other GPU.

    Fewer than two GPUs: no points. A pair with a GPU lost while read is left out.
    """
    gpus = list(gpus)
    if len(gpus) < 2:
        return []
    nvlinks = map_nvlinks(gpus)
    points = []
    for gpu in gpus if rows is None else list(rows):
        for peer in gpus:
            if peer is gpu or gpu.lost or peer.lost:
                continue
            try:
                points.append((pair_tags(gpu, peer), read_pair(gpu, peer, nvlinks)))
            except GpuLost:
                continue
    return points


class P2pCollector(gpuagent.Collector):
    """P2P capability and topology between every ordered pair of GPUs.

    Topology changes only with hardware or driver changes, so this runs every
    few minutes by default (and, like every collector, once at start).
    """

    name = "p2p"
    schema = SCHEMA
    requires_gpus = True
    default_interval = 300.0

    @staticmethod
    def read_pairs(gpus, rows=None) -> list[tuple[dict[str, str], dict[str, object]]]:
        """inspect's P2P matrix: the gpu_p2p points of ``rows`` (default: all) to every other GPU."""
        return read_points(gpus, rows=rows)

    def collect(self, acc: gpuagent.Accumulator) -> None:
        for tags, fields in read_points(self.gpus):
            acc.add_fields(MEASUREMENT, fields, tags=tags)


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(P2pCollector)
