"""Spool replay throughput: points/s from the on-disk spool into a local InfluxDB 1.x.

The spool is filled with N points of an 8-GPU fleet (the shape of a long
outage), then an influxdb sink (api v1, gzip, default batch size) starts
against a fresh local influxd and the clock runs until the spool is empty.
The count is checked by query afterwards, so a fast but lossy replay fails.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

GOAL = 100_000  # points/s


def _servers():
    name = "gpuagent_test_servers"
    if name not in sys.modules:
        path = Path(__file__).resolve().parent.parent / "tests" / "servers.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _fill(spool, points: int, batch_size: int) -> int:
    from gpuagent import Accumulator

    base = (time.time_ns() // 10**9 - 86400) * 10**9
    lines: list[str] = []
    interval = 0
    while len(lines) < points:
        acc = Accumulator({"host": "bench-node"}, time_ns=base + interval * 10**9)
        for g in range(8):
            tags = {
                "gpu": str(g),
                "uuid": f"GPU-{g:08x}-0000-0000-0000-000000000000",
                "model": "NVIDIA H100 80GB HBM3",
                "pci_bus_id": f"00000000:{0x18 + g:02X}:00.0",
                "arch": "Hopper",
            }
            acc.add_fields(
                "gpu_clocks",
                {"sm_clock_mhz": 1980 - interval % 50, "mem_clock_mhz": 2619, "throttled": interval % 7 == 0},
                tags=tags,
            )
            acc.add_fields(
                "gpu_power",
                {"power_w": 300.0 + (interval * 13 + g) % 400 / 3, "energy_j": 1e6 + interval * 700.25},
                tags=tags,
            )
            acc.add_fields("gpu_memory", {"fb_used_bytes": 2**34 + interval, "dram_bw_util_pct": 41.5}, tags=tags)
        lines.extend(p.to_line() for p in acc.points)
        interval += 1
    del lines[points:]
    power = sum(1 for line in lines if line.startswith("gpu_power,"))
    for i in range(0, len(lines), batch_size):
        chunk = lines[i : i + batch_size]
        spool.push(("\n".join(chunk) + "\n").encode(), len(chunk))
    return len(lines), power


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(quick: bool = False) -> dict:
    from gpuagent.context import AgentContext
    from gpuagent.pipeline.spool import Spool
    from gpuagent.plugins.influxdb import InfluxDBSink

    servers = _servers()
    binary = shutil.which(servers.INFLUXD) or "/usr/bin/influxd"
    if not Path(binary).exists():
        return {"name": "replay", "error": "influxd not found (Debian package `influxdb`)", "holds": False}
    n = 200_000 if quick else 1_000_000
    with tempfile.TemporaryDirectory(prefix="gpuagent-bench-replay-") as tmp:
        tmp = Path(tmp)
        server = servers.InfluxdServer(binary, tmp / "influxd")
        server.start()
        try:
            config = InfluxDBSink.Config.model_validate(
                {"api": "v1", "url": server.url, "database": server.database, "max_spool_bytes": "2GiB"}
            )
            state = tmp / "state"
            spool = Spool(state / "spool" / "influxdb", config.max_spool_bytes)
            n, power_points = _fill(spool, n, config.batch_size)
            spool_bytes = spool.bytes
            spool.close()

            sink = InfluxDBSink(config, AgentContext(hostname="bench", state_dir=state))
            server_cpu0, cpu0 = _cpu_seconds(server._proc.pid), time.process_time()
            t0 = time.perf_counter()
            sink.start()
            while sink.stats()["spool_points"] and time.perf_counter() - t0 < 600:
                time.sleep(0.005)
            elapsed = time.perf_counter() - t0
            agent_cpu = time.process_time() - cpu0
            server_cpu = _cpu_seconds(server._proc.pid) - server_cpu0
            stats = sink.stats()
            sink.close()
            stored = server.query('SELECT count("power_w") FROM "gpu_power"')
            stored_power = stored[0]["values"][0][1] if stored else 0
        finally:
            server.stop()
    rate = stats["replayed_total"] / elapsed if elapsed > 0 else 0.0
    complete = stats["replayed_total"] == n and stats["spool_points"] == 0 and stored_power == power_points
    return {
        "name": "replay",
        "figure": round(rate),
        "unit": "points/s",
        "detail": {
            "points": n,
            "seconds": round(elapsed, 2),
            "spool_mib": round(spool_bytes / 2**20, 1),
            "batch_size": config.batch_size,
            # CPU seconds of each side: on a shared machine the wall-clock rate
            # is capped by what the neighbours leave; these show the real cost.
            "agent_cpu_s": round(agent_cpu, 2),
            "influxd_cpu_s": round(server_cpu, 2),
            "points_per_cpu_s": round(n / (agent_cpu + server_cpu)) if agent_cpu + server_cpu > 0 else None,
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "all_stored": complete,
        },
        "goal": f"≥ {GOAL:,} points/s into local InfluxDB (influxd 1.x, api v1)",
        "holds": complete and rate >= GOAL,
    }


if __name__ == "__main__":
    import json

    print(json.dumps(run(quick="--quick" in sys.argv), indent=2))
