"""What the mig plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPU_MIG,
        (
            gauge("mig_mode_current", bool, help="MIG on now", source="`nvmlDeviceGetMigMode`"),
            gauge("mig_mode_pending", bool, help="MIG on after the next GPU reset", source="`nvmlDeviceGetMigMode`"),
            gauge("max_mig_devices", int, unit="devices", help="static", source="`nvmlDeviceGetMaxMigDeviceCount`"),
            gauge(
                "mig_devices",
                int,
                unit="devices",
                help="MIG devices that exist now (0 with MIG off)",
                source="`nvmlDeviceGetMigDeviceHandleByIndex`",
            ),
        ),
        part="gpu",
    ),
    Measurement(
        measurements.GPU_MIG,
        (
            gauge("mig_index", int, help="MIG device index on its GPU", source="`nvmlDeviceGetMigDeviceHandleByIndex`"),
            gauge(
                "fb_total_bytes",
                int,
                unit="bytes",
                help="the instance's memory",
                source="`nvmlDeviceGetMemoryInfo` (MIG handle)",
            ),
            gauge("fb_used_bytes", int, unit="bytes", source="`nvmlDeviceGetMemoryInfo` (MIG handle)"),
            gauge("fb_free_bytes", int, unit="bytes", source="`nvmlDeviceGetMemoryInfo` (MIG handle)"),
            gauge("fb_used_pct", float, unit="%", help="used / total", source="derived"),
            gauge(
                "sm_count", int, unit="SMs", help="multiprocessors of the device", source="`nvmlDeviceGetAttributes_v2`"
            ),
            gauge("gi_slices", int, unit="slices", help="GPU instance slices", source="`nvmlDeviceGetAttributes_v2`"),
            gauge(
                "ci_slices", int, unit="slices", help="compute instance slices", source="`nvmlDeviceGetAttributes_v2`"
            ),
            gauge(
                "graphics_util_pct",
                float,
                unit="%",
                help="GPM (Hopper+), per GPU instance: time any graphics/compute engine was active",
                source="`nvmlGpmMigSampleGet`, `nvmlGpmMetricsGet` (GRAPHICS_UTIL)",
            ),
            gauge("sm_util_pct", float, unit="%", help="SMs busy", source="GPM (SM_UTIL)"),
            gauge(
                "sm_occupancy_pct",
                float,
                unit="%",
                help="active warps / theoretical maximum",
                source="GPM (SM_OCCUPANCY)",
            ),
            gauge(
                "tensor_util_pct",
                float,
                unit="%",
                help="SMs doing any tensor operation",
                source="GPM (ANY_TENSOR_UTIL)",
            ),
            gauge("dram_bw_util_pct", float, unit="%", help="DRAM bandwidth used / peak", source="GPM (DRAM_BW_UTIL)"),
        ),
        tags=("gi_id", "ci_id", "mig_uuid", "mig_profile"),
        part="mig_device",
    ),
)
