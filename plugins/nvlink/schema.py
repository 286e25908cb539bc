"""What the nvlink plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPU_NVLINK,
        (
            gauge("active", bool, source="`NVML_FI_DEV_NVLINK_GET_STATE` (else `nvmlDeviceGetNvLinkState`)"),
            gauge(
                "state",
                str,
                help="`active` or `inactive`",
                source="`NVML_FI_DEV_NVLINK_GET_STATE` (else `nvmlDeviceGetNvLinkState`)",
            ),
            gauge(
                "version",
                int,
                help="NVML's numbering (an enum, not the generation)",
                source="`nvmlDeviceGetNvLinkVersion`",
            ),
            gauge(
                "version_name",
                str,
                help="the NVLink generation that number stands for: `3.0` (A100), `4.0` (H100), …",
                source="derived from `version`",
            ),
            gauge(
                "remote_pci_bus_id",
                str,
                help="PCI bus id of the device at the other end (a GPU, or an NVSwitch)",
                source="`nvmlDeviceGetNvLinkRemotePciInfo`",
            ),
            gauge(
                "remote_device_type",
                str,
                help="`gpu`, `switch`, `ibmnpu`, `unknown`",
                source="`nvmlDeviceGetNvLinkRemoteDeviceType`",
            ),
            gauge(
                "cap_p2p_supported",
                bool,
                help="P2P over this link",
                source="`nvmlDeviceGetNvLinkCapability` (P2P_SUPPORTED)",
            ),
            gauge(
                "cap_sysmem_access",
                bool,
                help="system memory access over this link",
                source="`nvmlDeviceGetNvLinkCapability` (SYSMEM_ACCESS)",
            ),
            gauge("cap_p2p_atomics", bool, help="P2P atomics", source="`nvmlDeviceGetNvLinkCapability` (P2P_ATOMICS)"),
            gauge(
                "cap_sysmem_atomics",
                bool,
                help="system memory atomics",
                source="`nvmlDeviceGetNvLinkCapability` (SYSMEM_ATOMICS)",
            ),
            gauge("cap_sli_bridge", bool, help="SLI bridge", source="`nvmlDeviceGetNvLinkCapability` (SLI_BRIDGE)"),
            gauge(
                "cap_valid",
                bool,
                help="the link is supported by this device",
                source="`nvmlDeviceGetNvLinkCapability` (VALID)",
            ),
            gauge(
                "rx_bytes_per_sec",
                float,
                unit="bytes/s",
                help="GPM (Hopper+), else the growth of the KiB total (Ampere), over the time since the previous run",
                source="`nvmlGpmMetricsGet` (NVLINK_L<N>_RX_PER_SEC, MiB/s); without GPM `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX` (KiB since the driver loaded, scopeId = link)",
            ),
            gauge(
                "tx_bytes_per_sec",
                float,
                unit="bytes/s",
                help="the same, transmit",
                source="`nvmlGpmMetricsGet` (NVLINK_L<N>_TX_PER_SEC, MiB/s); without GPM `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`",
            ),
        ),
        tags=("link",),
        part="link",
    ),
    Measurement(
        measurements.GPU_NVLINK,
        (
            gauge(
                "links", int, unit="links", help="links the card has", source="`nvmlDeviceGetNvLinkState` (probed once)"
            ),
            gauge(
                "links_active",
                int,
                unit="links",
                help="of those, active",
                source="`NVML_FI_DEV_NVLINK_GET_STATE` (else `nvmlDeviceGetNvLinkState`)",
            ),
            gauge(
                "total_rx_bytes_per_sec",
                float,
                unit="bytes/s",
                help="GPM, else the KiB total's growth (Ampere); all links",
                source="`nvmlGpmMetricsGet` (NVLINK_TOTAL_RX_PER_SEC, MiB/s); without GPM `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX` (scopeId = UINT_MAX: all links)",
            ),
            gauge(
                "total_tx_bytes_per_sec",
                float,
                unit="bytes/s",
                help="the same, transmit",
                source="`nvmlGpmMetricsGet` (NVLINK_TOTAL_TX_PER_SEC, MiB/s); without GPM `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX` (UINT_MAX)",
            ),
        ),
        part="gpu",
    ),
)
