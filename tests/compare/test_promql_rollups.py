"""`compare --promql-url` from the recording rules (deploy/rollups/), on a real VictoriaMetrics with
the rules replayed by a real vmalert (`gpuagent rollups backfill --promql-url`).

A simulated fleet (5 hosts, 3 h at 10 s, line protocol: the influx names) in a VictoriaMetrics of
its own (the rules record every series they find); every figure of `compare --format json` from
the rules' series must equal the one from raw samples (`--raw`), by model, host and GPU, on ranges
that start and end inside minutes, and on bucket edges. The 95th percentile, the L2 probe and the
work figures are read from raw samples there (source.from_raw), so they are equal too.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from compare_helpers import assert_same as _same
from compare_helpers import compare_json, sim_fleet_args

pytestmark = [pytest.mark.servers, pytest.mark.slow]

SPECS = ("l40s-vgpu:2", "h100-sxm:2", "rtx4090:2", "h100-sxm-mig:2", "a100-sxm4:2")
STEP_S = 10
DURATION_S = 3 * 3600
DB = "fleet"
WHERE = f'db="{DB}"'
MINUTE, HOUR = 60 * 10**9, 3600 * 10**9


def _recorded(vm) -> int:
    """Samples of the rules' series, once they are all searchable."""
    return sum(len(s["timestamps"]) for s in vm.export('{__name__=~"gpuagent:.+"}'))


