"""Rollups on InfluxDB 1.x: what `gpuagent rollups init|backfill|status` sets up and compare reads.

Two levels, each a retention policy holding one point per GPU (every tag kept: GROUP BY *) and
bucket: `gpuagent_1m`, filled from the raw points by continuous queries, and `gpuagent_1h`, filled
from `gpuagent_1m` (every field combines: sums and counts add, max/min/first/last select). Fields
are sums and counts rather than means, so a mean over any set of buckets is exact; the energy
counter keeps its first and last value per bucket, so the increase over buckets is exact while the
counter does not reset (a reset costs up to one bucket instead of one interval). The 95th
percentile does not roll up; a histogram of power samples per host and model does (HISTOGRAM), from
which compare takes an approximate one (gpuagent.compare.rollup_report). Some rollups keep fewer
tags than every tag (fewer series, which InfluxDB 1.x pays for): `Rollup.tags`.
"""

from __future__ import annotations

from dataclasses import dataclass

# Throttle reasons, as gpu_clocks writes them (the booleans the report counts).
from gpuagent.compare.core import REASONS, rfc3339
from gpuagent.compare.health import VERDICTS
from gpuagent.compare.progress import Progress
from gpuagent.compare.query import InfluxQL, quote_ident
from gpuagent.compare.work import CELL_REASONS
from gpuagent.errors import AgentError
from gpuagent.schema.measurements import (
    GPU_CLOCKS,
    GPU_HEALTH,
    GPU_MEMORY,
    GPU_MIG,
    GPU_NVLINK,
    GPU_P2P,
    GPU_PCIE,
    GPU_POWER,
    GPU_POWER_HIST,
    GPU_VGPU,
)


@dataclass(frozen=True)
class Level:
    name: str  # the retention policy
    seconds: int
    source_rp: str | None  # None: the raw points (the database's default retention policy)
    duration: str  # how long the retention policy keeps its points

    @property
    def ns(self) -> int:
        return self.seconds * 10**9

    @property
    def every(self) -> str:
        return f"{self.seconds // 60}m" if self.seconds < 3600 else f"{self.seconds // 3600}h"


LEVELS = (
    Level("gpuagent_1m", 60, None, "30d"),
    Level("gpuagent_1h", 3600, "gpuagent_1m", "INF"),
)


@dataclass(frozen=True)
class Field:
    name: str  # the rollup's field
    raw: str  # aggregate of raw points: 'SUM("power_w")'
    combine: str  # aggregate that merges rollup points: SUM, MAX, MIN, FIRST, LAST

    def over_rollup(self) -> str:
        return f'{self.combine}("{self.name}")'


def _sum_count(prefix: str, field: str) -> tuple[Field, Field]:
    return Field(f"{prefix}_sum", f'SUM("{field}")', "SUM"), Field(f"{prefix}_count", f'COUNT("{field}")', "SUM")


@dataclass(frozen=True)
class Rollup:
    name: str  # the measurement in each level's retention policy
    source: str  # the raw measurement
    where: str  # condition on the raw points ('' for none)
    fields: tuple[Field, ...]
    into: str = ""  # the measurement written, when several rollups share one (default: name)
    tags: tuple[str, ...] = ()  # the tags kept (default: every tag, GROUP BY *)

    @property
    def measurement(self) -> str:
        return self.into or self.name


