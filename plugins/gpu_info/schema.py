"""What the gpu_info plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPU_INFO,
        (
            gauge("driver_version", str, help="e.g. `590.48.01`; every card", source="`nvmlSystemGetDriverVersion`"),
            gauge("nvml_version", str, help="e.g. `13.590.48.01`; every card", source="`nvmlSystemGetNVMLVersion`"),
            gauge(
                "cuda_driver_version",
                str,
                help="the CUDA version the driver supports, as nvidia-smi prints it (`13.1`); every card",
                source="`nvmlSystemGetCudaDriverVersion_v2`",
            ),
            gauge("vbios_version", str, help="e.g. `96.00.A5.00.01`; every card", source="`nvmlDeviceGetVbiosVersion`"),
            gauge(
                "serial",
                str,
                help="board serial number; absent on GeForce (NOT_SUPPORTED)",
                source="`nvmlDeviceGetSerial`",
            ),
            gauge(
                "board_part_number",
                str,
                help="e.g. `692-2G520-0200-000`; absent where the card has none",
                source="`nvmlDeviceGetBoardPartNumber`",
            ),
            gauge(
                "inforom_image_version",
                str,
                help="e.g. `G520.0200.00.05`; every card with an InfoROM",
                source="`nvmlDeviceGetInforomImageVersion`",
            ),
            gauge("inforom_oem_version", str, help="e.g. `2.1`", source="`nvmlDeviceGetInforomVersion` (OEM)"),
            gauge(
                "inforom_ecc_version",
                str,
                help="e.g. `7.16`; absent on cards without ECC",
                source="`nvmlDeviceGetInforomVersion` (ECC)",
            ),
            gauge(
                "inforom_power_version",
                str,
                help="absent where nvidia-smi says N/A (H100)",
                source="`nvmlDeviceGetInforomVersion` (POWER)",
            ),
            gauge(
                "persistence_mode",
                bool,
                help="driver persistence mode (Linux); absent on Windows",
                source="`nvmlDeviceGetPersistenceMode`",
            ),
        ),
    ),
)