@pytest.fixture(scope="module")
def rolled_vm(tmp_path_factory, cli):
    """A VictoriaMetrics holding the fleet and its rollups; (server, end_ns of the history)."""
    if not shutil.which("vmalert"):
        pytest.skip("vmalert not installed (Debian package victoria-metrics)")
    from gpuagent_test_servers import VICTORIA_METRICS, VictoriaMetricsServer, find_binary

    vm = VictoriaMetricsServer(find_binary(VICTORIA_METRICS, "victoria-metrics"), tmp_path_factory.mktemp("vm"))
    vm.start()
    end_s = int(time.time()) // STEP_S * STEP_S - 60
    args = sim_fleet_args(vm.url, DB, hosts=5, duration_s=DURATION_S, step_s=STEP_S, end_s=end_s, seed=5, specs=SPECS)
    result = cli(*args)
    assert result.exit_code == 0, result.output
    vm.export(f'{{__name__="gpu_power_power_w",db="{DB}"}}', min_samples=10 * (DURATION_S // STEP_S))
    result = cli("rollups", "backfill", "--promql-url", vm.url, "--since", f"{DURATION_S + 3600}s")
    assert result.exit_code == 0, result.output
    assert "1m: replayed" in result.output and "1h: replayed" in result.output
    _recorded(vm)
    yield vm, end_s * 10**9
    vm.stop()


def _compare(cli, vm, start_ns, end_ns, *extra):
    return compare_json(cli, ["--promql-url", vm.url, "--where", WHERE], start_ns, end_ns, *extra)


def _figures_equal(cli, vm, start_ns, stop_ns, by):
    rolled = _compare(cli, vm, start_ns, stop_ns, "--by", by)
    raw = _compare(cli, vm, start_ns, stop_ns, "--by", by, "--raw")
    assert raw["source"]["kind"] == "raw"
    assert rolled["source"]["kind"] == "rollup" and rolled["source"]["resolution"] == "3600s"
    assert rolled["source"]["from_raw"] == ["power_p95_w", "l2_probe", "work"]
    assert len(raw["groups"]) >= 4 and raw["groups"][0]["energy_kwh"] > 0 and raw["groups"][0]["gpu_hours"] > 0
    assert any(g["mig"]["enabled_gpus"] and g["mig"]["profiles"] for g in raw["groups"])
    assert any(g["vgpu"]["instances"] and g["vgpu"]["types"] for g in raw["groups"])
    assert any(g["p2p"]["nvlink"] for g in raw["groups"]) and any(g["p2p"]["pcie"] for g in raw["groups"])
    assert any(g["throttle_share_pct"] for g in raw["groups"])
    assert any(g["dram_bw_mean_gbps"] for g in raw["groups"])
    source = rolled.pop("source")
    raw.pop("source")
    _same(rolled, raw)
    return source


@pytest.mark.parametrize("by", ["model", "host", "gpu"])
def test_every_figure_from_the_recording_rules_equals_the_raw_one(rolled_vm, cli, by):
    vm, end_ns = rolled_vm
    # Inside minutes at both ends (whole milliseconds: PromQL's resolution), long enough for a whole
    # hour: raw, 1m and 1h pieces; the series' 2-minute buckets from the 1m rollups.
    start_ns = end_ns - DURATION_S * 10**9 + 437_123 * 10**6
    stop_ns = end_ns - 11 * MINUTE - 17_456 * 10**6
    source = _figures_equal(cli, vm, start_ns, stop_ns, by)
    levels = [p["level"] for p in source["pieces"]]
    assert levels[0] == levels[-1] == "raw" and "gpuagent_1m" in levels and "gpuagent_1h" in levels
    assert source["series_level"] == "gpuagent_1m"


def test_on_bucket_edges_the_first_and_last_sample_times_come_from_raw(rolled_vm, cli):
    """From an hour's edge to a minute's: no raw piece, the GPUs' first and last samples are looked
    for down the levels (gpu_hours, energy per GPU-hour)."""
    vm, end_ns = rolled_vm
    start_ns = -(-(end_ns - DURATION_S * 10**9) // HOUR) * HOUR
    stop_ns = (end_ns - 15 * MINUTE) // MINUTE * MINUTE
    stop_ns -= MINUTE if stop_ns % HOUR == 0 else 0  # a minute's edge that is not an hour's
    source = _figures_equal(cli, vm, start_ns, stop_ns, "gpu")
    levels = [p["level"] for p in source["pieces"]]
    assert levels[0] == "gpuagent_1h" and levels[-1] == "gpuagent_1m" and "raw" not in levels


def test_a_range_that_no_bucket_fits_in_is_read_raw(rolled_vm, cli):
    vm, end_ns = rolled_vm
    start_ns = end_ns // MINUTE * MINUTE - 50 * 10**9
    doc = _compare(cli, vm, start_ns, start_ns + 40 * 10**9)
    assert doc["source"]["kind"] == "raw" and "pieces" not in doc["source"]


def test_a_second_backfill_writes_nothing_and_status_says_how_far(rolled_vm, cli):
    vm, end_ns = rolled_vm
    before = _recorded(vm)
    result = cli("rollups", "backfill", "--promql-url", vm.url, "--since", f"{DURATION_S + 3600}s")
    assert result.exit_code == 0, result.output
    assert _recorded(vm) == before  # VictoriaMetrics keeps a sample written twice: none was
    result = cli("rollups", "status", "--json", "--promql-url", vm.url, "--since", "1d")
    assert result.exit_code == 0, result.output
    levels = {lv["level"]: lv for lv in json.loads(result.stdout)["levels"]}
    assert set(levels) == {"gpuagent_1m", "gpuagent_1h"}
    assert levels["gpuagent_1m"]["series"] == 10 and levels["gpuagent_1h"]["series"] == 10
    first_ns = end_ns - DURATION_S * 10**9
    assert levels["gpuagent_1m"]["from"] == _rfc3339(first_ns // MINUTE * MINUTE)


def test_backfill_refuses_a_missing_vmalert_in_one_line(rolled_vm, cli):
    vm, _ = rolled_vm
    result = cli("rollups", "backfill", "--promql-url", vm.url, "--vmalert", "/nonexistent/vmalert")
    assert result.exit_code == 1
    assert "--vmalert '/nonexistent/vmalert': not found" in result.stderr
    assert "Traceback" not in result.output
    result = cli("rollups", "init", "--promql-url", vm.url)  # the rules are loaded, not created
    assert result.exit_code == 1 and "deploy/rollups/gpuagent-rollups-influx.rules.yml" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


MEASUREMENTS = ("gpu_power", "gpu_clocks", "gpu_memory", "gpu_p2p", "gpu_mig", "gpu_vgpu")


@pytest.fixture(scope="module")
def metrics_vm(rolled_vm, tmp_path_factory, cli):
    """Another VictoriaMetrics with the same samples under the /metrics names and base units (as
    vmagent would scrape them), the /metrics rules replayed over them."""
    import urllib.request

    from gpuagent_test_servers import VICTORIA_METRICS, VictoriaMetricsServer, find_binary

    from gpuagent.plugins.prometheus.naming import metric_for

    vm, end_ns = rolled_vm
    lines = []
    for series in vm.export(f'{{__name__=~"({"|".join(MEASUREMENTS)})_.+",db="{DB}"}}'):
        metric = dict(series["metric"])
        name = metric.pop("__name__")
        measurement = max((m for m in MEASUREMENTS if name.startswith(m + "_")), key=len)
        spec = metric_for("gpuagent", measurement, name[len(measurement) + 1 :])
        lines.append(
            json.dumps(
                {
                    "metric": {"__name__": spec.name, **metric},
                    "values": [v * spec.scale for v in series["values"]],
                    "timestamps": series["timestamps"],
                }
            )
        )
    other = VictoriaMetricsServer(find_binary(VICTORIA_METRICS, "victoria-metrics"), tmp_path_factory.mktemp("vm"))
    other.start()
    req = urllib.request.Request(f"{other.url}/api/v1/import", data="\n".join(lines).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 204
    other.export(f'{{__name__="gpuagent_gpu_power_power_watts",db="{DB}"}}', min_samples=10 * (DURATION_S // STEP_S))
    result = cli("rollups", "backfill", "--promql-url", other.url, "--since", f"{DURATION_S + 3600}s")
    assert result.exit_code == 0, result.output
    assert "(prometheus names)" in result.output
    _recorded(other)
    yield other, end_ns
    other.stop()


def test_with_metrics_names_the_figures_in_their_units_equal_the_raw_ones(metrics_vm, cli):
    """The /metrics rules (base units: Hz, bytes, joules) give the report's units back as raw does."""
    vm, end_ns = metrics_vm
    start_ns = end_ns - DURATION_S * 10**9 + 437_123 * 10**6
    stop_ns = end_ns - 11 * MINUTE - 17_456 * 10**6
    rolled = _compare(cli, vm, start_ns, stop_ns, "--by", "model")
    raw = _compare(cli, vm, start_ns, stop_ns, "--by", "model", "--raw")
    assert rolled["source"]["database"] == "PromQL (victoriametrics, prometheus names)"
    assert rolled["source"]["kind"] == "rollup" and "health_gpu_hours" in rolled["source"]["from_raw"]
    clocks = [g["sm_clock_mean_mhz"] for g in raw["groups"]]
    assert all(100 < c < 5000 for c in clocks), clocks  # MHz, not Hz
    rolled.pop("source"), raw.pop("source")
    _same(rolled, raw)


def _rfc3339(ns: int) -> str:
    from gpuagent.compare.core import rfc3339

    return rfc3339(ns)
