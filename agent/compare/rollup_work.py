"""The work figures over rollups: the limits' cells and the energy of each work span from the
rollups (gpuagent.compare.rollups CELLS, gpu_power) where they cover them, else as InfluxWork reads
raw points. The work counters (units_total) are read raw: there are few such series per GPU."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from gpuagent.compare import figures
from gpuagent.compare.core import WORKERS, Range
from gpuagent.compare.query import quote_ident
from gpuagent.compare.rollup_report import RollupReport, usable
from gpuagent.compare.rollups import GPU_ONLY, LEVELS, Level, coverage
from gpuagent.compare.work import CELL_REASONS, PLAIN_UUID, InfluxWork

_BY_GPU = 'GROUP BY "host", "uuid"'


class RollupWork(InfluxWork):
    """InfluxWork whose cells and energies come from the rollups of a RollupReport's database."""

    def __init__(self, report, rng: Range, where: str | None, gpu_where: bool):
        super().__init__(report.client, rng, where, gpu_where)
        self.report = report
        self.from_rollups: set[str] = set()  # what was read from rollups: "limits", "energy" (threads add)

    def describe(self) -> dict:
        """As InfluxWork's, with what came from rollups ("limits", "energy"; the units are always raw)."""
        return {
            **super().describe(),
            "kind": "rollup" if self.from_rollups else "raw",
            "from_rollups": sorted(self.from_rollups),
        }

    def _cells_level(self, bucket: int) -> Level | None:
        """The coarsest level whose buckets fit whole in the cells' and whose coverage spans them."""
        if self.where and self.gpu_where and not self.report._where_within(GPU_ONLY):
            return None
        b = bucket * 10**9
        lo, hi = self.range.start_ns // b * b, -(-self.range.end_ns // b) * b
        reach = coverage(self.client, "gpu_cells_power", "power_count")  # the cells' rollups fill together
        for level in reversed(LEVELS):
            span = reach.get(level.name)
            if bucket % level.seconds == 0 and span and span[0] <= lo and hi <= span[1]:
                return level
        return None

    def _cell_rows(self, bucket: int) -> dict[str, list[dict]]:
        level = self._cells_level(bucket)
        if level is None:
            return super()._cell_rows(bucket)
        self.from_rollups.add(figures.LIMITS)
        w = self._whole_buckets(bucket, work=False)
        db = self.client.conn.database
        tail = f"{_BY_GPU}, time({bucket}s) fill(none)"

        def source(name: str) -> str:
            return f'{quote_ident(db)}."{level.name}"."{name}"'

        sums = {
            "gpu_cells_memory": ("util", "mem_busy", "dram_bw", "sm_active", "tensor_active", "occupancy"),
            "gpu_cells_power": ("power",),
            "gpu_cells_clocks": ("sm",),
            "gpu_cells_pcie": ("tx", "rx"),
            "gpu_cells_nvlink": ("tx", "rx"),
        }
        maxima = {
            "gpu_cells_power": ("limit_max",),
            "gpu_cells_clocks": ("max_sm_max",),
            "gpu_cells_pcie": ("link_gen_max", "link_width_max"),
            "gpu_cells_nvlink": ("links_max", "version_max"),
        }
        q = {}
        for name in sums:
            select = [f'SUM("{p}_sum") AS "{p}_sum", SUM("{p}_count") AS "{p}_count"' for p in sums[name]]
            select += [f'MAX("{m}") AS "{m}"' for m in maxima.get(name, ())]
            if name == "gpu_cells_clocks":
                select += [f'SUM("{r}_n") AS "{r}_n"' for r in CELL_REASONS]
            q[name] = f"SELECT {', '.join(select)} FROM {source(name)} WHERE {w} {tail}"
        q["model"] = (
            f'SELECT LAST("power_count") FROM {source("gpu_cells_power")} WHERE {w} GROUP BY "host", "uuid", "model"'
        )
        names = list(q)
        with ThreadPoolExecutor(WORKERS) as pool:
            got = dict(zip(names, pool.map(self.client.rows, (q[n] for n in names)), strict=True))

        def mean(r: dict, p: str):
            return r[f"{p}_sum"] / r[f"{p}_count"] if r.get(f"{p}_count") else None

        def at(r: dict) -> dict:
            return {"host": r.get("host") or "", "uuid": r.get("uuid") or "", "time": r["time"]}

        def present(rows: list[dict], *names: str) -> list[dict]:
            # A bucket where none of the raw query's fields had a value has no row there either.
            return [r for r in rows if any(r.get(n) for n in names)]

        clocks = present(got["gpu_cells_clocks"], "sm_count", "max_sm_max")
        out = {
            "mem": [
                {**at(r), **{p: mean(r, p) for p in sums["gpu_cells_memory"]}}
                for r in present(got["gpu_cells_memory"], *(f"{p}_count" for p in sums["gpu_cells_memory"]))
            ],
            "power": [
                {**at(r), "power_w": mean(r, "power"), "power_limit_w": r.get("limit_max")}
                for r in present(got["gpu_cells_power"], "power_count", "limit_max")
            ],
            "clocks": [
                {**at(r), "sm_clock": mean(r, "sm"), "max_sm_clock": r.get("max_sm_max"), "n": r.get("sm_count") or 0}
                for r in clocks
            ],
            "pcie": [
                {
                    **at(r),
                    "tx": mean(r, "tx"),
                    "rx": mean(r, "rx"),
                    "link_gen": r.get("link_gen_max"),
                    "link_width": r.get("link_width_max"),
                }
                for r in present(got["gpu_cells_pcie"], "tx_count", "rx_count", "link_gen_max", "link_width_max")
            ],
            "nvlink": [
                {
                    **at(r),
                    "tx": mean(r, "tx"),
                    "rx": mean(r, "rx"),
                    "links": r.get("links_max"),
                    "version": r.get("version_max"),
                }
                for r in present(got["gpu_cells_nvlink"], "tx_count", "rx_count", "links_max", "version_max")
            ],
            "model": got["model"],
        }
        for reason in CELL_REASONS:
            out[reason] = [{**at(r), "n": r[f"{reason}_n"]} for r in clocks if r.get(f"{reason}_n")]
        return out

    def energy(self, t0_ns: int, t1_ns: int, gpus=None) -> dict[tuple, float]:
        """Per (host, uuid), the energy over [t0, t1] from the report's pieces (rollups where whole
        buckets fall, raw points at the edges), as the report's own energy figure."""
        rng = Range(t0_ns, t1_ns + 1)  # InfluxWork's window holds its end
        if not usable(rng, self.report.reach):
            return super().energy(t0_ns, t1_ns, gpus)
        where = None
        if gpus and len(gpus) <= 48 and all(PLAIN_UUID.fullmatch(u) for _, u in gpus):
            where = " OR ".join(f"\"uuid\" = '{u}'" for u in sorted({u for _, u in gpus}))
        self.from_rollups.add("energy")
        span = RollupReport(self.client, rng, "gpu", where, self.report.reach)
        out: dict[tuple, float] = {}
        for (host, uuid, _, _), (joules, _, _) in span._energy_per_gpu(times=False).items():
            out[(host, uuid)] = out.get((host, uuid), 0.0) + joules
        return out
