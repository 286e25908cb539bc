"""`gpuagent compare --by model,workload`: per unit of work, against a real InfluxDB 1.6 and a real
VictoriaMetrics, recomputed here in plain Python from the raw points.

One simulated fleet of four models (L40S, H100 SXM, A100 SXM4, RTX 4090; 4 GPUs each) runs the
inference scenario's three workloads (one of them tensor parallel over two GPUs), 20 min at 10 s,
with the PCIe collector; `sim fleet` writes its `gpu_work` points beside the GPU readings, the same
into both servers. Some work starts a few steps late and some restarts (a counter reset), so
"exactly the GPUs that did the work over exactly the time they did it" and the reset rule are both
exercised. Nothing here asserts what the throughput model concludes.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from compare_helpers import sim_fleet_args

from gpuagent.compare.limits import CLASSES
from tests.compare.test_compare import CHROMIUM

pytestmark = pytest.mark.servers

SPECS = ("l40s:4", "h100-sxm:4", "a100-sxm4:4", "rtx4090:4")
STEP_S = 10
DURATION_S = 20 * 60
PRICES = {"gpu_hour": {"NVIDIA H100 80GB HBM3": 2.5, "NVIDIA L40S": 1.1, "default": 0.9}, "kwh": 0.14, "pue": 1.25}
REL = 1e-9


def _backfill(cli, url, db, end_s):
    args = sim_fleet_args(url, db, hosts=4, duration_s=DURATION_S, step_s=STEP_S, end_s=end_s, seed=5, specs=SPECS)
    result = cli(*args, "--scenario", "inference", "--collectors", "power,clocks,memory,pcie")
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def work_fleet(influxdb_v1, victoria_metrics, cli, tmp_path_factory):
    db = f"work_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    end_s = int(time.time()) // STEP_S * STEP_S - 60
    _backfill(cli, influxdb_v1.url, db, end_s)
    _backfill(cli, victoria_metrics.url, db, end_s)
    victoria_metrics.export(
        f'{{__name__="gpu_work_units_total",db="{db}"}}', min_samples=12 * (DURATION_S // STEP_S) - 200
    )
    config = tmp_path_factory.mktemp("work") / "gpuagent.toml"
    # The agent's own config: compare reads its [sinks.influxdb] and [compare.prices].
    lines = [
        "[sinks.influxdb]",
        'api = "v1"',
        f'url = "{influxdb_v1.url}"',
        f'database = "{db}"',
        "[compare.prices]",
        f"kwh = {PRICES['kwh']}",
        f"pue = {PRICES['pue']}",
        "[compare.prices.gpu_hour]",
    ]
    lines += [f'"{m}" = {p}' for m, p in PRICES["gpu_hour"].items()]
    config.write_text("\n".join(lines) + "\n")
    yield db, end_s, config
    influxdb_v1.drop_database(db)


def _range(end_s):
    # Not on a step: the first and last samples of each series are inside, not at the edges.
    start_ns = (end_s - DURATION_S + 35) * 10**9
    stop_ns = (end_s - 25) * 10**9 + 500_000_000
    return start_ns, stop_ns


def _compare(cli, config, *args):
    result = cli("compare", "--config", str(config), *args)
    assert result.exit_code == 0, result.output
    return result


def _influx_doc(cli, influxdb_v1, work_fleet, by="model,workload"):
    db, end_s, config = work_fleet
    start_ns, stop_ns = _range(end_s)
    result = _compare(
        cli,
        config,
        "--url",
        influxdb_v1.url,
        "--database",
        db,
        "--by",
        by,
        "--start",
        f"{start_ns / 1e9:.3f}",
        "--end",
        f"{stop_ns / 1e9:.3f}",
        "--format",
        "json",
    )
    return json.loads(result.stdout)


def _prom_doc(cli, victoria_metrics, work_fleet, by="model,workload"):
    db, end_s, config = work_fleet
    start_ns, stop_ns = _range(end_s)
    result = _compare(
        cli,
        config,
        "--promql-url",
        victoria_metrics.url,
        "--where",
        f'db="{db}"',
        "--by",
        by,
        "--start",
        f"{start_ns / 1e9:.3f}",
        "--end",
        f"{stop_ns / 1e9:.3f}",
        "--format",
        "json",
    )
    return json.loads(result.stdout)


def _raw(influxdb_v1, db, measurement, fields, start_ns, stop_ns):
    out = defaultdict(list)
    q = f'SELECT {", ".join(fields)} FROM "{measurement}" WHERE time >= {start_ns} AND time < {stop_ns} GROUP BY *'
    for series in influxdb_v1.query(q, db=db):
        for values in series["values"]:
            row = dict(zip(series["columns"], values, strict=True))
            out[tuple(sorted(series["tags"].items()))].append(row)
    return out


def recompute(influxdb_v1, db, start_ns, stop_ns, prices=PRICES):
    """Per (model, workload) and unit: units, GPU-hours, Wh and $ from the raw points, as the docs say
    (work on a MIG slice charged its gpu_share of the GPU-hours and energy)."""
    work = _raw(influxdb_v1, db, "gpu_work", ["units_total", "gpus", "gpu_share"], start_ns, stop_ns)
    power = _raw(influxdb_v1, db, "gpu_power", ["energy_j"], start_ns, stop_ns)
    energy_of = {}
    for tags, rows in power.items():
        t = dict(tags)
        energy_of[(t["host"], t["uuid"])] = sorted((r["time"], r["energy_j"]) for r in rows)
    out = defaultdict(lambda: {"units": 0.0, "seconds": 0.0, "joules": 0.0, "cost": 0.0})
    resets = 0
    for tags, rows in work.items():
        t = dict(tags)
        rows.sort(key=lambda r: r["time"])
        increase = 0.0
        for a, b in zip(rows, rows[1:], strict=False):
            step = b["units_total"] - a["units_total"]
            increase += step if step >= 0 else b["units_total"]
            resets += step < 0
        t0, t1 = rows[0]["time"], rows[-1]["time"]
        samples = [(ts, e) for ts, e in energy_of[(t["host"], t["uuid"])] if t0 <= ts <= t1]
        joules = sum(max(0.0, e2 - e1) for (_, e1), (_, e2) in zip(samples, samples[1:], strict=False))
        share = rows[-1].get("gpu_share") or 1.0
        joules *= share
        hours = (t1 - t0) / 3.6e12 * share
        price = prices["gpu_hour"].get(t["model"], prices["gpu_hour"]["default"])
        o = out[(t["model"], t["workload"], t["unit"])]
        o["units"] += increase / rows[-1]["gpus"]
        o["seconds"] += (t1 - t0) / 1e9 * share
        o["joules"] += joules
        o["cost"] += price * hours + prices["kwh"] * prices["pue"] * joules / 3.6e6
    return out, resets


def _close(a, b, rel=REL):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def _check(doc, expected):
    seen = set()
    for g in doc["groups"]:
        model, workload = g["key"]["model"], g["key"]["workload"]
        for unit, w in g["work"].items():
            e = expected[(model, workload, unit)]
            seen.add((model, workload, unit))
            hours = e["seconds"] / 3600
            assert _close(w["units"], e["units"]), (model, workload, w["units"], e["units"])
            assert _close(w["gpu_hours"], hours), (model, workload)
            assert _close(w["units_per_gpu_hour"], e["units"] / hours), (model, workload)
            assert _close(w["wh_per_unit"], e["joules"] / 3600 / e["units"]), (model, workload)
            assert _close(w["cost_per_million_units"], 1e6 * e["cost"] / e["units"]), (model, workload)
        assert _close(sum(g["limits"].values()), 100.0, 1e-9), g["limits"]
        assert set(g["limits"]) == set(CLASSES)
        assert set(g["limits_proxy"]) == set(g["limits"])
    assert seen == set(expected)


def test_per_unit_figures_equal_the_raw_points_over_influxql(work_fleet, influxdb_v1, cli):
    db, end_s, _ = work_fleet
    doc = _influx_doc(cli, influxdb_v1, work_fleet)
    expected, resets = recompute(influxdb_v1, db, *_range(end_s))
    assert resets > 0  # a server restarted in the range: the reset rule is exercised
    models = {k[0] for k in expected}
    workloads = {k[1] for k in expected}
    assert len(models) == 4 and len(workloads) == 3
    _check(doc, expected)
    assert doc["by"] == "model,workload" and doc["prices"]["pue"] == PRICES["pue"]


def test_per_unit_figures_equal_the_raw_points_over_promql(work_fleet, influxdb_v1, victoria_metrics, cli):
    db, end_s, _ = work_fleet
    doc = _prom_doc(cli, victoria_metrics, work_fleet)
    expected, _ = recompute(influxdb_v1, db, *_range(end_s))
    assert "victoriametrics" in doc["source"]["database"]
    _check(doc, expected)


def test_limits_agree_across_engines(work_fleet, influxdb_v1, victoria_metrics, cli):
    """The same buckets and rules over both engines: the same class shares (InfluxQL's MEAN and
    PromQL's avg_over_time average the same samples)."""
    a = {tuple(g["key"].values()): g for g in _influx_doc(cli, influxdb_v1, work_fleet)["groups"]}
    b = {tuple(g["key"].values()): g for g in _prom_doc(cli, victoria_metrics, work_fleet)["groups"]}
    assert set(a) == set(b)
    for key in a:
        for cls, share in a[key]["limits"].items():
            assert math.isclose(share, b[key]["limits"][cls], abs_tol=1e-6), (key, cls)
        assert a[key]["limits_proxy"] == b[key]["limits_proxy"]


def test_proxy_classes_only_on_cards_without_gpm(work_fleet, influxdb_v1, cli):
    doc = _influx_doc(cli, influxdb_v1, work_fleet)
    for g in doc["groups"]:
        gpm = g["key"]["model"].startswith("NVIDIA H100")
        for cls in ("compute", "memory"):
            if g["limits"][cls] > 0:
                assert g["limits_proxy"][cls] is (not gpm), (g["key"], cls)


def test_cross_model_view(work_fleet, influxdb_v1, cli):
    db, end_s, _ = work_fleet
    doc = _influx_doc(cli, influxdb_v1, work_fleet)
    expected, _ = recompute(influxdb_v1, db, *_range(end_s))
    cross = {(c["workload"], c["unit"]): c for c in doc["cross_model"]}
    assert len(cross) == 3
    for (workload, unit), c in cross.items():
        # every model that ran it (the 70B holds on two L40S, H100 or A100, not on two RTX 4090s)
        assert {m["model"] for m in c["models"]} == {m for m, w, u in expected if (w, u) == (workload, unit)}
        assert len(c["models"]) >= 3
        for figure in ("units_per_s_per_gpu", "units_per_s_per_kw", "units_per_dollar"):
            best = max(m[figure] for m in c["models"])
            assert any(_close(m[f"{figure}_best_pct"], 100.0) for m in c["models"])
            for m in c["models"]:
                assert _close(m[f"{figure}_best_pct"], 100 * m[figure] / best)
        for m in c["models"]:
            e = expected[(m["model"], workload, unit)]
            assert _close(m["gpu_hours"], e["seconds"] / 3600)
            assert _close(m["units_per_s_per_gpu"], e["units"] / e["seconds"])
            assert _close(m["units_per_s_per_kw"], 1000 * e["units"] / e["joules"])
            assert _close(m["units_per_dollar"], e["units"] / e["cost"])
            lo, hi = m["spread_units_per_s_per_gpu"]["min"], m["spread_units_per_s_per_gpu"]["max"]
            assert lo <= m["units_per_s_per_gpu"] * (1 + 1e-9) and hi >= m["units_per_s_per_gpu"] * (1 - 1e-9)


def test_by_workload_adds_the_models_up(work_fleet, influxdb_v1, cli):
    db, end_s, _ = work_fleet
    doc = _influx_doc(cli, influxdb_v1, work_fleet, by="workload")
    expected, _ = recompute(influxdb_v1, db, *_range(end_s))
    for g in doc["groups"]:
        for unit, w in g["work"].items():
            parts = [e for (m, wl, u), e in expected.items() if wl == g["key"]["workload"] and u == unit]
            assert len(parts) == len(g["models"]) >= 3
            assert _close(w["units"], sum(p["units"] for p in parts))
            assert _close(w["cost_per_million_units"], 1e6 * sum(p["cost"] for p in parts) / w["units"])


def test_without_prices_cost_is_null(work_fleet, influxdb_v1, cli, tmp_path):
    db, end_s, _ = work_fleet
    empty = tmp_path / "empty.toml"
    empty.write_text(f'[sinks.influxdb]\napi = "v1"\nurl = "{influxdb_v1.url}"\ndatabase = "{db}"\n')
    start_ns, stop_ns = _range(end_s)
    result = _compare(
        cli,
        empty,
        "--url",
        influxdb_v1.url,
        "--database",
        db,
        "--by",
        "model,workload",
        "--start",
        str(start_ns / 1e9),
        "--end",
        str(stop_ns / 1e9),
        "--format",
        "json",
    )
    doc = json.loads(result.stdout)
    assert doc["prices"] is None
    assert all(w["cost_per_million_units"] is None for g in doc["groups"] for w in g["work"].values())
    assert all(w["wh_per_unit"] > 0 for g in doc["groups"] for w in g["work"].values())


def test_prices_from_a_file_of_prices_only_and_the_server_from_the_flags(work_fleet, influxdb_v1, cli, tmp_path):
    """`--config prices.toml --url --database`: the file (only [compare.prices], as docs/compare.md shows
    it) gives the prices, the flags the server."""
    db, end_s, _ = work_fleet
    prices = tmp_path / "prices.toml"
    lines = ["[compare.prices]", f"kwh = {PRICES['kwh']}", f"pue = {PRICES['pue']}", "[compare.prices.gpu_hour]"]
    prices.write_text("\n".join(lines + [f'"{m}" = {p}' for m, p in PRICES["gpu_hour"].items()]) + "\n")
    start_ns, stop_ns = _range(end_s)
    span = ["--start", f"{start_ns / 1e9:.3f}", "--end", f"{stop_ns / 1e9:.3f}", "--format", "json"]
    result = _compare(cli, prices, "--url", influxdb_v1.url, "--database", db, "--by", "model,workload", *span)
    doc = json.loads(result.stdout)
    assert doc["prices"]["pue"] == PRICES["pue"]
    expected, _ = recompute(influxdb_v1, db, *_range(end_s))
    _check(doc, expected)  # the costs too


def test_bad_price_table_is_one_line(work_fleet, influxdb_v1, cli, tmp_path):
    db, end_s, _ = work_fleet
    bad = tmp_path / "bad.toml"
    bad.write_text(
        f'[sinks.influxdb]\napi = "v1"\nurl = "{influxdb_v1.url}"\ndatabase = "{db}"\n[compare.prices]\nkwh = "cheap"\n'
    )
    result = cli(
        "compare",
        "--config",
        str(bad),
        "--url",
        influxdb_v1.url,
        "--database",
        db,
        "--by",
        "model,workload",
        "--since",
        "1h",
    )
    assert result.exit_code != 0
    assert result.stderr.strip().count("\n") == 0 and "compare.prices.kwh" in result.stderr
    assert "Traceback" not in result.output


def test_table_and_csv(work_fleet, influxdb_v1, cli):
    db, end_s, config = work_fleet
    start_ns, stop_ns = _range(end_s)
    base = [
        "--url",
        influxdb_v1.url,
        "--database",
        db,
        "--by",
        "model,workload",
        "--start",
        str(start_ns / 1e9),
        "--end",
        str(stop_ns / 1e9),
    ]
    doc = _influx_doc(cli, influxdb_v1, work_fleet)
    csv_text = _compare(cli, config, *base, "--format", "csv").stdout
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert len(rows) == sum(len(g["work"]) for g in doc["groups"])
    by_label = {(r["group"], r["unit"]): r for r in rows}
    for g in doc["groups"]:
        for unit, w in g["work"].items():
            assert float(by_label[(g["label"], unit)]["units_per_gpu_hour"]) == w["units_per_gpu_hour"]
    table = _compare(cli, config, *base, "--format", "table").stdout
    assert "The same workload on each model" in table and "llama-3.1-8b" in table


def test_the_work_tables_fit_a_terminal_of_120_and_say_what_their_columns_mean(
    work_fleet, influxdb_v1, cli, monkeypatch
):
    db, end_s, config = work_fleet
    start_ns, stop_ns = _range(end_s)
    monkeypatch.setenv("COLUMNS", "120")
    args = ["--url", influxdb_v1.url, "--database", db, "--by", "model,workload"]
    table = _compare(cli, config, *args, "--start", str(start_ns / 1e9), "--end", str(stop_ns / 1e9)).stdout
    lines = table.splitlines()
    assert max(len(line) for line in lines) <= 120, max(lines, key=len)
    # Every figure is whole in some part: no cell folded onto a second line.
    doc = _influx_doc(cli, influxdb_v1, work_fleet)
    for g in doc["groups"]:
        for w in g["work"].values():
            assert f"{w['units_per_gpu_hour']:,.1f}" in table
    for definition in ("units/GPU-h:", "$/M units:", "compute*", "(of best):", "units/s per kW:", "[compare.prices]"):
        assert definition in table, definition
    # One best per workload and figure: only the best model reads 100%.
    for c in doc["cross_model"]:
        rows = [line for line in lines if line.startswith(f"│ {c['workload']} ") and f" {c['unit']} " in line]
        for column in range(5, 8):
            cells = [row.split("│")[column] for row in rows if len(row.split("│")) > column]
            assert sum("(100%)" in cell for cell in cells) <= 1, cells


def test_html_shows_the_per_workload_comparison_in_headless_chromium(work_fleet, influxdb_v1, cli, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    db, end_s, config = work_fleet
    start_ns, stop_ns = _range(end_s)
    page = tmp_path / "work.html"
    _compare(
        cli,
        config,
        "--url",
        influxdb_v1.url,
        "--database",
        db,
        "--by",
        "model,workload",
        "--start",
        str(start_ns / 1e9),
        "--end",
        str(stop_ns / 1e9),
        "--format",
        "html",
        "-o",
        str(page),
    )
    text = page.read_text()
    assert 'id="cross-model"' in text
    assert text.count("<svg") == 6  # per workload: energy per unit and cost per unit by model
    assert "<script" not in text and "src=" not in text and 'href="http' not in text
    shot = tmp_path / "work.png"
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
            "--window-size=1400,2400",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert console == []
    assert shot.stat().st_size > 20_000
    # The bars are on screen: laid out by Chromium with a width and in the bars' colour (a script in
    # a copy of the page writes what it finds into the DOM; the report itself has none).
    checked = page.with_name(page.stem + "-checked.html")
    checked.write_text(page.read_text().replace("</body>", BARS_CHECK + "</body>"))
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1400,2400",
            "--dump-dom",
            checked.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = re.search(r'<pre id="bars-check">(\d+)</pre>', proc.stdout)
    assert found, proc.stdout[-2000:]
    assert int(found.group(1)) >= 6  # at least one drawn bar per chart


# Bars drawn in the charts' colour with a visible width, counted by the laid-out page.
BARS_CHECK = """
<script>
(function () {
  let n = 0;
  for (const el of document.querySelectorAll('svg rect')) {
    const fill = getComputedStyle(el).fill.replace(/\\s/g, '');
    const r = el.getBoundingClientRect();
    if (r.width > 1 && r.height > 1 && (fill === 'rgb(68,114,196)' || fill === '#4472c4')) n++;
  }
  const pre = document.createElement('pre');
  pre.id = 'bars-check';
  pre.textContent = String(n);
  document.body.appendChild(pre);
})();
</script>
"""


def test_no_work_points_is_one_line(influxdb_v1, cli, tmp_path):
    db = f"nowork_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    try:
        result = cli("compare", "--url", influxdb_v1.url, "--database", db, "--by", "workload", "--since", "1h")
    finally:
        influxdb_v1.drop_database(db)
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no gpu_work points" in lines[0]


@pytest.mark.parametrize("engine", ["influxql", "promql"])
def test_by_model_report_gains_work_and_limits(work_fleet, influxdb_v1, victoria_metrics, cli, engine):
    """The GPU report's groups gain `work` and `limits`: by model every bucket of every GPU counts, so the
    time before a late piece of work started is `idle` there."""
    db, end_s, config = work_fleet
    start_ns, stop_ns = _range(end_s)
    where = (
        ["--url", influxdb_v1.url, "--database", db]
        if engine == "influxql"
        else ["--promql-url", victoria_metrics.url, "--where", f'db="{db}"']
    )
    result = _compare(
        cli,
        config,
        *where,
        "--by",
        "model",
        "--start",
        f"{start_ns / 1e9:.3f}",
        "--end",
        f"{stop_ns / 1e9:.3f}",
        "--format",
        "json",
    )
    doc = json.loads(result.stdout)
    expected, _ = recompute(influxdb_v1, db, start_ns, stop_ns)
    assert "work.units" in doc["definitions"]
    idle = 0.0
    for g in doc["groups"]:
        model = g["key"]["model"]
        assert _close(sum(g["limits"].values()), 100.0)
        idle += g["limits"]["idle"]
        for unit, w in g["work"].items():
            parts = [e for (m, _, u), e in expected.items() if m == model and u == unit]
            assert _close(w["units"], sum(p["units"] for p in parts))
            assert _close(w["wh_per_unit"], sum(p["joules"] for p in parts) / 3600 / w["units"])
    assert idle > 0


def test_by_job_gains_the_jobs_work(work_fleet, influxdb_v1, cli):
    """A job's gpu_work points carry its slurm_job_id: `--by job` gives its units and energy per unit,
    recomputed from the raw points. One GPU of the work fleet, copied as Slurm job 777's."""
    db, end_s, config = work_fleet
    start_ns, stop_ns = _range(end_s)
    work = _raw(influxdb_v1, db, "gpu_work", ["units_total", "gpus"], 0, stop_ns + 10**12)
    # A single-GPU piece of work, so that the copy is one GPU's.
    tags, rows = next((k, v) for k, v in sorted(work.items()) if v[0]["gpus"] == 1)
    t = dict(tags)
    gpu = f"host={t['host']},uuid={t['uuid']},model={t['model'].replace(' ', chr(92) + ' ')},gpu={t['gpu']}"
    power = next(
        v
        for k, v in _raw(influxdb_v1, db, "gpu_power", ["energy_j"], 0, stop_ns + 10**12).items()
        if dict(k)["uuid"] == t["uuid"]
    )
    job_db = f"job_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(job_db)
    try:
        lines = [f"gpu_power,{gpu} energy_j={r['energy_j']!r},power_w=100 {r['time']}" for r in power]
        lines += [f"gpu_job,{gpu},slurm_job_id=777 processes=1i,energy_j={r['energy_j']!r} {r['time']}" for r in power]
        lines += [
            f"gpu_work,{gpu},slurm_job_id=777,workload={t['workload']},unit={t['unit']},work_id={t['work_id']} "
            f"units_total={r['units_total']}i,gpus=1i {r['time']}"
            for r in rows
        ]
        influxdb_v1.write(lines, db=job_db)
        result = _compare(
            cli,
            config,
            "--url",
            influxdb_v1.url,
            "--database",
            job_db,
            "--by",
            "job",
            "--start",
            f"{start_ns / 1e9:.3f}",
            "--end",
            f"{stop_ns / 1e9:.3f}",
            "--format",
            "json",
        )
        doc = json.loads(result.stdout)
        expected, _ = recompute(influxdb_v1, job_db, start_ns, stop_ns)
    finally:
        influxdb_v1.drop_database(job_db)
    (g,) = doc["groups"]
    assert g["key"] == {"slurm_job_id": "777"}
    (e,) = expected.values()
    w = g["work"][t["unit"]]
    assert _close(w["units"], e["units"]) and _close(w["wh_per_unit"], e["joules"] / 3600 / e["units"])
    assert _close(w["cost_per_million_units"], 1e6 * e["cost"] / e["units"])
    assert _close(sum(g["limits"].values()), 100.0)


@pytest.mark.parametrize("engine", ["influxql", "promql"])
def test_the_simulated_decode_reads_memory_and_the_prefill_does_not(
    work_fleet, influxdb_v1, victoria_metrics, cli, engine
):
    """The simulator's written model (docs/simulator.md): a decode step moves DRAM 80 % of the GPU's busy
    time, the encoder's prefill step keeps the tensor cores 60 % busy and the DRAM under 16 %. Read by
    the rules (GPM on the H100, memory busy time elsewhere), decode is `memory` on every model, the
    prefill never is."""
    doc = (
        _influx_doc(cli, influxdb_v1, work_fleet)
        if engine == "influxql"
        else _prom_doc(cli, victoria_metrics, work_fleet)
    )
    for g in doc["groups"]:
        limits, label = g["limits"], g["label"]
        print(engine, label, {k: round(v, 1) for k, v in limits.items() if v})
        if g["key"]["workload"].startswith("llama"):
            assert max(limits, key=limits.get) == "memory" and limits["memory"] > 50, (label, limits)
        else:  # (a bucket where NVML's busy sample runs ahead of GPM's interval may read unclassified)
            assert limits["memory"] == 0 and limits["compute"] > 5 * limits["unclassified"], (label, limits)


def _mean(rows, field):
    vals = [r[field] for r in rows if r.get(field) is not None]
    return sum(vals) / len(vals) if vals else None


def recompute_limits(influxdb_v1, db, start_ns, stop_ns, bucket_s):
    """Per (model, workload), the class shares from the raw points: per GPU and whole bucket the means
    of its samples (docs/compare.md, 'What limits the work'), each bucket weighted by the work's hours
    in it, classed by the rules of gpuagent.compare.limits."""
    from gpuagent.compare import limits as lim

    b = bucket_s * 10**9
    lo, hi = start_ns // b * b, -(-stop_ns // b) * b
    fields = {
        "gpu_memory": ["gpu_util_pct", "memory_util_pct", "dram_bw_util_pct", "sm_active_pct", "tensor_active_pct",
                       "sm_occupancy_pct"],
        "gpu_power": ["power_w", "enforced_power_limit_w"],
        "gpu_clocks": ["sm_clock_mhz", "max_sm_clock_mhz", "sw_power_cap", "hw_power_brake_slowdown",
                       "sw_thermal_slowdown", "hw_thermal_slowdown"],
        "gpu_pcie": ["tx_bytes_per_s", "rx_bytes_per_s", "link_gen", "link_width"],
    }  # fmt: skip
    rows = defaultdict(lambda: defaultdict(list))  # (gpu, bucket) -> measurement -> rows
    for measurement, names in fields.items():
        for tags, points in _raw(influxdb_v1, db, measurement, names, lo, hi).items():
            t = dict(tags)
            for r in points:
                rows[((t["host"], t["uuid"]), r["time"] // b * b)][measurement].append(r)
    cells = {}
    for k, m in rows.items():
        mem, power, clocks, pcie = (m[x] for x in fields)
        c = lim.Cell(allocated=True)
        c.util, c.mem_busy, c.dram_bw = (_mean(mem, f) for f in fields["gpu_memory"][:3])
        c.sm_active, c.tensor_active, c.occupancy = (_mean(mem, f) for f in fields["gpu_memory"][3:])
        if power:
            c.power_ratio = _mean(power, "power_w") / max(r["enforced_power_limit_w"] for r in power)
        if clocks:
            c.clock_ratio = _mean(clocks, "sm_clock_mhz") / max(r["max_sm_clock_mhz"] for r in clocks)
            n = len([r for r in clocks if r["sm_clock_mhz"] is not None])
            pct = {f: 100.0 * sum(bool(r[f]) for r in clocks) / n for f in fields["gpu_clocks"][2:]}
            c.power_reason_pct = max(pct["sw_power_cap"], pct["hw_power_brake_slowdown"])
            c.thermal_reason_pct = max(pct["sw_thermal_slowdown"], pct["hw_thermal_slowdown"])
        if pcie:
            gen, width = max(r["link_gen"] for r in pcie), max(r["link_width"] for r in pcie)
            tx, rx = _mean(pcie, "tx_bytes_per_s"), _mean(pcie, "rx_bytes_per_s")
            c.pcie_ratio = (tx + rx) / (2 * lim.pcie_lane_gbps(gen) * 1e9 * width)
        cells[k] = c
    work = _raw(influxdb_v1, db, "gpu_work", ["units_total"], start_ns, stop_ns)
    weights = defaultdict(dict)  # (model, workload) -> (gpu, bucket) -> hours
    for tags, points in work.items():
        t = dict(tags)
        t0, t1 = min(r["time"] for r in points), max(r["time"] for r in points)
        w = weights[(t["model"], t["workload"])]
        for at in range(t0 // b * b, t1, b):
            hours = (min(t1, at + b) - max(t0, at)) / 3.6e12
            if hours > 0:
                w[((t["host"], t["uuid"]), at)] = max(hours, w.get(((t["host"], t["uuid"]), at), 0.0))
    return {key: lim.shares([(cells[k], h) for k, h in w.items() if k in cells]) for key, w in weights.items()}


@pytest.mark.parametrize("engine", ["influxql", "promql"])
def test_limits_equal_the_raw_points(work_fleet, influxdb_v1, victoria_metrics, cli, engine):
    db, end_s, _ = work_fleet
    doc = (
        _influx_doc(cli, influxdb_v1, work_fleet)
        if engine == "influxql"
        else _prom_doc(cli, victoria_metrics, work_fleet)
    )
    expected = recompute_limits(influxdb_v1, db, *_range(end_s), doc["source"]["limits_bucket_s"])
    assert {(g["key"]["model"], g["key"]["workload"]) for g in doc["groups"]} == set(expected)
    for g in doc["groups"]:
        pct, proxy = expected[(g["key"]["model"], g["key"]["workload"])]
        for cls in CLASSES:
            assert math.isclose(g["limits"][cls], pct[cls], rel_tol=REL, abs_tol=1e-9), (g["label"], cls)
        assert g["limits_proxy"] == proxy, g["label"]