ROLLUPS = (
    Rollup(
        GPU_POWER,
        GPU_POWER,
        "",
        (
            *_sum_count("power", "power_w"),
            Field("power_max", 'MAX("power_w")', "MAX"),
            Field("power_min", 'MIN("power_w")', "MIN"),
            Field("energy_first", 'FIRST("energy_j")', "FIRST"),
            Field("energy_last", 'LAST("energy_j")', "LAST"),
            Field("energy_count", 'COUNT("energy_j")', "SUM"),
        ),
    ),
    Rollup(
        GPU_CLOCKS,
        GPU_CLOCKS,
        "",
        (
            *_sum_count("sm_clock", "sm_clock_mhz"),
            *_sum_count("max_sm_clock", "max_sm_clock_mhz"),
            *(Field(f"{r}_n", f'COUNT("{r}")', "SUM") for r in REASONS),
        ),
    ),
    *(
        Rollup(f"gpu_clocks_{r}", GPU_CLOCKS, f'"{r}" = true', (Field("hits", f'COUNT("{r}")', "SUM"),))
        for r in REASONS
    ),
    Rollup(
        GPU_MEMORY,
        GPU_MEMORY,
        "",
        (
            *_sum_count("util", "gpu_util_pct"),
            *_sum_count("fb_used", "fb_used_bytes"),
            Field("fb_used_max", 'MAX("fb_used_bytes")', "MAX"),
            Field("fb_total_max", 'MAX("fb_total_bytes")', "MAX"),
            Field("dram_peak_max", 'MAX("dram_peak_gbps")', "MAX"),
            Field("l2_max", 'MAX("l2_cache_bytes")', "MAX"),
        ),
    ),
    # DRAM bandwidth only as GPM measured it (the raw report's own condition).
    Rollup(
        "gpu_memory_gpm",
        GPU_MEMORY,
        "\"dram_bw_source\" = 'gpm'",
        (
            *_sum_count("dram_util", "dram_bw_util_pct"),
            *_sum_count("dram_gbps", "dram_bw_gbps"),
        ),
    ),
)
# Health: samples per GPU and bucket, and those of each verdict gpu_health writes (plugins/health).
ROLLUPS += (
    Rollup(GPU_HEALTH, GPU_HEALTH, "", (Field("verdict_count", 'COUNT("verdict")', "SUM"),)),
    *(
        Rollup(f"gpu_health_{v}", GPU_HEALTH, f"\"verdict\" = '{v}'", (Field("n", 'COUNT("verdict")', "SUM"),))
        for v in VERDICTS
    ),
)
# P2P, MIG and vGPU: what the report tallies per GPU (every tag kept: mig_profile, vgpu_type).
ROLLUPS += (
    Rollup("gpu_p2p_nvlink", GPU_P2P, '"nvlink_ok" = true', (Field("n", 'COUNT("nvlink_ok")', "SUM"),)),
    Rollup("gpu_p2p_pcie", GPU_P2P, '"read_ok" = true', (Field("n", 'COUNT("read_ok")', "SUM"),)),
    Rollup(
        GPU_MIG,
        GPU_MIG,
        "",
        (
            Field("max_mig_devices_max", 'MAX("max_mig_devices")', "MAX"),
            Field("mig_devices_max", 'MAX("mig_devices")', "MAX"),
            Field("mig_index_count", 'COUNT("mig_index")', "SUM"),
        ),
    ),
    Rollup("gpu_mig_enabled", GPU_MIG, '"mig_mode_current" = true', (Field("n", 'COUNT("mig_mode_current")', "SUM"),)),
    Rollup(
        GPU_VGPU,
        GPU_VGPU,
        "",
        (
            Field("mode_last", 'LAST("virtualization_mode")', "LAST"),
            Field("active_instances_max", 'MAX("active_instances")', "MAX"),
            Field("vgpu_type_id_count", 'COUNT("vgpu_type_id")', "SUM"),
        ),
    ),
)

# The 95th percentile does not roll up; a histogram does. Per host and model (a host's GPUs in one
# series: compare's percentile is per model or host) and bucket, the count of power_w samples in each
# HIST_W-wide bin from 0 W up to HIST_TOP_W (fields p0000, p0020, ...; p_over above), all in one
# measurement (points of one series and time merge their fields). InfluxQL has no conditional
# aggregation: one statement per bin. Not in ROLLUPS: the recording rules
# (gpuagent.compare.rollup_rules) are generated from ROLLUPS, and PromQL keeps its own percentile.
HIST_W = 20
HIST_TOP_W = 1600
HIST_MEASUREMENT = GPU_POWER_HIST


def hist_field(lo: int | None) -> str:
    return "p_over" if lo is None else f"p{lo:04d}"


