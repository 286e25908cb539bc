"""`sim fleet --distinct N`: hosts beyond N per spec replay a simulated one under their own identity."""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict

import pytest
from click.testing import CliRunner

from gpuagent.sim.fleet_replay import replica_uuid, substitute

pytestmark = pytest.mark.servers


def test_substitute_renames_host_and_every_uuid_only():
    body = (
        "gpu_p2p,arch=Hopper,gpu=0,host=sim-1,model=H,peer_gpu=1,peer_uuid=GPU-bbb,uuid=GPU-aaa read_ok=t 1\n"
        "gpu_power,arch=Hopper,gpu=0,host=sim-1,model=H,uuid=GPU-aaa power_w=1 1\n"
        "gpu_power,arch=Hopper,gpu=0,host=sim-10,model=H,uuid=GPU-ccc power_w=1 1\n"
    )
    out = substitute([body], "sim-1", "sim-7", ["GPU-aaa", "GPU-bbb"])[0]
    a, b = replica_uuid("sim-7", "GPU-aaa"), replica_uuid("sim-7", "GPU-bbb")
    assert out.count("host=sim-7,") == 2 and "host=sim-10," in out  # a longer name is left alone
    assert f"peer_uuid={b},uuid={a}" in out and "GPU-aaa" not in out and "GPU-ccc" in out
    assert replica_uuid("sim-7", "GPU-aaa") != replica_uuid("sim-8", "GPU-aaa")


def test_replayed_hosts_have_their_own_names_and_uuids_and_the_prototypes_readings(influxdb_v1, gpuagent_cli):
    db = f"replay_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    end_s = int(time.time()) // 10 * 10 - 60
    try:
        result = CliRunner().invoke(
            gpuagent_cli,
            [
                "sim",
                "fleet",
                "--url",
                influxdb_v1.url,
                "--database",
                db,
                "--spec",
                "h100-sxm:2",
                "--spec",
                "l40s:2",
                "--hosts",
                "6",
                "--distinct",
                "1",
                "--duration",
                "2m",
                "--step",
                "10s",
                "--end",
                str(end_s),
                "--jobs",
                "1",
            ],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
        rows = influxdb_v1.points('SELECT "power_w" FROM "gpu_power" GROUP BY "host", "uuid", "model"', db=db)
        hosts = Counter(r["host"] for r in rows)
        assert sorted(hosts) == [f"sim-{i:02d}" for i in range(6)] and len(set(hosts.values())) == 1
        per_gpu = defaultdict(list)
        for r in rows:
            per_gpu[(r["host"], r["uuid"])].append((r["time"], r["power_w"]))
        assert len({u for _, u in per_gpu}) == 12  # 6 hosts x 2 GPUs, no UUID shared

        # sim-02 replays sim-00 (same spec, h100-sxm): the same readings at the same times, GPU by GPU.
        def series(host):
            return sorted(sorted(v) for (h, _), v in per_gpu.items() if h == host)

        assert series("sim-02") == series("sim-00") and series("sim-03") == series("sim-01")
        assert series("sim-00") != series("sim-01")
        # P2P peers point at the replica's own GPUs.
        p2p = influxdb_v1.points(
            'SELECT "read_ok" FROM "gpu_p2p" WHERE "host" = \'sim-04\' GROUP BY "uuid", "peer_uuid"', db=db
        )
        own = {u for h, u in per_gpu if h == "sim-04"}
        assert p2p and {r["peer_uuid"] for r in p2p} <= own and {r["uuid"] for r in p2p} <= own
    finally:
        influxdb_v1.drop_database(db)
