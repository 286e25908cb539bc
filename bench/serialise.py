"""Line-protocol serialisation: ours against influxdb-client's Point."""

from __future__ import annotations

import time

from influxdb_client import Point as ClientPoint
from influxdb_client.domain.write_precision import WritePrecision

from gpuagent.pipeline.metric import serialize

TAGS = {
    "host": "node-17",
    "gpu": "3",
    "uuid": "GPU-8d3c1f0e-0000-0000-0000-000000000000",
    "model": "NVIDIA H100 80GB HBM3",
    "pci_bus_id": "00000000:4E:00.0",
    "arch": "Hopper",
}
FIELDS = {
    "sm_clock_mhz": 1980,
    "mem_clock_mhz": 2619,
    "graphics_clock_mhz": 1980,
    "max_sm_clock_mhz": 1980,
    "pstate": 0,
    "clock_event_reasons": 4,
    "sw_power_cap": True,
    "hw_slowdown": False,
    "power_w": 698.412,
    "energy_j": 123456.789,
}


def _rate(fn, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        fn(i)
    return n / (time.perf_counter() - t0)


def run(quick: bool = False) -> dict:
    n = 20_000 if quick else 100_000

    def ours(i):
        serialize("gpu_clocks", TAGS, FIELDS, 1_700_000_000_000_000_000 + i)

    def theirs(i):
        p = ClientPoint("gpu_clocks")
        for k, v in TAGS.items():
            p.tag(k, v)
        for k, v in FIELDS.items():
            p.field(k, v)
        p.time(1_700_000_000_000_000_000 + i, WritePrecision.NS)
        p.to_line_protocol()

    ours_rate = max(_rate(ours, n) for _ in range(3))
    theirs_rate = max(_rate(theirs, n // 4) for _ in range(3))
    ratio = ours_rate / theirs_rate
    return {
        "name": "serialise",
        "figure": round(ours_rate),
        "unit": "points/s",
        "detail": {"influxdb_client_points_per_s": round(theirs_rate), "ratio_ours_over_client": round(ratio, 2)},
        "goal": "faster than influxdb-client (ratio ≥ 1)",
        "holds": ratio >= 1.0,
    }
