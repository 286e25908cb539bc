"""What limits the work, from positive evidence only, on a real InfluxDB 1.6 and a real VictoriaMetrics.

Synthetic GPUs, each with the same readings at every step and one piece of work, are written into
both servers; `compare --by gpu` (every bucket of the GPU) must give the shares those readings say
by the rules of docs/compare.md, on both engines: among them an H100 at 100 % NVML utilisation whose
GPM says SMs 2 % and DRAM 3 % (launch- or host-bound: not `compute`), a GPU busy half the time
(its idle half `starved`), an NVLink-bound H100 (`interconnect`, not a proxy) and an Ada card
whose fields claim no class (`unclassified`, never `compute`).
"""

from __future__ import annotations

import math
import time
import urllib.request
import uuid

import pytest
from compare_helpers import compare_json

pytestmark = pytest.mark.servers

STEP_S = 10
STEPS = 60
H100, L40S = "NVIDIA H100 80GB HBM3", "NVIDIA L40S"
NVLINK_PEAK = 2 * 18 * 25e9  # 18 NVLink 4.0 links (version enum 6), 25 GB/s each way

# uuid -> (model, gpu_memory fields, power W of a 700 W / 350 W limit, NVLink B/s or None, the expected shares)
GPUS = {
    "GPU-launch": (
        H100,
        {"gpu_util_pct": 100.0, "sm_active_pct": 2.0, "dram_bw_util_pct": 3.0, "tensor_active_pct": 0.5,
         "sm_occupancy_pct": 1.0, "memory_util_pct": 3.0},
        300.0, None, {"starved": 100.0},
    ),
    "GPU-decode": (
        H100,
        {"gpu_util_pct": 50.0, "sm_active_pct": 40.0, "dram_bw_util_pct": 40.0, "tensor_active_pct": 5.0,
         "sm_occupancy_pct": 10.0, "memory_util_pct": 40.0},
        350.0, None, {"memory": 50.0, "starved": 50.0},
    ),
    "GPU-prefill": (
        H100,
        {"gpu_util_pct": 90.0, "sm_active_pct": 85.0, "dram_bw_util_pct": 20.0, "tensor_active_pct": 60.0,
         "sm_occupancy_pct": 40.0, "memory_util_pct": 20.0},
        600.0, None, {"compute": 90.0, "starved": 10.0},
    ),
    "GPU-nvlink": (
        H100,
        {"gpu_util_pct": 95.0, "sm_active_pct": 50.0, "dram_bw_util_pct": 30.0, "tensor_active_pct": 20.0,
         "sm_occupancy_pct": 20.0, "memory_util_pct": 30.0},
        400.0, 0.8 * NVLINK_PEAK, {"interconnect": 95.0, "starved": 5.0},
    ),
    "GPU-ada-mem": (
        L40S, {"gpu_util_pct": 80.0, "memory_util_pct": 64.0}, 250.0, None, {"memory": 80.0, "starved": 20.0},
    ),
    "GPU-ada-none": (  # memory busy 25 % of its busy time, power 45 % of the limit while busy: no class says so
        L40S, {"gpu_util_pct": 80.0, "memory_util_pct": 20.0}, 126.0, None, {"unclassified": 80.0, "starved": 20.0},
    ),
}  # fmt: skip
LIMIT_W = {H100: 700.0, L40S: 350.0}
PROXY = {"GPU-ada-mem": {"memory"}}


def _lines(end_s: int) -> list[str]:
    lines = []
    for i, (uid, (model, mem, power, nvlink, _)) in enumerate(GPUS.items()):
        tags = f"host=syn,uuid={uid},gpu={i},model={model.replace(' ', chr(92) + ' ')}"
        for k in range(STEPS):
            t = (end_s - (STEPS - 1 - k) * STEP_S) * 10**9
            fields = ",".join(f"{f}={v!r}" for f, v in mem.items())
            lines.append(f"gpu_memory,{tags} {fields} {t}")
            limit = LIMIT_W[model]
            lines.append(
                f"gpu_power,{tags} power_w={power!r},enforced_power_limit_w={limit!r},energy_j={k * power * STEP_S!r} {t}"
            )
            lines.append(
                f"gpu_clocks,{tags} sm_clock_mhz=1980.0,max_sm_clock_mhz=1980.0,sw_power_cap=false,"
                f"hw_power_brake_slowdown=false,sw_thermal_slowdown=false,hw_thermal_slowdown=false {t}"
            )
            lines.append(
                f"gpu_work,{tags},workload=w{i},unit=tokens_out,source=vllm,work_id={i} "
                f"units_total={1000 * k}i,gpus=1i {t}"
            )
            if nvlink is not None:
                lines.append(f"gpu_nvlink,{tags} links=18i,links_active=18i,total_tx_bytes_per_sec={nvlink / 2!r},"
                             f"total_rx_bytes_per_sec={nvlink / 2!r} {t}")  # fmt: skip
                for link in range(18):
                    lines.append(f"gpu_nvlink,{tags},link={link} active=true,version=6i {t}")
    return lines


@pytest.fixture(scope="module")
def synthetic(influxdb_v1, victoria_metrics):
    db = f"evidence_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    end_s = int(time.time()) // STEP_S * STEP_S - 60
    lines = _lines(end_s)
    influxdb_v1.write(lines, db=db)
    body = ("\n".join(lines) + "\n").encode()
    with urllib.request.urlopen(urllib.request.Request(f"{victoria_metrics.url}/write?db={db}", data=body)) as r:
        assert r.status == 204
    victoria_metrics.export(f'{{__name__="gpu_work_units_total",db="{db}"}}', min_samples=len(GPUS) * STEPS)
    yield db, end_s
    influxdb_v1.drop_database(db)


@pytest.mark.parametrize("engine", ["influxql", "promql"])
@pytest.mark.parametrize("by", ["gpu", "model,workload"])
# On samples inside the work's first and last; ending 4.5 s after the last one, which is on a bucket's
# start; starting 4.5 s after a sample, between two. The edge buckets hold work: none may read idle.
@pytest.mark.parametrize(("start_s", "end_s"), [(2 * STEP_S, -STEP_S), (2 * STEP_S, 4.5), (2 * STEP_S + 4.5, -STEP_S)])
def test_each_gpu_is_classed_by_what_its_fields_say(
    synthetic, influxdb_v1, victoria_metrics, cli, engine, by, start_s, end_s
):
    db, last_s = synthetic
    first_s = last_s - (STEPS - 1) * STEP_S
    start_ns, stop_ns = int((first_s + start_s) * 10**9), int((last_s + end_s) * 10**9)
    conn = (
        ["--url", influxdb_v1.url, "--database", db]
        if engine == "influxql"
        else ["--promql-url", victoria_metrics.url, "--where", f'db="{db}"']
    )
    doc = compare_json(cli, conn, start_ns, stop_ns, "--by", by)
    seen = set()
    for g in doc["groups"]:
        uid = g["key"]["uuid"] if by == "gpu" else f"{list(GPUS)[int(g['key']['workload'][1:])]}"
        seen.add(uid)
        expected = GPUS[uid][4]
        for cls, pct in g["limits"].items():
            assert math.isclose(pct, expected.get(cls, 0.0), abs_tol=1e-9), (uid, cls, g["limits"])
            assert g["limits_proxy"][cls] is (cls in PROXY.get(uid, set()) and pct > 0), (uid, cls)
    assert seen == set(GPUS)
