"""`sim fleet` at fleet scale: simulate a few hosts in full, replay them as the rest.

Running the real collectors over the simulated NVML costs about 0.3 ms per GPU
and step (a few thousand points per second per core), so a 1,000-host history
would take hours. Host *i* is simulated in full when *i* < `distinct` × the
number of specs; every other host replays prototype *i* mod that period (same
spec) under its own `host` tag and its own GPU UUIDs (`uuid`, `peer_uuid`),
derived from the host name. Its readings are then the prototype's, time for
time: the fleet has `distinct` load histories per spec, which is what a
scale test of the database and of `compare` needs (same series count, same
points, same write pattern); it is not a fleet of independent machines.
Replaying is string substitution on the prototype's line-protocol batches,
so writing is the cost: gzip and the server's ingestion, in `jobs` threads.
"""

from __future__ import annotations

import hashlib
import re
import threading
from concurrent.futures import ThreadPoolExecutor

from gpuagent.compare.query import Connection, InfluxQL
from gpuagent.sim.fleet_backfill import HostPlan, backfill, simulate_host
from gpuagent.sim.workers import worker_pool

_UUID = re.compile(r"uuid=(GPU-[0-9a-fA-F-]+)")


def replica_uuid(host: str, uuid: str) -> str:
    h = hashlib.blake2b(f"{host}/{uuid}".encode(), digest_size=16).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def uuids_of(batches: list[str]) -> list[str]:
    return sorted({u for body in batches for u in _UUID.findall(body)})


def substitute(batches: list[str], proto: str, host: str, uuids: list[str]) -> list[str]:
    """The prototype's batches as `host`'s: its host tag and GPU UUIDs replaced."""
    out = []
    for body in batches:
        for u in uuids:
            body = body.replace(u, replica_uuid(host, u))
        body = body.replace(f",host={proto},", f",host={host},").replace(f",host={proto} ", f",host={host} ")
        out.append(body)
    return out


def _simulate_in_worker(plan: HostPlan) -> list[str]:
    import logging

    logging.getLogger("gpuagent").setLevel(logging.ERROR)  # a spawned worker's own logger only
    return simulate_host(plan, None, keep=True)


def backfill_replayed(
    plans: list[HostPlan], conn: Connection, jobs: int, distinct: int, n_specs: int, progress=None
) -> int:
    """Every host's history; the first `distinct` × `n_specs` simulated, the rest replayed. Returns points.
    Each host simulated and each written advances `progress` (gpuagent.compare.progress), when given."""
    period = max(1, distinct * n_specs)
    if len(plans) <= period:
        return backfill(plans, conn, jobs, progress)
    protos = plans[:period]

    def advance(label: str) -> None:
        if progress is not None:
            progress.advance(label)

    batches = []
    if jobs > 1:
        with worker_pool(min(jobs, period)) as workers:
            for p, b in zip(protos, workers.map(_simulate_in_worker, protos), strict=True):
                batches.append(b)
                advance(f"simulated {p.hostname}")
    else:
        for p in protos:
            batches.append(simulate_host(p, None, keep=True))
            advance(f"simulated {p.hostname}")
    uuids = [uuids_of(b) for b in batches]
    local = threading.local()
    clients: list[InfluxQL] = []

    def write(i: int) -> int:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = InfluxQL(conn)
            clients.append(client)
        k = i % period
        bodies = batches[k]
        if i >= period:
            bodies = substitute(bodies, protos[k].hostname, plans[i].hostname, uuids[k])
        for body in bodies:
            client.write(body.encode())
        return sum(b.count("\n") for b in bodies)

    pool = ThreadPoolExecutor(max(2, jobs))
    try:
        written = 0
        for i, n in enumerate(pool.map(write, range(len(plans)))):
            written += n
            advance(f"wrote {plans[i].hostname}")
        return written
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # Ctrl-C: the queued writes are not made
        raise
    finally:
        pool.shutdown(wait=True)
        for client in clients:
            client.close()