HISTOGRAM = tuple(
    Rollup(
        f"{HIST_MEASUREMENT}_{hist_field(lo)}",
        GPU_POWER,
        f'"power_w" >= {lo} AND "power_w" < {lo + HIST_W}' if lo is not None else f'"power_w" >= {HIST_TOP_W}',
        (Field(hist_field(lo), 'COUNT("power_w")', "SUM"),),
        into=HIST_MEASUREMENT,
        tags=("host", "model"),
    )
    for lo in (*range(0, HIST_TOP_W, HIST_W), None)
)
# Per GPU and bucket, the minutes with a verdict (1 per minute, summed by the 1h level): an hour
# of one verdict in every minute then counts whole without reading its minutes (health_gpu_hours).
HEALTH_MINUTES = Rollup(
    "gpu_health_minutes", GPU_HEALTH, "", (Field("minutes", 'COUNT("verdict") / COUNT("verdict")', "SUM"),)
)
# Power per host and model (few series: a host's GPUs in one): the power series of --by model|host.
POWER_BY_HOST = Rollup("gpu_power_host", GPU_POWER, "", _sum_count("power", "power_w"), tags=("host", "model"))
# The P2P tallies per GPU, its peers in one (the per-pair rollups above hold 7 series per GPU of 8).
GPU_ONLY = ("host", "uuid", "model", "gpu")
P2P_BY_GPU = tuple(
    Rollup(f"{r.name}_gpu", r.source, r.where, r.fields, tags=GPU_ONLY) for r in ROLLUPS if r.source == GPU_P2P
)
# The group figures of --by model|host (clocks, throttle shares, memory, DRAM, power) per host and
# model: a series per host instead of one per GPU (InfluxDB 1.x pays per series and value read).
BY_HOST = ("host", "model")
GROUPS_BY_HOST = tuple(
    Rollup(f"{r.name}_by_host", r.source, r.where, r.fields, tags=BY_HOST)
    for r in ROLLUPS
    if r.name in (GPU_CLOCKS, GPU_MEMORY, "gpu_memory_gpm") or r.name.startswith("gpu_clocks_")
) + (
    Rollup(
        "gpu_power_by_host",
        GPU_POWER,
        "",
        (
            *_sum_count("power", "power_w"),
            Field("power_max", 'MAX("power_w")', "MAX"),
            Field("power_min", 'MIN("power_w")', "MIN"),
        ),
        tags=BY_HOST,
    ),
)
# What the limits of the work figures read per GPU and bucket (gpuagent.compare.work, InfluxWork.cells):
# sums and counts for its means, max for its maxima, the clock samples under each power or thermal
# reason. Per GPU (GPU_ONLY), in few measurements: points of one series and time merge their fields.
CELLS = (
    Rollup(
        "gpu_cells_memory",
        GPU_MEMORY,
        "",
        (
            *_sum_count("util", "gpu_util_pct"),
            *_sum_count("mem_busy", "memory_util_pct"),
            *_sum_count("dram_bw", "dram_bw_util_pct"),
        ),
        tags=GPU_ONLY,
    ),
    # GPM activity (issue 43), a rollup of its own into the same measurement: `rollups init` on a
    # database set up before it adds its continuous query, the existing ones stay as they are.
    Rollup(
        "gpu_cells_gpm",
        GPU_MEMORY,
        "",
        (
            *_sum_count("sm_active", "sm_active_pct"),
            *_sum_count("tensor_active", "tensor_active_pct"),
            *_sum_count("occupancy", "sm_occupancy_pct"),
        ),
        into="gpu_cells_memory",
        tags=GPU_ONLY,
    ),
    Rollup(
        "gpu_cells_power",
        GPU_POWER,
        "",
        (*_sum_count("power", "power_w"), Field("limit_max", 'MAX("enforced_power_limit_w")', "MAX")),
        tags=GPU_ONLY,
    ),
    Rollup(
        "gpu_cells_clocks",
        GPU_CLOCKS,
        "",
        (*_sum_count("sm", "sm_clock_mhz"), Field("max_sm_max", 'MAX("max_sm_clock_mhz")', "MAX")),
        tags=GPU_ONLY,
    ),
    *(
        Rollup(
            f"gpu_cells_clocks_{r}",
            GPU_CLOCKS,
            f'"{r}" = true',
            (Field(f"{r}_n", 'COUNT("sm_clock_mhz")', "SUM"),),
            into="gpu_cells_clocks",
            tags=GPU_ONLY,
        )
        for r in CELL_REASONS
    ),
    Rollup(
        "gpu_cells_pcie",
        GPU_PCIE,
        "",
        (
            *_sum_count("tx", "tx_bytes_per_s"),
            *_sum_count("rx", "rx_bytes_per_s"),
            Field("link_gen_max", 'MAX("link_gen")', "MAX"),
            Field("link_width_max", 'MAX("link_width")', "MAX"),
        ),
        tags=GPU_ONLY,
    ),
    Rollup(
        "gpu_cells_nvlink",
        GPU_NVLINK,
        "",
        (
            *_sum_count("tx", "total_tx_bytes_per_sec"),
            *_sum_count("rx", "total_rx_bytes_per_sec"),
            Field("links_max", 'MAX("links_active")', "MAX"),
            Field("version_max", 'MAX("version")', "MAX"),
        ),
        tags=GPU_ONLY,
    ),
)
# What init, backfill and status set up.
EVERY = ROLLUPS + HISTOGRAM + (HEALTH_MINUTES, POWER_BY_HOST, *P2P_BY_GPU, *GROUPS_BY_HOST, *CELLS)
BY_NAME = {r.name: r for r in EVERY}


