"""`gpuagent compare` and `gpuagent sim fleet` against a real InfluxDB 1.x (the `influxdb_v1` fixture).

A small fleet (L40S with vGPU, H100 SXM, RTX 4090, H100 SXM with MIG; 2 GPUs
each, 20 min at 10 s) is backfilled once per module through the CLI. Every
figure of `compare --format json` is then recomputed here from the raw points
(SELECT *), in plain Python, and must agree within float tolerance.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from compare_helpers import sim_fleet_args

pytestmark = pytest.mark.servers

SPECS = ("l40s-vgpu:2", "h100-sxm:2", "rtx4090:2", "h100-sxm-mig:2")
STEP_S = 10
DURATION_S = 20 * 60
REASONS = (
    "idle",
    "applications_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def fleet_db(influxdb_v1, cli):
    """A fresh database with the backfilled fleet and a few gpu_l2_probe points; (name, end_ns)."""
    db = f"compare_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    end_s = int(time.time()) // STEP_S * STEP_S - 60
    args = sim_fleet_args(
        influxdb_v1.url, db, hosts=4, duration_s=DURATION_S, step_s=STEP_S, end_s=end_s, seed=3, specs=SPECS
    )
    t0 = time.perf_counter()
    result = cli(*args)
    elapsed = time.perf_counter() - t0
    assert result.exit_code == 0, result.output
    points = int(result.stderr.split("wrote ")[1].split()[0])
    print(f"\nsim fleet: {points} points in {elapsed:.2f}s ({points / elapsed:,.0f} points/s)")
    _write_probe_points(influxdb_v1, db, end_s * 10**9)
    yield db, end_s * 10**9
    influxdb_v1.drop_database(db)


def _write_probe_points(server, db, end_ns):
    """gpu_l2_probe summary + curve points (docs/probe.md) for both L40S GPUs of sim-00."""
    gpus = [
        r for r in server.points('SELECT LAST("power_w") FROM "gpu_power" WHERE "host" = \'sim-00\' GROUP BY *', db=db)
    ]
    assert len(gpus) == 2
    lines = []
    for n, g in enumerate(gpus):
        tags = ",".join(f"{k}={_escape_tag(g[k])}" for k in ("arch", "gpu", "host", "model", "pci_bus_id", "uuid"))
        for run, t0 in enumerate((end_ns - 600 * 10**9, end_ns - 300 * 10**9)):
            t0 += n * 10**6 * 100
            ratio = 3.1 + 0.2 * run + 0.1 * n
            lines.append(
                f"gpu_l2_probe,{tags} l2_effective_bytes={100663296 - run * 4194304}i,l2_bw_gbps={2600.0 + 50 * run},"
                f"dram_bw_gbps={2600.0 / ratio},l2_dram_ratio={ratio},reported_l2_bytes=100663296i,knee_found=true,"
                f'knees=1i,steps=3i,method="simulated",duration_s=1.5 {t0}'
            )
            for i in range(3):
                lines.append(
                    f"gpu_l2_probe,{tags} working_set_bytes={(i + 1) * 2**25}i,bandwidth_gbps={2000.0 - i * 500},"
                    f"step={i}i {t0 + (i + 1) * 10**6}"
                )
    server.write(lines, db=db)


def _escape_tag(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ")


def _range(end_ns):
    # Cuts the backfill: the first 5 min are outside, so the range filter is exercised too.
    return end_ns - (DURATION_S - 300) * 10**9, end_ns + 1


def _compare(cli, server, db, start_ns, end_ns, *extra):
    result = cli(
        "compare",
        "--url",
        server.url,
        "--database",
        db,
        "--start",
        _epoch(start_ns),
        "--end",
        _epoch(end_ns),
        *extra,
    )
    return result


# -- the independent computation, from raw points ---------------------------------------------------------


def _epoch(ns: int) -> str:
    return f"{ns // 10**9}.{ns % 10**9:09d}"


def _raw(server, db, measurement, start_ns, end_ns):
    return server.points(f'SELECT * FROM "{measurement}" WHERE time >= {start_ns} AND time < {end_ns}', db=db)


def _gpu(row):
    return (row["host"], row["uuid"], row["model"], row["gpu"])


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _nearest_rank(values, pct):
    values = sorted(v for v in values if v is not None)
    i = int(math.floor(len(values) * pct / 100 + 0.5)) - 1
    return values[i] if 0 <= i < len(values) else None


def _max(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def expected_report(server, db, start_ns, end_ns, by):
    key_of = {"model": lambda g: (g[2],), "host": lambda g: (g[0],), "gpu": lambda g: (g[0], g[1])}[by]
    raw = {
        m: _raw(server, db, m, start_ns, end_ns)
        for m in (
            "gpu_power",
            "gpu_clocks",
            "gpu_memory",
            "gpu_p2p",
            "gpu_mig",
            "gpu_vgpu",
            "gpu_l2_probe",
            "gpu_health",
        )
    }
    gpus = {_gpu(r) for m in ("gpu_power", "gpu_clocks", "gpu_memory") for r in raw[m]}
    groups = defaultdict(list)
    for g in gpus:
        groups[key_of(g)].append(g)

    def rows(measurement, members):
        members = set(members)
        return [r for r in raw[measurement] if _gpu(r) in members]

    out = {}
    for key, members in groups.items():
        e = {
            "gpus": len(members),
            "hosts": sorted({g[0] for g in members}),
            "models": sorted({g[2] for g in members}),
        }
        power = rows("gpu_power", members)
        e["power_mean_w"] = _mean([r["power_w"] for r in power])
        e["power_p95_w"] = _nearest_rank([r["power_w"] for r in power], 95)
        # Energy and busy time, per GPU.
        energy = seconds = busy_energy = busy_s = 0.0
        for g in members:
            samples = sorted(
                (r["time"], r["energy_j"]) for r in rows("gpu_power", [g]) if r.get("energy_j") is not None
            )
            if not samples:
                continue
            e_g = sum(b - a for (_, a), (_, b) in zip(samples, samples[1:], strict=False) if b >= a)
            t_g = (samples[-1][0] - samples[0][0]) / 1e9
            energy += e_g
            seconds += t_g
            util = _mean([r.get("gpu_util_pct") for r in rows("gpu_memory", [g])])
            if util is not None:
                busy_energy += e_g
                busy_s += t_g * util / 100
        e["energy_kwh"] = energy / 3.6e6
        e["gpu_hours"] = seconds / 3600
        e["energy_wh_per_gpu_hour"] = energy / seconds if seconds else None
        e["busy_gpu_hours"] = busy_s / 3600
        e["energy_wh_per_busy_gpu_hour"] = busy_energy / busy_s if busy_s else None
        clocks = rows("gpu_clocks", members)
        sm = _mean([r.get("sm_clock_mhz") for r in clocks])
        peak = _mean([r.get("max_sm_clock_mhz") for r in clocks])
        e["sm_clock_mean_mhz"], e["sm_clock_max_mhz"] = sm, peak
        e["sm_clock_pct_of_max"] = 100 * sm / peak
        shares = {}
        for reason in REASONS:
            values = [r[reason] for r in clocks if r.get(reason) is not None]
            if values:
                shares[reason] = 100 * sum(1 for v in values if v is True) / len(values)
        e["throttle_share_pct"] = shares
        mem = rows("gpu_memory", members)
        e["gpu_util_mean_pct"] = _mean([r.get("gpu_util_pct") for r in mem])
        e["dram_bw_util_mean_pct"] = _mean([r.get("dram_bw_util_pct") for r in mem])
        e["dram_bw_mean_gbps"] = _mean([r.get("dram_bw_gbps") for r in mem])
        e["dram_peak_gbps"] = _max([r.get("dram_peak_gbps") for r in mem])
        e["fb_used_mean_bytes"] = _mean([r.get("fb_used_bytes") for r in mem])
        e["fb_used_max_bytes"] = _max([r.get("fb_used_bytes") for r in mem])
        e["fb_total_bytes"] = _max([r.get("fb_total_bytes") for r in mem])
        e["l2_cache_bytes"] = _max([r.get("l2_cache_bytes") for r in mem])
        p2p = {"nvlink": 0, "pcie": 0, "none": 0}
        for g in members:
            pr = rows("gpu_p2p", [g])
            kind = (
                "nvlink"
                if any(r.get("nvlink_ok") is True for r in pr)
                else ("pcie" if any(r.get("read_ok") is True for r in pr) else "none")
            )
            p2p[kind] += 1
        e["p2p"] = p2p
        mig = {"capable_gpus": 0, "enabled_gpus": 0, "devices": 0}
        for g in members:
            mr = [r for r in rows("gpu_mig", [g]) if r.get("max_mig_devices") is not None]
            if mr:
                mig["capable_gpus"] += 1
                mig["devices"] += max(r["mig_devices"] for r in mr)
            if any(r.get("mig_mode_current") is True for r in rows("gpu_mig", [g])):
                mig["enabled_gpus"] += 1
        mig["profiles"] = sorted({r["mig_profile"] for r in rows("gpu_mig", members) if r.get("mig_index") is not None})
        e["mig"] = mig
        vgpu = {"modes": {}, "instances": 0}
        for g in members:
            vr = sorted(
                (r["time"], r["virtualization_mode"]) for r in rows("gpu_vgpu", [g]) if r.get("virtualization_mode")
            )
            if vr:
                vgpu["modes"][vr[-1][1]] = vgpu["modes"].get(vr[-1][1], 0) + 1
            inst = [r["active_instances"] for r in rows("gpu_vgpu", [g]) if r.get("active_instances") is not None]
            vgpu["instances"] += max(inst) if inst else 0
        vgpu["types"] = sorted({r["vgpu_type"] for r in rows("gpu_vgpu", members) if r.get("vgpu_type_id") is not None})
        e["vgpu"] = vgpu
        probe = [r for r in rows("gpu_l2_probe", members) if r.get("l2_dram_ratio") is not None]
        e["l2_probe"] = (
            {
                "runs": len(probe),
                "l2_effective_bytes": _mean([r["l2_effective_bytes"] for r in probe]),
                "l2_bw_gbps": _mean([r["l2_bw_gbps"] for r in probe]),
                "dram_bw_gbps": _mean([r["dram_bw_gbps"] for r in probe]),
                "l2_dram_ratio": _mean([r["l2_dram_ratio"] for r in probe]),
            }
            if probe
            else None
        )
        e["health_gpu_hours"] = _health_hours(rows("gpu_health", members), start_ns, end_ns)
        out[key] = e
    return out, raw


def _health_hours(rows, start_ns, end_ns):
    """Per GPU and epoch-aligned bucket (whole minutes, about 1000 at most), the bucket's time inside
    the range, shared among its verdicts by their count of samples."""
    from gpuagent.compare.health import VERDICTS

    bucket = max(60, math.ceil((end_ns - start_ns) / 1e9 / 1000 / 60) * 60) * 10**9
    per = defaultdict(list)
    for r in rows:
        if r.get("verdict") is not None:
            per[(_gpu(r), r["time"] // bucket * bucket)].append(r["verdict"])
    hours = dict.fromkeys(VERDICTS, 0.0)
    for (_, b), verdicts in per.items():
        inside = (min(b + bucket, end_ns) - max(b, start_ns)) / 1e9
        for v in set(verdicts):
            hours[v] = hours.get(v, 0.0) + inside * verdicts.count(v) / len(verdicts) / 3600
    return hours


def expected_series(raw, start_ns, end_ns, bucket_s, by, labels):
    key_of = {"model": lambda g: (g[2],), "host": lambda g: (g[0],), "gpu": lambda g: (g[0], g[1])}[by]
    acc = defaultdict(lambda: defaultdict(list))
    for r in raw["gpu_power"]:
        b = r["time"] // (bucket_s * 10**9) * bucket_s * 10**9
        acc[labels[key_of(_gpu(r))]][b].append(r["power_w"])
    return {label: [[t, sum(v) / len(v)] for t, v in sorted(buckets.items())] for label, buckets in sorted(acc.items())}


def assert_same(actual, expected, path="", rel=1e-9, abs_=1e-6):
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), f"{path}: keys {actual!r} != {expected!r}"
        for k in expected:
            assert_same(actual[k], expected[k], f"{path}.{k}", rel, abs_)
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{path}: {actual!r} != {expected!r}"
        for i, (a, b) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, b, f"{path}[{i}]", rel, abs_)
    elif isinstance(expected, float) or isinstance(actual, float):
        assert actual is not None and expected is not None, f"{path}: {actual!r} != {expected!r}"
        assert math.isclose(actual, expected, rel_tol=rel, abs_tol=abs_), f"{path}: {actual!r} != {expected!r}"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


# -- tests --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", ["model", "host", "gpu"])
def test_every_json_figure_matches_the_raw_points(fleet_db, influxdb_v1, cli, by):
    db, end_ns = fleet_db
    start_ns, stop_ns = _range(end_ns)
    result = _compare(cli, influxdb_v1, db, start_ns, stop_ns, "--format", "json", "--by", by)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    expected, raw = expected_report(influxdb_v1, db, start_ns, stop_ns, by)
    tags = {"model": ("model",), "host": ("host",), "gpu": ("host", "uuid")}[by]
    got = {tuple(g["key"][t] for t in tags): g for g in doc["groups"]}
    assert set(got) == set(expected)
    if by == "model":
        assert {k[0] for k in got} == {
            "NVIDIA L40S",
            "NVIDIA H100 80GB HBM3",
            "NVIDIA GeForce RTX 4090",
        }
    compared = 0
    for key, exp in expected.items():
        g = got[key]
        for name, value in exp.items():
            assert_same(g[name], value, f"{key}.{name}")
            compared += 1
        assert g["p2p_summary"]  # derived from p2p, checked below for the model grouping
    assert compared >= len(expected) * 25
    span_h = (stop_ns - start_ns) / 3.6e12
    for g in doc["groups"]:  # no figure holds more time than the group's GPUs × the range
        bound = g["gpus"] * span_h * (1 + 1e-9)
        assert g["busy_gpu_hours"] <= g["gpu_hours"] <= bound and sum(g["health_gpu_hours"].values()) <= bound
    labels = {tuple(g["key"].values()): g["label"] for g in doc["groups"]}
    assert_same(
        doc["series"]["power_mean_w"],
        expected_series(raw, start_ns, stop_ns, doc["series"]["bucket_s"], by, labels),
        "series",
    )
    # The fleet is what was asked for, and the figures show what each card is.
    if by == "model":
        l40s, h100, rtx = (got[(m,)] for m in ("NVIDIA L40S", "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"))
        assert (l40s["gpus"], h100["gpus"], rtx["gpus"]) == (2, 4, 2)
        assert (l40s["p2p_summary"], rtx["p2p_summary"]) == ("PCIe", "none")
        assert h100["p2p"] == {"nvlink": 2, "pcie": 0, "none": 2}  # MIG GPUs report no P2P
        assert h100["mig"]["enabled_gpus"] == 2 and h100["mig"]["devices"] == 4
        assert l40s["vgpu"]["modes"] == {"host_vgpu": 2} and l40s["vgpu"]["instances"] == 4
        assert l40s["l2_cache_bytes"] == 96 * 2**20 and rtx["l2_cache_bytes"] == 72 * 2**20
        assert l40s["l2_probe"]["runs"] == 4 and h100["l2_probe"] is None
        assert 0 < l40s["energy_wh_per_busy_gpu_hour"] and l40s["energy_wh_per_gpu_hour"] <= 350 * 1.01
        assert all(0 < g["sm_clock_pct_of_max"] <= 100 for g in doc["groups"])
        assert "busy GPU-hours" in doc["definitions"]["energy_wh_per_busy_gpu_hour"]
        # the backfill runs the health collector: a healthy simulated fleet is ok all the time
        hours = h100["health_gpu_hours"]
        assert hours["ok"] > 0 and sum(v for k, v in hours.items() if k != "ok") == 0


def test_table_and_csv(fleet_db, influxdb_v1, cli):
    db, end_ns = fleet_db
    start_ns, stop_ns = _range(end_ns)
    table = _compare(cli, influxdb_v1, db, start_ns, stop_ns)
    assert table.exit_code == 0, table.output
    for text in (
        "NVIDIA L40S",
        "NVIDIA H100 80GB HBM3",
        "Wh / busy GPU-h",
        "busy GPU-hours",
        "NVLink 2, none 2",
    ):
        assert text in table.stdout
    csv_out = _compare(cli, influxdb_v1, db, start_ns, stop_ns, "--format", "csv", "--by", "gpu")
    assert csv_out.exit_code == 0, csv_out.output
    lines = csv_out.stdout.strip().splitlines()
    assert lines[0].startswith("label,gpus,hosts,models,power_mean_w") and len(lines) == 1 + 8
    assert lines[0].endswith(",health_drain_gpu_hours,health_lost_gpu_hours")  # GPU-hours per verdict
    assert "health GPU-h" in table.stdout


def test_by_host_names_each_hosts_model_and_fits_the_terminal(fleet_db, influxdb_v1, cli, monkeypatch):
    db, end_ns = fleet_db
    start_ns, stop_ns = _range(end_ns)
    monkeypatch.setenv("COLUMNS", "100")
    table = _compare(cli, influxdb_v1, db, start_ns, stop_ns, "--by", "host")
    assert table.exit_code == 0, table.output
    doc = json.loads(_compare(cli, influxdb_v1, db, start_ns, stop_ns, "--by", "host", "--format", "json").stdout)
    lines = table.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    model_rows = [line for line in lines if line.startswith("│ model ")]
    assert model_rows  # a model row in every part the table was split into
    for g in doc["groups"]:
        assert any(", ".join(g["models"]) in row for row in model_rows), g["label"]
    assert "Wh / busy GPU-h (efficiency)" in table.stdout


def test_queries_asked_at_once_give_the_document_asked_one_by_one(fleet_db, influxdb_v1, cli, monkeypatch):
    from gpuagent.compare import report

    db, end_ns = fleet_db
    start_ns, stop_ns = _range(end_ns)
    docs = {}
    at_once = report.WORKERS
    assert at_once > 1
    for workers in (at_once, 1):
        monkeypatch.setattr(report, "WORKERS", workers)
        result = _compare(cli, influxdb_v1, db, start_ns, stop_ns, "--format", "json", "--by", "gpu")
        assert result.exit_code == 0, result.output
        docs[workers] = result.stdout
    assert docs[at_once] == docs[1]  # byte for byte: the key order does not depend on timing


def test_where_filters_by_tag(fleet_db, influxdb_v1, cli):
    db, end_ns = fleet_db
    start_ns, stop_ns = _range(end_ns)
    result = _compare(
        cli,
        influxdb_v1,
        db,
        start_ns,
        stop_ns,
        "--format",
        "json",
        "--where",
        "host =~ /^sim-0[01]$/",
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert sorted(h for g in doc["groups"] for h in g["hosts"]) == ["sim-00", "sim-01"]


def test_html_report_renders_in_headless_chromium(fleet_db, influxdb_v1, cli, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    db, end_ns = fleet_db
    start_ns, stop_ns = _range(end_ns)
    page = tmp_path / "report.html"
    result = _compare(cli, influxdb_v1, db, start_ns, stop_ns, "--format", "html", "-o", str(page))
    assert result.exit_code == 0, result.output
    text = page.read_text()
    # power, efficiency, DRAM and throttling as HTML bars (a row per group each); power over time as SVG
    assert text.count('<span class="track">') == 4 * 3 and text.count("<svg") == 1
    # Self-contained: nothing to fetch, nothing to run.
    assert "<script" not in text and "src=" not in text and 'href="http' not in text
    assert "energy per busy GPU-hour" in text.lower() or "busy GPU-hours" in text
    shot = tmp_path / "report.png"
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            f"--screenshot={shot}",
            "--window-size=1400,2000",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert console == []
    assert shot.exists() and shot.stat().st_size > 50_000


def test_empty_range_is_one_line(fleet_db, influxdb_v1, cli):
    db, _ = fleet_db
    result = cli(
        "compare",
        "--url",
        influxdb_v1.url,
        "--database",
        db,
        "--start",
        "2001-01-01T00:00:00Z",
        "--end",
        "2001-01-02T00:00:00Z",
        "--format",
        "json",
    )
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no GPU readings" in lines[0] and "2001-01-01" in lines[0], result.stderr


def test_unreachable_server_is_one_line_naming_the_url(cli):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    result = cli("compare", "--url", url, "--database", "gpuagent", "--since", "1h")
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and url in lines[0] and "Traceback" not in result.output, result.stderr
    fleet = cli("sim", "fleet", "--url", url, "--database", "x", "--spec", "l40s:1", "--duration", "1m")
    assert fleet.exit_code == 1 and url in fleet.stderr.strip() and len(fleet.stderr.strip().splitlines()) == 1


def test_connection_from_the_sink_table_of_the_config(fleet_db, influxdb_v1, cli, tmp_path):
    db, end_ns = fleet_db
    start_ns, stop_ns = _range(end_ns)
    config = tmp_path / "gpuagent.toml"
    config.write_text(f'[sinks.influxdb]\nurl = "{influxdb_v1.url}"\napi = "v1"\ndatabase = "{db}"\n')
    result = cli(
        "compare",
        "--config",
        str(config),
        "--start",
        _epoch(start_ns),
        "--end",
        _epoch(stop_ns),
        "--format",
        "json",
        "--by",
        "host",
    )
    assert result.exit_code == 0, result.output
    assert [g["label"] for g in json.loads(result.stdout)["groups"]] == [
        "sim-00",
        "sim-01",
        "sim-02",
        "sim-03",
    ]
    config.write_text(f'[sinks.influxdb]\nurl = "{influxdb_v1.url}"\napi = "v1"\n')
    bad = cli("compare", "--config", str(config))
    assert bad.exit_code == 1 and "database" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_bad_input_is_one_line(influxdb_v1, cli):
    cases = [
        (
            [
                "compare",
                "--url",
                influxdb_v1.url,
                "--database",
                "gpuagent",
                "--where",
                "host = 'a'; DROP DATABASE x",
            ],
            "--where",
        ),
        (
            ["compare", "--url", influxdb_v1.url, "--database", "gpuagent", "--where", "host =="],
            "at character 7",  # of the user's text (tests/compare/test_compare_where.py)
        ),
        (
            ["compare", "--url", influxdb_v1.url, "--database", "gpuagent", "--start", "yesterday"],
            "not a time",
        ),
        (
            [
                "sim",
                "fleet",
                "--url",
                influxdb_v1.url,
                "--database",
                "gpuagent",
                "--spec",
                "l40s:x",
            ],
            "COUNT",
        ),
        (
            [
                "sim",
                "fleet",
                "--url",
                influxdb_v1.url,
                "--database",
                "gpuagent",
                "--spec",
                "l40s:1",
                "--collectors",
                "power,nope",
            ],
            "nope",
        ),
        # A database the server lacks is created by `sim fleet` now (tests/compare/test_fleet_database.py).
    ]
    for args, needle in cases:
        result = cli(*args)
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 1 and len(lines) == 1 and needle in lines[0], (
            args,
            result.output,
        )


def test_credentials_from_the_config_reach_a_server_with_auth(influxdb_v1_factory, cli, tmp_path):
    server = influxdb_v1_factory(auth=True)
    config = tmp_path / "gpuagent.toml"
    table = f'[sinks.influxdb]\nurl = "{server.url}"\napi = "v1"\ndatabase = "gpuagent"\nusername = "admin"\n'
    config.write_text(table + 'password = "admin-pass"\n')
    config.chmod(0o600)
    ok = cli("compare", "--config", str(config), "--since", "1h")
    assert ok.exit_code == 1 and "no GPU readings" in ok.stderr, ok.output  # authenticated, empty database
    config.write_text(table + 'password = "wrong"\n')
    refused = cli("compare", "--config", str(config), "--since", "1h")
    assert refused.exit_code == 1 and "refused the credentials" in refused.stderr, refused.output
    assert "wrong" not in refused.stderr


def test_a_server_that_does_not_answer_in_time_is_one_line_that_says_so(influxdb_v1_factory, victoria_metrics, cli):
    # A slow server is not an unreachable one: the line says which, and how to give it longer.
    server = influxdb_v1_factory()
    with server.suspended():
        result = cli("compare", "--url", server.url, "--database", "gpuagent", "--since", "1h", "--timeout", "1s")
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == (
        f"gpuagent: error: InfluxDB at {server.url} did not answer within 1s "
        "(a long range or a large fleet: give it longer with --timeout)"
    )
    with victoria_metrics.suspended():
        result = cli("compare", "--promql-url", victoria_metrics.url, "--since", "1h", "--timeout", "500ms")
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"the PromQL server at {victoria_metrics.url} did not answer within 0.5s (" in lines[0]
    bad = cli("compare", "--url", server.url, "--since", "1h", "--timeout", "soon")
    assert bad.exit_code == 1 and bad.stderr.strip().startswith("gpuagent: error: --timeout: ")
