"""What the pcie plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, counter, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPU_PCIE,
        (
            gauge(
                "link_gen",
                int,
                help="current link generation (idle GPUs drop to Gen 1 to save power)",
                source="`nvmlDeviceGetCurrPcieLinkGeneration`",
            ),
            gauge(
                "link_width", int, unit="lanes", help="current link width", source="`nvmlDeviceGetCurrPcieLinkWidth`"
            ),
            gauge(
                "max_link_gen",
                int,
                help="static: highest generation the GPU and the slot allow",
                source="`nvmlDeviceGetMaxPcieLinkGeneration`",
            ),
            gauge("max_link_width", int, unit="lanes", help="static", source="`nvmlDeviceGetMaxPcieLinkWidth`"),
            gauge(
                "tx_bytes_per_s",
                int,
                unit="bytes/s",
                help="GPU → host over the last ~20 ms (NVML reports KB/s; × 1024)",
                source="`nvmlDeviceGetPcieThroughput` (TX, KB/s)",
            ),
            gauge(
                "rx_bytes_per_s",
                int,
                unit="bytes/s",
                help="host → GPU, same",
                source="`nvmlDeviceGetPcieThroughput` (RX, KB/s)",
            ),
            counter(
                "replays_total",
                int,
                help="**counter**: link-level replays (retransmissions) since the driver loaded",
                source="`NVML_FI_DEV_PCIE_REPLAY_COUNTER`, else `nvmlDeviceGetPcieReplayCounter`",
            ),
            counter(
                "replay_rollovers_total",
                int,
                help="**counter**: times the replay counter rolled over",
                source="`NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER`",
            ),
            counter(
                "tx_bytes_total",
                int,
                unit="bytes",
                help="**counter**, where the driver has it (`NVML_FI_DEV_PCIE_COUNT_TX_BYTES`, recent drivers): bytes sent",
                source="`NVML_FI_DEV_PCIE_COUNT_TX_BYTES`",
            ),
            counter(
                "rx_bytes_total",
                int,
                unit="bytes",
                help="**counter**, same: bytes received",
                source="`NVML_FI_DEV_PCIE_COUNT_RX_BYTES`",
            ),
        ),
    ),
)
