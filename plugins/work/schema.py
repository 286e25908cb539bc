"""What the work plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, counter, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPU_WORK,
        (
            counter(
                "units_total",
                float,
                unit="units (the `unit` tag)",
                help="counter: the work's whole count, the same on each of its GPUs; a decrease is a restart",
            ),
            gauge("gpus", int, unit="GPUs", help="how many GPUs (or MIG devices) the work spans"),
            gauge(
                "sm_util_pct",
                float,
                unit="%",
                help="the work's processes' SM activity on this GPU this cycle (NVML's per-process samples, summed, at most 100); absent where NVML gave none. `gpuagent compare` shares a GPU among the work on it at the same time by it (evenly without it: docs/compare.md)",
            ),
            gauge(
                "gpu_share",
                float,
                unit="fraction",
                help="on a MIG device only: its compute slices over the GPU's (3/7 for a `3g` profile), the share of the GPU's time and energy the work is charged: `gpuagent compare` multiplies the work's GPU-hours and energy by it (docs/compare.md)",
            ),
        ),
        tags=(
            "workload",
            "unit",
            "source",
            "work_id",
            "slurm_job_id",
            "k8s_pod_uid",
            "gi_id",
            "ci_id",
            "mig_uuid",
            "mig_profile",
        ),
        source_column=None,
    ),
)
