"""What the p2p plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPU_P2P,
        (
            gauge(
                "read_status",
                str,
                help="`ok`, `chipset_not_supported`, `gpu_not_supported`, `topology_not_supported`, `disabled_by_regkey`, `not_supported`, `unknown`",
                source="`nvmlDeviceGetP2PStatus` (caps index 0, READ)",
            ),
            gauge("read_ok", bool, help='`read_status == "ok"`', source="derived"),
            gauge("write_status", str, help="the same for P2P writes", source="`nvmlDeviceGetP2PStatus` (1, WRITE)"),
            gauge("write_ok", bool, help="the same for P2P writes", source="`nvmlDeviceGetP2PStatus` (1, WRITE)"),
            gauge(
                "nvlink_status", str, help="the same for P2P over NVLink", source="`nvmlDeviceGetP2PStatus` (2, NVLINK)"
            ),
            gauge(
                "nvlink_ok", bool, help="the same for P2P over NVLink", source="`nvmlDeviceGetP2PStatus` (2, NVLINK)"
            ),
            gauge(
                "atomics_status", str, help="the same for P2P atomics", source="`nvmlDeviceGetP2PStatus` (3, ATOMICS)"
            ),
            gauge("atomics_ok", bool, help="the same for P2P atomics", source="`nvmlDeviceGetP2PStatus` (3, ATOMICS)"),
            gauge("prop_status", str, help="the same for PCIe P2P", source="`nvmlDeviceGetP2PStatus` (4, PROP / PCI)"),
            gauge("prop_ok", bool, help="the same for PCIe P2P", source="`nvmlDeviceGetP2PStatus` (4, PROP / PCI)"),
            gauge(
                "topology",
                str,
                help="as `nvidia-smi topo -m` names it: `NV#` (# = active NVLinks joining the two) when NVLink joins them, else `pcie_topology`",
                source="derived",
            ),
            gauge(
                "pcie_topology",
                str,
                help="the PCIe level alone, even when NVLink joins them: `X` (same board), `PIX`, `PXB`, `PHB`, `NODE`, `SYS`",
                source="`nvmlDeviceGetTopologyCommonAncestor`",
            ),
            gauge(
                "nvlink_count",
                int,
                unit="links",
                help="active NVLinks between the two: links whose remote PCI bus id is the peer's, or, through NVSwitches, the GPU's active switch links; 0 without NVLink",
                source="`NVML_FI_DEV_NVLINK_GET_STATE` (else `nvmlDeviceGetNvLinkState`), `nvmlDeviceGetNvLinkRemotePciInfo`, `nvmlDeviceGetNvLinkRemoteDeviceType`",
            ),
        ),
        tags=("peer_gpu", "peer_uuid"),
    ),
)
