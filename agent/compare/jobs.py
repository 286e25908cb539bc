"""`gpuagent compare --by job` / `--by pod`: per Slurm job or Kubernetes pod, from gpu_job.

The processes collector writes one gpu_job point per GPU per job (or pod) holding it, with the
GPU's energy counter, its busy time and the job's memory and SM activity on it. So a job's
figures are per (job, GPU) series, computed by the database (InfluxQL
NON_NEGATIVE_DIFFERENCE in a subquery, FIRST/LAST, MEAN, MAX, GROUP BY tags), and Python only
adds up the few per-GPU rows of each job.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gpuagent.compare import where as where_rule
from gpuagent.compare.core import NoData, Range, report_document, rfc3339
from gpuagent.compare.figures import ENERGY_WH, GPU_HOURS
from gpuagent.compare.prices import Prices
from gpuagent.compare.query import InfluxQL
from gpuagent.compare.sharing import shared_segments
from gpuagent.compare.work import WORK_DEFINITIONS, InfluxWork, work_section
from gpuagent.errors import AgentError

GPU_TAGS = ("host", "uuid", "model", "gpu")
# The tags that name a group, and the one every point of the grouping must have.
JOB_GROUPS = {
    "job": ("slurm_job_id",),
    "pod": ("k8s_pod_uid", "k8s_namespace", "k8s_pod"),
}

JOB_DEFINITIONS = {
    "gpus": "GPUs the job (pod) held at some sample in the range",
    GPU_HOURS: "per GPU, the time from the job's first to its last gpu_job sample on it, summed; while "
    "other jobs held the GPU too, shared by the jobs' mean SM activity on it (sm_util_pct) where all have one, "
    "evenly otherwise, so the jobs on a GPU never sum above the GPU",
    ENERGY_WH: "per GPU, the sum of the non-negative increases of the GPU's energy_j counter "
    "between the job's consecutive gpu_job samples on it, summed over its GPUs; a GPU held by "
    "two jobs at once is shared between them as its time is (gpu_hours)",
    "sm_util_mean_pct": "mean of the job's SM activity samples (its processes' sm_util_pct on the "
    "GPU, summed per sample); where the driver gives no per-process samples, the GPU's gpu_util_pct",
    "peak_memory_bytes": "largest GPU memory the job's processes held on one GPU at one sample",
    "idle_gpu_hours": "per GPU, the time the job's gpu_job points said allocated_idle (held with no "
    "kernel activity for [collectors.processes] idle_after or longer): the increases of idle_s "
    "between consecutive flagged samples, summed over its GPUs; the idle_after before the flag is "
    "not counted",
    "idle_cost": "idle_gpu_hours × the GPU-hour price of each GPU's model ([compare.prices]); null without a price",
}


class JobReport:
    def __init__(
        self, client: InfluxQL, rng: Range, by: str = "job", where: str | None = None,
        prices: Prices | None = None,
    ):  # fmt: skip
        if by not in JOB_GROUPS:
            raise AgentError(f"--by {by!r}: expected one of {', '.join(JOB_GROUPS)}")
        where = where_rule.influxql(where)  # one condition (gpuagent.compare.where)
        self.client, self.range, self.by, self.where = client, rng, by, (where or "").strip()
        self.key_tags = JOB_GROUPS[by]
        self.prices = prices or Prices()  # [compare.prices]: cost per unit of work, and of idle GPU-hours

    def _where(self) -> str:
        parts = [self.range.clause()]
        if self.where:
            parts.append(f"({self.where})")
        # Points of another grouping (a pod's, for --by job) have no such tag.
        parts.append("(" + " OR ".join(f"\"{t}\" != ''" for t in self.key_tags) + ")")
        return " AND ".join(parts)

    def _rows(self, select: str, group: tuple[str, ...]) -> list[dict]:
        by = ", ".join(f'"{t}"' for t in group)
        q = f'SELECT {select} FROM "gpu_job" WHERE {self._where()} GROUP BY {by}'
        return self.client.rows(q)

    def build(self) -> dict[str, Any]:
        series = (*self.key_tags, *GPU_TAGS)
        energy = self._increase("energy_j", series)
        idle = self._increase("idle_s", series, ' AND "allocated_idle" = true')
        first = {_key(r, series): r["time"] for r in self._rows('FIRST("processes")', series)}
        last = {_key(r, series): r["time"] for r in self._rows('LAST("processes")', series)}
        if not first:
            raise NoData(
                f"no gpu_job points with {self.key_tags[0]} between {rfc3339(self.range.start_ns)} "
                f"and {rfc3339(self.range.end_ns)} in {self.client.conn.label} "
                "(the processes collector writes them; `sim fleet --with-jobs` simulates some)"
            )
        means = {
            _key(r, self.key_tags): r
            for r in self._rows(
                'MEAN("sm_util_pct") AS sm, MEAN("gpu_util_pct") AS util, MAX("used_memory_bytes") AS peak',
                self.key_tags,
            )
        }
        hours, energy = self._shared(series, first, last, energy)
        groups: dict[tuple, dict[str, Any]] = {}
        members: dict[tuple, list] = defaultdict(list)
        for skey, t0 in first.items():
            jkey = skey[: len(self.key_tags)]
            members[jkey].append((dict(zip(series, skey, strict=True)), t0, last.get(skey, t0)))
        for jkey, gpus in members.items():
            m = means.get(jkey, {})
            seconds = sum(hours[_key(tags, series)] * 3600 for tags, _, _ in gpus)
            joules = sum(energy.get(_key(tags, series), 0.0) for tags, _, _ in gpus)
            groups[jkey] = {
                "key": dict(zip(self.key_tags, jkey, strict=True)),
                "label": self._label(jkey),
                "models": sorted({tags["model"] for tags, _, _ in gpus}),
                "hosts": sorted({tags["host"] for tags, _, _ in gpus}),
                "gpus": len({(tags["host"], tags["uuid"]) for tags, _, _ in gpus}),
                "start": rfc3339(min(t0 for _, t0, _ in gpus)),
                "end": rfc3339(max(t1 for _, _, t1 in gpus)),
                GPU_HOURS: seconds / 3600.0,
                ENERGY_WH: joules / 3600.0,
                "idle_gpu_hours": sum(idle.get(_key(tags, series), 0.0) for tags, _, _ in gpus) / 3600.0,
                "idle_cost": self._idle_cost(
                    [(tags["model"], idle.get(_key(tags, series), 0.0)) for tags, _, _ in gpus]
                ),
                "sm_util_mean_pct": m.get("sm") if m.get("sm") is not None else m.get("util"),
                "peak_memory_bytes": m.get("peak"),
                "per_gpu": [
                    {
                        **{t: tags[t] for t in GPU_TAGS},
                        ENERGY_WH: energy.get(_key(tags, series), 0.0) / 3600.0,
                        GPU_HOURS: hours[_key(tags, series)],
                        "idle_gpu_hours": idle.get(_key(tags, series), 0.0) / 3600.0,
                    }
                    for tags, t0, t1 in sorted(gpus, key=lambda g: (g[0]["host"], g[0]["gpu"]))
                ],
            }
        definitions = JOB_DEFINITIONS
        if self.by == "job":  # per unit of work of the job's gpu_work points (gpuagent.compare.work)
            shadow: dict[tuple, dict] = {jkey: {} for jkey in groups}
            work_section(
                InfluxWork(self.client, self.range, self.where, gpu_where=True),
                self.range,
                "job",
                self.prices,
                self.where,
                shadow,
            )
            for jkey, fields in shadow.items():
                groups[jkey].update(fields)
            definitions = {**JOB_DEFINITIONS, **WORK_DEFINITIONS}
        source = {"url": self.client.conn.url, "database": self.client.conn.database}
        return report_document(self.range, self.by, self.where, source, definitions, groups)

    def _shared(self, series: tuple[str, ...], first: dict, last: dict, energy: dict) -> tuple[dict, dict]:
        """Per (job, GPU) series, its GPU-hours and energy with the GPU shared among the jobs (pods) on it
        at the same time (gpuagent.compare.sharing): by each one's mean SM activity on the GPU where
        all have one, evenly otherwise. A series alone on its GPU keeps its span and its energy."""
        sm = {_key(r, series): r.get("sm") for r in self._rows('MEAN("sm_util_pct") AS sm', series)}
        slots: dict[tuple, list] = defaultdict(list)
        for skey, t0 in first.items():
            tags = dict(zip(series, skey, strict=True))
            slots[(tags["host"], tags["uuid"])].append((skey, t0, last.get(skey, t0)))
        hours = {skey: (last.get(skey, t0) - t0) / 3.6e12 for skey, t0 in first.items()}
        energy = dict(energy)
        n = len(self.key_tags)
        for (host, uuid), members in slots.items():
            segs = shared_segments([(k[:n], t0, t1, sm.get(k)) for k, t0, t1 in members])
            if all(len(sg) == 1 and sg[0][2] == 1.0 for sg in segs):
                continue  # alone on the GPU all along
            for (skey, _, _), sg in zip(members, segs, strict=True):
                hours[skey] = sum((b - a) * f for a, b, f in sg) / 3.6e12
                energy[skey] = sum(self._gpu_energy(host, uuid, a, b) * f for a, b, f in sg)
        return hours, energy

    def _gpu_energy(self, host: str, uuid: str, a: int, b: int) -> float:
        """The GPU's energy_j increase (non-negative steps) between its gpu_job samples in [a, b]."""
        w = f"time >= {a} AND time <= {b} AND \"host\" = '{_quote(host)}' AND \"uuid\" = '{_quote(uuid)}'"
        inner = f'SELECT NON_NEGATIVE_DIFFERENCE("energy_j") AS d FROM "gpu_job" WHERE {w} GROUP BY "host", "uuid"'
        rows = self.client.rows(f"SELECT SUM(d) FROM ({inner}) WHERE {w}")
        return (rows[0].get("sum") or 0.0) if rows else 0.0

    def _increase(self, field: str, series: tuple[str, ...], condition: str = "") -> dict[tuple, float]:
        """Per job series: how much a counter field grew over the range (its non-negative steps summed)."""
        by = ", ".join(f'"{t}"' for t in series)
        inner = (
            f'SELECT NON_NEGATIVE_DIFFERENCE("{field}") AS d FROM "gpu_job" '
            f"WHERE {self._where()}{condition} GROUP BY {by}"
        )
        return {
            _key(r, series): r.get("sum") or 0.0
            for r in self.client.rows(f"SELECT SUM(d) FROM ({inner}) WHERE {self.range.clause()} GROUP BY {by}")
        }

    def _idle_cost(self, per_gpu: list[tuple[str, float]]) -> float | None:
        """Idle GPU-hours in money, each GPU at its model's price; None when a GPU that idled has none."""
        total = 0.0
        for model, idle_s in per_gpu:
            if not idle_s:
                continue
            price = self.prices.gpu_hour_price(model)
            if price is None:
                return None
            total += idle_s / 3600.0 * price
        return total

    def _label(self, jkey: tuple) -> str:
        if self.by == "pod":
            uid, namespace, pod = jkey
            return f"{namespace}/{pod}" if pod else uid
        return jkey[0]


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _key(row: dict, tags: tuple[str, ...]) -> tuple:
    return tuple(row.get(t) or "" for t in tags)
