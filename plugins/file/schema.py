"""What the file plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, counter

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPUAGENT,
        (
            counter("points_written_total", int, help="lines written"),
            counter("bytes_written_total", int, help="bytes written"),
            counter("rotations_total", int, help="rotations done"),
            counter(
                "points_refused_total",
                int,
                help="points not written because `PATH` was refused (a symlink or another user's file, see above)",
            ),
        ),
        tags=("sink",),
        part="file",
        source_column=None,
        unit_column=False,
    ),
)
