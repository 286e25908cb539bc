"""What the prometheus plugin writes: its measurements, fields and tags (README.md's field tables are generated
from it: python -m gpuagent.schema.readme --write)."""

from __future__ import annotations

from gpuagent.schema import measurements
from gpuagent.schema.fields import Measurement, counter, gauge

SCHEMA: tuple[Measurement, ...] = (
    Measurement(
        measurements.GPUAGENT,
        (
            counter("points_written_total", int, help="points handed to the sink"),
            gauge("series", int, help="series currently served"),
            counter("renders_total", int, help="times the exposition was rendered (once per change at most)"),
            counter(
                "series_refused_total",
                int,
                help="new series not exported because of `max_series_per_metric` or `max_series` (the series already served keep updating; one that expires makes room)",
            ),
            counter("scrapes_total", int, help="requests answered"),
            counter("scrapes_refused_total", int, help="connections refused with 503 (queue full)"),
            counter("scrape_timeouts_total", int, help="connections cut off at `request_timeout`"),
            counter(
                "scrapes_unauthorized_total", int, help="requests answered 401 (basic auth on, no or a wrong password)"
            ),
            counter(
                "tls_handshake_failures_total",
                int,
                help="TLS handshakes that failed (plain HTTP to the TLS port, an unknown client certificate)",
            ),
        ),
        tags=("sink",),
        part="prometheus",
        source_column=None,
        unit_column=False,
    ),
)