def select_into(db: str, level: Level, rollup: Rollup) -> tuple[str, str, str]:
    """(SELECT list, INTO target, FROM source) of the statement that fills one rollup at one level."""
    if level.source_rp is None:
        select = ", ".join(f'{f.raw} AS "{f.name}"' for f in rollup.fields)
        source = f'"{rollup.source}"'
    else:
        select = ", ".join(f'{f.over_rollup()} AS "{f.name}"' for f in rollup.fields)
        source = f'{quote_ident(db)}."{level.source_rp}"."{rollup.measurement}"'
    return select, f'{quote_ident(db)}."{level.name}"."{rollup.measurement}"', source


def statement(db: str, level: Level, rollup: Rollup, time_clause: str = "") -> str:
    select, into, source = select_into(db, level, rollup)
    conds = [c for c in (time_clause, rollup.where if level.source_rp is None else "") if c]
    where = f" WHERE {' AND '.join(conds)}" if conds else ""
    # fill(none): buckets without a matching point write nothing (not a count of 0 per bin).
    tags = ", ".join(f'"{t}"' for t in rollup.tags) or "*"
    return f"SELECT {select} INTO {into} FROM {source}{where} GROUP BY time({level.every}), {tags} fill(none)"


def cq_name(level: Level, rollup: Rollup) -> str:
    return f"{level.name}_{rollup.name}"


def cq_statement(db: str, level: Level, rollup: Rollup) -> str:
    # Resampled over two buckets: points that arrive a bucket late (a buffered agent) still count, and
    # the 1h level, which runs when the 1m level does, sees the 1m level's last minute an hour later.
    return (
        f'CREATE CONTINUOUS QUERY "{cq_name(level, rollup)}" ON {quote_ident(db)} '
        f"RESAMPLE EVERY {level.every} FOR {2 * level.seconds // 60}m "
        f"BEGIN {statement(db, level, rollup)} END"
    )


def init(client: InfluxQL) -> list[str]:
    """Create what is missing (retention policies, continuous queries); what was created, by name."""
    db = client.conn.database
    made = []
    policies = {r["name"] for r in client.rows("SHOW RETENTION POLICIES")}
    for level in LEVELS:
        if level.name not in policies:
            client.query(
                f'CREATE RETENTION POLICY "{level.name}" ON {quote_ident(db)} DURATION {level.duration} REPLICATION 1',
                post=True,
            )
            made.append(f"retention policy {level.name}")
    existing = _continuous_queries(client)
    for level in LEVELS:
        for rollup in EVERY:
            name = cq_name(level, rollup)
            if name not in existing:
                client.query(cq_statement(db, level, rollup), post=True)
                made.append(f"continuous query {name}")
    return made


def _continuous_queries(client: InfluxQL) -> dict[str, str]:
    out = {}
    for series in client.query("SHOW CONTINUOUS QUERIES"):
        if series.get("name") == client.conn.database:
            for name, query in series.get("values", []):
                out[name] = query
    return out


