"""What the influxdb plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, counter, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPUAGENT,
        (
            counter("points_written_total", int, help="points the server accepted (replayed ones included)"),
            counter(
                "write_errors_total",
                int,
                help="failed requests (transient, 401/403/404 and a 400 that is not a line error)",
            ),
            gauge("spool_bytes", int, unit="bytes", help="line-protocol bytes in the spool"),
            gauge("spool_points", int, help="points in the spool not yet delivered (its depth)"),
            counter(
                "replayed_total",
                int,
                help="points delivered from the spool after they waited there past an outage (the retry that ends it included) or from an earlier run (with write-ahead every point passes through the spool; those sent on time are not counted here)",
            ),
            counter("dropped_total", int, help="points lost to a full spool or buffer"),
            counter("rejected_total", int, help="points the server refused (400/422)"),
            gauge("buffered_points", int, help="points in memory, not yet sent or spooled"),
            counter("spool_damaged_total", int, help="damaged spool files moved aside since start"),
            counter(
                "spool_quarantined_total",
                int,
                help="unreadable spool batches moved aside since start (see the spool above)",
            ),
            gauge(
                "spool_writable",
                int,
                unit="0/1",
                help="1 while the spool takes batches; 0: disk full, read-only or unavailable (delivery in memory)",
            ),
        ),
        tags=("sink",),
        part="influxdb",
        source_column=None,
        unit_column=False,
    ),
)
