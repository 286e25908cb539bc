"""What the health plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, counter, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPU_HEALTH,
        (
            gauge("lost", bool, help="false (see below for true)", source="`GPU_IS_LOST` from any call"),
            gauge(
                "verdict",
                str,
                help="`ok`, `degraded`, `reset_required`, `reboot_required`, `drain` or `lost` (rules above)",
                source="derived",
            ),
            gauge("verdict_reason", str, help="one sentence naming the evidence", source="derived"),
            gauge(
                "thermal_margin_c",
                int,
                unit="°C",
                help="degrees left before max operating temperature (T.Limit 0), negative past it; Ada, Hopper, Blackwell only (same reading as gpu_power's: every 30 s, the verdict judging the latest in between)",
                source="`nvmlDeviceGetMarginTemperature`",
            ),
            gauge(
                "recovery_action",
                int,
                help="0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset, 5 recover IMEX domain, 6 bus reset, 7 system reboot",
                source="`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`",
            ),
            gauge(
                "ecc_enabled",
                bool,
                help="ECC mode now (absent without ECC, e.g. GeForce)",
                source="`nvmlDeviceGetEccMode` (current)",
            ),
            gauge(
                "ecc_pending_enabled",
                bool,
                help="ECC mode after the next reboot",
                source="`nvmlDeviceGetEccMode` (pending)",
            ),
            counter(
                "ecc_corrected_volatile_total",
                int,
                unit="errors",
                help="counter since the last driver load",
                source="`nvmlDeviceGetTotalEccErrors`",
            ),
            counter(
                "ecc_uncorrected_volatile_total",
                int,
                unit="errors",
                help="counter since the last driver load",
                source="`nvmlDeviceGetTotalEccErrors`",
            ),
            counter(
                "ecc_corrected_aggregate_total",
                int,
                unit="errors",
                help="counter over the GPU's lifetime",
                source="`nvmlDeviceGetTotalEccErrors`",
            ),
            counter(
                "ecc_uncorrected_aggregate_total",
                int,
                unit="errors",
                help="counter over the GPU's lifetime",
                source="`nvmlDeviceGetTotalEccErrors`",
            ),
            gauge(
                "retired_pages_sbe",
                int,
                unit="pages",
                help="retired for multiple single-bit errors (pre-Ampere)",
                source="`nvmlDeviceGetRetiredPages`",
            ),
            gauge(
                "retired_pages_dbe",
                int,
                unit="pages",
                help="retired for a double-bit error (pre-Ampere)",
                source="`nvmlDeviceGetRetiredPages`",
            ),
            gauge(
                "retired_pages_pending",
                bool,
                help="a retirement waits for the next reboot",
                source="`nvmlDeviceGetRetiredPagesPendingStatus`",
            ),
            gauge(
                "remapped_rows_correctable",
                int,
                unit="rows",
                help="rows remapped for correctable errors (Ampere+)",
                source="`nvmlDeviceGetRemappedRows`",
            ),
            gauge(
                "remapped_rows_uncorrectable",
                int,
                unit="rows",
                help="rows remapped for uncorrectable errors",
                source="`nvmlDeviceGetRemappedRows`",
            ),
            gauge(
                "remapped_rows_pending",
                bool,
                help="a remapping waits for a GPU reset",
                source="`nvmlDeviceGetRemappedRows`",
            ),
            gauge(
                "remapped_rows_failure",
                bool,
                help="a remapping failed (the GPU needs service)",
                source="`nvmlDeviceGetRemappedRows`",
            ),
            gauge(
                "row_remap_banks_max",
                int,
                unit="banks",
                help="banks with full remap availability; the `row_remap_banks_*` fields every 30 s and on a run whose remapped rows changed (left out on the runs between)",
                source="`nvmlDeviceGetRowRemapperHistogram`",
            ),
            gauge(
                "row_remap_banks_high",
                int,
                unit="banks",
                help="banks with high remap availability",
                source="`nvmlDeviceGetRowRemapperHistogram`",
            ),
            gauge(
                "row_remap_banks_partial",
                int,
                unit="banks",
                help="banks with partial remap availability",
                source="`nvmlDeviceGetRowRemapperHistogram`",
            ),
            gauge(
                "row_remap_banks_low",
                int,
                unit="banks",
                help="banks with low remap availability",
                source="`nvmlDeviceGetRowRemapperHistogram`",
            ),
            gauge(
                "row_remap_banks_none",
                int,
                unit="banks",
                help="banks with no remap availability left",
                source="`nvmlDeviceGetRowRemapperHistogram`",
            ),
            counter(
                "pcie_errors_total",
                int,
                unit="errors",
                help="counter: sum of the PCIe error counters (correctable, NAKs, receiver, bad TLP/DLLP, non-fatal, fatal, unsupported request, LCRC, lane), where the driver has them",
                source="`NVML_FI_DEV_PCIE_COUNT_*`",
            ),
            counter(
                "nvlink_crc_errors_total",
                int,
                unit="errors",
                help="counter: NVLink data-link CRC errors, all links",
                source="`NVML_FI_DEV_NVLINK_ERROR_DL_CRC`",
            ),
            counter(
                "nvlink_replay_errors_total",
                int,
                unit="errors",
                help="counter: NVLink replays, all links",
                source="`NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY`",
            ),
            counter(
                "nvlink_recovery_errors_total",
                int,
                unit="errors",
                help="counter: NVLink link recoveries, all links",
                source="`NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY`",
            ),
            gauge(
                "fabric_state",
                str,
                help="NVSwitch fabric registration: `not_started`, `in_progress`, `completed` (absent where not supported)",
                source="`nvmlDeviceGetGpuFabricInfoV`",
            ),
            gauge(
                "fabric_status",
                int,
                help="NVML return code of the registration (0 success; valid once completed)",
                source="`nvmlDeviceGetGpuFabricInfoV`",
            ),
            gauge(
                "fabric_clique_id",
                int,
                help="the fabric clique this GPU belongs to",
                source="`nvmlDeviceGetGpuFabricInfoV`",
            ),
            gauge(
                "fabric_health_mask",
                int,
                help="`healthMask` bit fields (nvml.h `NVML_GPU_FABRIC_HEALTH_MASK_*`)",
                source="`nvmlDeviceGetGpuFabricInfoV`",
            ),
            counter(
                "xid_events_total",
                int,
                unit="events",
                help="counter: XIDs seen on this GPU since the agent started (where XID events are watched)",
                source="`nvmlEventSetWait`",
            ),
        ),
        part="gpu",
    ),
    Measurement(
        measurements.GPU_HEALTH,
        (
            gauge("lost", bool, help="true", source="`GPU_IS_LOST`"),
            gauge("verdict", str, help="`lost`", source="derived"),
            gauge(
                "verdict_reason",
                str,
                help="since when it answers GPU_IS_LOST (after the XID 79, when one was seen)",
                source="derived",
            ),
            gauge("lost_reason", str, help="NVML's message (the first run only)", source="the NVML error"),
        ),
        part="lost_gpu",
    ),
    Measurement(
        measurements.GPU_HEALTH,
        (
            gauge("xid", int, help="XID code", source="`nvmlEventSetWait` (`eventData`)"),
            gauge(
                "xid_description",
                str,
                help='the catalogue\'s meaning (every code in xid_catalog.json), else "XID N is not in the catalogue"',
                source="xid_catalog.json",
            ),
        ),
        tags=("gi_id", "ci_id"),
        part="xid",
    ),
    Measurement(
        measurements.GPU_INVENTORY,
        (
            gauge(
                "gpus_present",
                int,
                unit="GPUs",
                help="the GPUs NVML lists (lost and unavailable ones included)",
                source="`nvmlDeviceGetCount`",
            ),
            gauge(
                "gpus_expected",
                int,
                unit="GPUs",
                help="`expected_gpus` (the count, or the one remembered at first start)",
                source="config",
            ),
            gauge("gpus_missing", int, unit="GPUs", help="expected minus present, at least 0", source="derived"),
            gauge("reason", str, help="one sentence, only while GPUs are missing", source="derived"),
        ),
    ),
    Measurement(
        measurements.GPU_ACTION,
        (
            counter(
                "drains_total", int, unit="drains", help="counter: drains this agent issued", source="`scontrol update`"
            ),
            counter(
                "left_alone_total",
                int,
                unit="episodes",
                help="counter: episodes that found the node already drained (by an admin, or by this agent before)",
                source="`scontrol show node`",
            ),
            counter(
                "failures_total",
                int,
                unit="attempts",
                help="counter: `scontrol` calls that failed or timed out (10 s)",
                source="`scontrol`",
            ),
            gauge("in_episode", bool, help="some GPU is at `drain_on` and the episode was acted on", source="derived"),
            gauge(
                "last_action",
                str,
                help="what it last did: `drained: <reason>`, `left alone: ...`, `failed: ...`",
                source="derived",
            ),
        ),
        tags=("action", "node"),
    ),
)