def backfill(
    client: InfluxQL,
    start_ns: int,
    end_ns: int,
    chunk_s: int = 3600,
    echo=None,
    levels: tuple[Level, ...] = LEVELS,
    rollups: tuple[Rollup, ...] = EVERY,
) -> int:
    """The continuous queries' SELECT ... INTO over [start, end), from the start of start's hour to the
    last whole bucket of each level, level by level
    (the 1h level reads what the 1m level wrote), in chunks of `chunk_s`; points written. `levels`:
    only those (the 1h level alone: hours from 1-minute rollups written some other way); `rollups`:
    only those (ones added since the history was rolled up)."""
    _require(client)
    db, written = client.conn.database, 0
    # Every level from the coarsest level's bucket edge: its first bucket then reads whole finer buckets.
    start_ns = start_ns // LEVELS[-1].ns * LEVELS[-1].ns
    chunks = [_chunks(start_ns, end_ns // level.ns * level.ns, chunk_s, level) for level in levels]
    reached: dict[str, int] = {}

    def partial(done: int, total: int) -> str:
        held = ", ".join(f"{name} to {rfc3339(t)}" for name, t in reached.items()) or "nothing"
        return (
            f"rollups backfill stopped after {done} of {total} chunks: the rollups hold a partial history "
            f"({held}); run rollups backfill again"
        )

    with Progress("rollups backfill", sum(len(c) for c in chunks), "chunks", partial) as progress:
        for level, spans in zip(levels, chunks, strict=True):
            for a, c in spans:
                clause = f"time >= '{rfc3339(a)}' AND time < '{rfc3339(c)}'"
                for rollup in rollups:
                    for row in client.rows(statement(db, level, rollup, clause)):
                        written += int(row.get("written") or 0)
                reached[level.name] = c
                progress.advance(f"{level.name} to {rfc3339(c)}")
            if echo:
                echo(f"{level.name}: {rfc3339(start_ns)} to {rfc3339(end_ns // level.ns * level.ns)}")
    return written


def _chunks(a: int, b: int, chunk_s: int, level: Level) -> list[tuple[int, int]]:
    step = max(chunk_s * 10**9 // level.ns, 1) * level.ns
    out = []
    while a < b:
        out.append((a, min(a + step, b)))
        a += step
    return out


def _require(client: InfluxQL) -> None:
    policies = {r["name"] for r in client.rows("SHOW RETENTION POLICIES")}
    missing = [lv.name for lv in LEVELS if lv.name not in policies]
    if missing:
        raise AgentError(
            f"no rollup retention policies ({', '.join(missing)}) in {client.conn.label}: run gpuagent rollups init"
        )


def coverage(
    client: InfluxQL, measurement: str = GPU_POWER, field: str = "power_count"
) -> dict[str, tuple[int, int] | None]:
    """Per level, [first bucket, last bucket + resolution) of a rollup (by one of its fields: gpu_power's
    power_count by default); None when empty or absent."""
    db = client.conn.database
    policies = {r["name"] for r in client.rows("SHOW RETENTION POLICIES")}
    out: dict[str, tuple[int, int] | None] = {}
    for level in LEVELS:
        if level.name not in policies:
            out[level.name] = None
            continue
        m = f'{quote_ident(db)}."{level.name}"."{measurement}"'
        first = client.rows(f'SELECT FIRST("{field}") FROM {m}')
        last = client.rows(f'SELECT LAST("{field}") FROM {m}')
        out[level.name] = (first[0]["time"], last[0]["time"] + level.ns) if first and last else None
    return out


def status(client: InfluxQL) -> dict:
    """What exists (retention policies, continuous queries) and how far each level reaches."""
    policies = {r["name"]: r for r in client.rows("SHOW RETENTION POLICIES")}
    cqs = _continuous_queries(client)
    reach = coverage(client)
    levels = []
    for level in LEVELS:
        span = reach.get(level.name)
        names = [cq_name(level, r) for r in EVERY]
        levels.append(
            {
                "retention_policy": level.name,
                "resolution_s": level.seconds,
                "exists": level.name in policies,
                "duration": policies.get(level.name, {}).get("duration"),
                "continuous_queries": sum(n in cqs for n in names),
                "continuous_queries_expected": len(names),
                "from": rfc3339(span[0]) if span else None,
                "to": rfc3339(span[1]) if span else None,
            }
        )
    return {"url": client.conn.url, "database": client.conn.database, "levels": levels}
