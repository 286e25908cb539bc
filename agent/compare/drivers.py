"""`gpuagent compare --by driver`: the report per driver version (and GPU model within it).

The driver version is not a tag of the GPU points: it is the gpu_info record (plugins/gpu_info),
sent at start, on change and hourly. Each GPU takes the driver of its last record up to the
range's end (looked for from 2 h before the range, so a record sent before it counts); the usual
report is then built once per driver over that driver's GPUs (a uuid condition added to --where),
grouped by model, and its groups are labelled "<driver> <model>".
"""

from __future__ import annotations

import re
from typing import Any

from gpuagent.compare import figures
from gpuagent.compare import where as where_rule
from gpuagent.compare.core import NoData, Range, report_document, rfc3339
from gpuagent.compare.report import Report
from gpuagent.schema.measurements import GPU_INFO

# gpu_info is resent at least hourly: a record this long before the range still names its driver.
LOOKBACK_NS = 2 * 3600 * 10**9


def drivers_of_gpus(client, rng: Range, where: str | None) -> dict[str, list[str]]:
    """driver version -> the uuids whose last gpu_info record up to the range's end names it."""
    clause = f"time >= '{rfc3339(rng.start_ns - LOOKBACK_NS)}' AND time < '{rfc3339(rng.end_ns)}'"
    if where:
        clause += f" AND ({where})"
    rows = client.rows(f'SELECT LAST("driver_version") FROM "{GPU_INFO}" WHERE {clause} GROUP BY "uuid"')
    out: dict[str, list[str]] = {}
    for row in rows:
        if row.get("last") and row.get("uuid"):
            out.setdefault(str(row["last"]), []).append(str(row["uuid"]))
    return out


def _uuid_condition(uuids: list[str]) -> str:
    return '"uuid" =~ /^(' + "|".join(re.escape(u) for u in sorted(uuids)) + ")$/"


def build_by_driver(client, rng: Range, where: str | None = None) -> dict[str, Any]:
    """The compare document with one group per (driver, model)."""
    where = where_rule.influxql(where)  # one condition (gpuagent.compare.where)
    drivers = drivers_of_gpus(client, rng, where)
    if not drivers:
        raise NoData(
            f"no gpu_info records (driver versions) between {rfc3339(rng.start_ns - LOOKBACK_NS)} and "
            f"{rfc3339(rng.end_ns)} in {client.conn.label}; the gpu_info collector sends them"
        )
    groups: dict[tuple, dict[str, Any]] = {}
    series: dict[str, Any] | None = None
    definitions: dict[str, Any] = {}
    for driver, uuids in sorted(drivers.items()):
        cond = _uuid_condition(uuids)
        try:
            doc = Report(client, rng, by="model", where=f"({where}) AND {cond}" if where else cond).build()
        except NoData:
            continue  # the driver's GPUs have a record but no readings in the range
        definitions = doc["definitions"]
        for g in doc["groups"]:
            model = g["key"]["model"]
            g["key"] = {"driver_version": driver, "model": model}
            g["label"] = f"{driver} {model}"
            groups[(driver, model)] = g
        part = doc.get(figures.SERIES)
        if part:
            if series is None:
                series = {"bucket_s": part["bucket_s"], figures.SERIES_POWER: {}}
            for label, values in part[figures.SERIES_POWER].items():
                series[figures.SERIES_POWER][f"{driver} {label}"] = values
    if not groups:
        raise NoData(f"no GPU readings between {rfc3339(rng.start_ns)} and {rfc3339(rng.end_ns)} for any driver")
    source = {"url": client.conn.url, "database": client.conn.database, "kind": "raw", "resolution": None}
    extra = {figures.SERIES: series} if series is not None else {}
    return report_document(rng, "driver", where, source, definitions, groups, **extra)
