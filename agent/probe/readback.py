"""The newest `gpuagent probe l2 --send` result per GPU, read back from InfluxDB (what `inspect` shows).

The probe keeps no local store: `probe l2 --send` writes gpu_l2_probe points
through the sinks (docs/probe.md), so the results are read back from the
InfluxDB of the config's ``[sinks.influxdb]`` table, through the client
`compare` uses.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gpuagent.probe.result import MEASUREMENT

log = logging.getLogger("gpuagent.probe.readback")

# The summary point's fields (curve points carry none of them, so they are not returned).
SUMMARY_FIELDS = ("l2_effective_bytes", "l2_bw_gbps", "dram_bw_gbps", "l2_dram_ratio", "knee_found", "method")
MAX_AGE = "30d"  # older results are not "recent" and are not shown
TIMEOUT_S = 2.0  # a one-off view must not hang on a slow database


def latest_l2_probes(config_path: str | None = None, timeout: float = TIMEOUT_S) -> dict[str, dict[str, Any]]:
    """GPU UUID -> its newest probe summary from the last 30 days.

    No ``[sinks.influxdb]`` table, or a database that cannot be read: ``{}``
    (inspect then shows no probe line), never an error.
    """
    from gpuagent.config import read_config, resolve_path
    from gpuagent.errors import AgentError

    try:
        if resolve_path(config_path) is None:
            return {}
        if "influxdb" not in read_config(config_path).raw.get("sinks", {}):
            return {}
        from gpuagent.compare.query import InfluxQL, connection_from

        conn = connection_from(config_path)
        conn.timeout = timeout
        client = InfluxQL(conn)
        try:
            selected = ", ".join(f'"{f}"' for f in SUMMARY_FIELDS)
            rows = client.rows(
                f'SELECT {selected} FROM "{MEASUREMENT}" WHERE time > now() - {MAX_AGE} '
                'GROUP BY "uuid" ORDER BY time DESC LIMIT 1'
            )
        finally:
            client.close()
    except (AgentError, OSError, ValueError) as exc:
        log.debug("no L2 probe results read: %s", exc)
        return {}
    return {row["uuid"]: summary(row) for row in rows if row.get("uuid")}


def summary(row: dict[str, Any]) -> dict[str, Any]:
    """One summary row (InfluxQL, epoch ns) as the ``l2_probe`` object of a GPU's facts."""
    stamp = row.get("time")
    out: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp / 1e9)) if isinstance(stamp, int) else None
    }
    for name in SUMMARY_FIELDS:
        value = row.get(name)
        if name == "l2_effective_bytes" and value is not None:
            value = int(value)
        out[name] = value
    return out
