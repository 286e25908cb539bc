"""`gpuagent rollups` on a real InfluxDB 1.6 and `compare` reading them (the `influxdb_v1` fixture).

A simulated fleet (5 hosts, 3 h at 10 s) is backfilled, then rolled up (`rollups init`, `rollups
backfill`); every figure of `compare --format json` from rollups must equal the one from raw points
(`--raw`), by model, host and GPU, on a range that starts and ends inside minutes.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from compare_helpers import assert_same as _same
from compare_helpers import compare_json, sim_fleet_args

pytestmark = pytest.mark.servers

SPECS = ("l40s-vgpu:2", "h100-sxm:2", "rtx4090:2", "h100-sxm-mig:2", "a100-sxm4:2")
STEP_S = 10
DURATION_S = 3 * 3600  # a range 7 min shorter still holds a whole hour, whatever the clock


@pytest.fixture(scope="module")
def rolled_db(influxdb_v1, cli):
    """A database with the fleet's history and its rollups; (name, end_ns of the history)."""
    db = f"rollups_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    end_s = int(time.time()) // STEP_S * STEP_S - 60
    args = sim_fleet_args(
        influxdb_v1.url, db, hosts=5, duration_s=DURATION_S, step_s=STEP_S, end_s=end_s, seed=5, specs=SPECS
    )
    result = cli(*args)
    assert result.exit_code == 0, result.output
    _write_verdicts(influxdb_v1, db, end_s * 10**9)
    for command in (("init",), ("backfill", "--since", f"{DURATION_S + 3600}s")):
        result = cli("rollups", *command, "--url", influxdb_v1.url, "--database", db)
        assert result.exit_code == 0, result.output
    yield db, end_s * 10**9
    influxdb_v1.drop_database(db)


def _write_verdicts(server, db, end_ns):
    """One GPU degraded for 40 min beside its collector's own `ok` verdicts (shares within buckets)."""
    series = server.query('SELECT LAST("verdict") FROM "gpu_health" GROUP BY "host", "uuid", "model", "gpu"', db=db)
    tags = series[0]["tags"]
    key = ",".join(f"{k}={v.replace(' ', chr(92) + ' ')}" for k, v in sorted(tags.items()))
    start = end_ns - 90 * 60 * 10**9 + 15 * 10**9
    server.write([f'gpu_health,{key} verdict="degraded" {start + i * 30 * 10**9}' for i in range(80)], db=db)


def _compare(cli, server, db, start_ns, end_ns, *extra):
    return compare_json(cli, ["--url", server.url, "--database", db], start_ns, end_ns, *extra)


def _counting(server, db):
    """An InfluxQL client on `db` that keeps every statement it asks; (client, statements)."""
    from gpuagent.compare.query import InfluxQL, connection_from

    asked = []

    class Counting(InfluxQL):
        def rows(self, q):
            asked.append(q)
            return super().rows(q)

    return Counting(connection_from(None, server.url, db)), asked


def _figures_equal(cli, server, db, start_ns, stop_ns, by):
    rolled = _compare(cli, server, db, start_ns, stop_ns, "--by", by)
    raw = _compare(cli, server, db, start_ns, stop_ns, "--by", by, "--raw")
    assert raw["source"]["kind"] == "raw"
    assert rolled["source"]["kind"] == "rollup" and rolled["source"]["resolution"] == "3600s"
    levels = [p["level"] for p in rolled["source"]["pieces"]]
    assert rolled["source"]["from_raw"] == ["power_p95_w", "l2_probe", "work"]
    assert len(raw["groups"]) >= 4 and raw["groups"][0]["energy_kwh"] > 0
    assert any(g["health_gpu_hours"]["degraded"] > 0 for g in raw["groups"])
    assert any(g["mig"]["enabled_gpus"] and g["mig"]["profiles"] for g in raw["groups"])
    assert any(g["vgpu"]["instances"] and g["vgpu"]["types"] for g in raw["groups"])
    assert any(g["p2p"]["nvlink"] for g in raw["groups"])
    for doc in (rolled, raw):
        doc.pop("source")
    _same(rolled, raw)
    return levels


@pytest.mark.parametrize("by", ["model", "host", "gpu"])
def test_every_figure_from_rollups_equals_the_raw_one(rolled_db, influxdb_v1, cli, by):
    db, end_ns = rolled_db
    # Inside minutes at both ends, and long enough for a whole hour: raw, 1m and 1h pieces.
    start_ns, stop_ns = end_ns - DURATION_S * 10**9 + 437 * 10**9 + 1234, end_ns - 83 * 10**9
    levels = _figures_equal(cli, influxdb_v1, db, start_ns, stop_ns, by)
    assert levels[0] == levels[-1] == "raw" and "gpuagent_1m" in levels and "gpuagent_1h" in levels


def test_on_bucket_edges_the_first_and_last_sample_times_come_from_raw(rolled_db, influxdb_v1, cli):
    """From an hour's edge to a minute's: no raw piece, the GPUs' first and last samples are looked
    for down the levels (gpu_hours, energy per GPU-hour)."""
    db, end_ns = rolled_db
    hour, minute = 3600 * 10**9, 60 * 10**9
    start_ns = -(-(end_ns - DURATION_S * 10**9) // hour) * hour
    stop_ns = (end_ns - 5 * minute) // minute * minute
    stop_ns -= minute if stop_ns % hour == 0 else 0  # a minute's edge that is not an hour's
    levels = _figures_equal(cli, influxdb_v1, db, start_ns, stop_ns, "gpu")
    assert levels[0] == "gpuagent_1h" and levels[-1] == "gpuagent_1m" and "raw" not in levels


def test_a_range_that_no_bucket_fits_in_is_read_raw(rolled_db, influxdb_v1, cli):
    db, end_ns = rolled_db
    start_ns = end_ns // 60_000_000_000 * 60_000_000_000 - 50 * 10**9
    doc = _compare(cli, influxdb_v1, db, start_ns, start_ns + 40 * 10**9)
    assert doc["source"]["kind"] == "raw"


def test_init_twice_changes_nothing_and_status_says_how_far(rolled_db, influxdb_v1, cli):
    db, end_ns = rolled_db
    before = influxdb_v1.query("SHOW CONTINUOUS QUERIES")
    result = cli("rollups", "init", "--url", influxdb_v1.url, "--database", db)
    assert result.exit_code == 0, result.output
    assert "nothing changed" in result.stdout and "created" not in result.stdout
    assert influxdb_v1.query("SHOW CONTINUOUS QUERIES") == before
    result = cli("rollups", "status", "--json", "--url", influxdb_v1.url, "--database", db)
    assert result.exit_code == 0, result.output
    levels = {lv["retention_policy"]: lv for lv in json.loads(result.stdout)["levels"]}
    assert set(levels) == {"gpuagent_1m", "gpuagent_1h"}
    for lv in levels.values():
        assert lv["exists"] and lv["continuous_queries"] == lv["continuous_queries_expected"] > 0
        assert lv["from"] is not None and lv["to"] is not None


def _one_gpu(server, cli, db, end_s, since, odd_verdict=False):
    """4 h of one GPU every 20 s (a `quarantined` verdict every minute with odd_verdict), rolled up."""
    tags = "host=n1,uuid=GPU-n1-0,model=NVIDIA\\ L40S,gpu=0"
    lines = []
    for i in range(0, 4 * 3600, 20):
        t = (end_s - 4 * 3600 + i) * 10**9
        lines.append(f"gpu_power,{tags} power_w={100 + i % 7}.5,energy_j={1000.0 + i * 100} {t}")
        lines.append(f'gpu_health,{tags} verdict="{"quarantined" if odd_verdict and i % 60 == 0 else "ok"}" {t}')
    server.write(lines, db=db)
    for command in (("init",), ("backfill", "--since", since)):
        result = cli("rollups", *command, "--url", server.url, "--database", db)
        assert result.exit_code == 0, result.output


@pytest.fixture
def fresh_db(influxdb_v1):
    db = f"rollups_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    yield db
    influxdb_v1.drop_database(db)


def test_a_verdict_the_rollups_do_not_count_is_counted_from_raw(influxdb_v1, cli, fresh_db):
    end_s = int(time.time()) // 60 * 60 - 60
    _one_gpu(influxdb_v1, cli, fresh_db, end_s, "5h", odd_verdict=True)
    start_ns, stop_ns = (end_s - 2 * 3600 - 7) * 10**9, (end_s - 13) * 10**9
    rolled = _compare(cli, influxdb_v1, fresh_db, start_ns, stop_ns)
    raw = _compare(cli, influxdb_v1, fresh_db, start_ns, stop_ns, "--raw")
    assert rolled["source"]["kind"] == "rollup" and "health_gpu_hours" in rolled["source"]["from_raw"]
    hours = rolled["groups"][0]["health_gpu_hours"]
    assert hours["quarantined"] > 0 and hours == raw["groups"][0]["health_gpu_hours"]
    for doc in (rolled, raw):
        doc.pop("source")
    _same(rolled, raw)


def test_backfill_since_inside_an_hour_rolls_up_that_hour_whole(influxdb_v1, cli, fresh_db):
    """--since 150m starts inside an hour of a longer history: the first 1h bucket still holds all of it."""
    end_s = int(time.time()) // 60 * 60 - 60
    _one_gpu(influxdb_v1, cli, fresh_db, end_s, "150m")
    hour = 3600 * 10**9
    start_ns = (time.time_ns() - 150 * 60 * 10**9) // hour * hour
    assert start_ns >= (end_s - 4 * 3600) * 10**9
    stop_ns = (end_s - 13) * 10**9
    rolled = _compare(cli, influxdb_v1, fresh_db, start_ns, stop_ns)
    assert rolled["source"]["pieces"][0] == {
        "from": rolled["range"]["start"],
        "to": rolled["source"]["pieces"][1]["from"],
        "level": "gpuagent_1h",
    }
    raw = _compare(cli, influxdb_v1, fresh_db, start_ns, stop_ns, "--raw")
    for doc in (rolled, raw):
        doc.pop("source")
    _same(rolled, raw)


def test_backfill_without_init_is_one_line(influxdb_v1, cli):
    db = f"rollups_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    try:
        result = cli("rollups", "backfill", "--url", influxdb_v1.url, "--database", db)
    finally:
        influxdb_v1.drop_database(db)
    assert result.exit_code == 1
    assert "run gpuagent rollups init" in result.stderr and "Traceback" not in result.output


def test_status_from_the_config_and_on_a_database_without_rollups(influxdb_v1, cli, fresh_db, tmp_path):
    config = tmp_path / "gpuagent.toml"
    config.write_text(f'[sinks.influxdb]\nurl = "{influxdb_v1.url}"\napi = "v1"\ndatabase = "{fresh_db}"\n')
    result = cli("rollups", "status", "--config", str(config))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "gpuagent_1m (60s): absent (gpuagent rollups init)",
        "gpuagent_1h (3600s): absent (gpuagent rollups init)",
    ]
    assert cli("rollups", "init", "--config", str(config)).exit_code == 0
    result = cli("rollups", "status", "--config", str(config))
    assert result.exit_code == 0 and "no points" in result.stdout


def test_short_pieces_are_read_as_points_once_and_long_ones_per_group(rolled_db, influxdb_v1):
    """InfluxDB 1.x pays per group and aggregate: a piece with few points per series (a raw edge, up to
    POINTS_MAX_BUCKETS rollup buckets) is read as points once per measurement, shared by every
    section; a longer one is asked per group for only the fields a section uses."""
    from gpuagent.compare.core import Range
    from gpuagent.compare.rollup_report import RollupReport, rfc3339
    from gpuagent.compare.rollups import BY_NAME

    db, end_ns = rolled_db
    start_ns, stop_ns = end_ns - DURATION_S * 10**9 + 437 * 10**9, end_ns - 83 * 10**9
    client, asked = _counting(influxdb_v1, db)
    report = RollupReport(client, Range(start_ns, stop_ns), "model")
    report.points_max_buckets = 1  # whatever the clock: some rollup pieces longer than that
    doc = report.build()
    assert doc["source"]["kind"] == "rollup"
    short = [p for p in report.pieces if report._as_points(p)]
    long = [p for p in report.pieces if not report._as_points(p)]
    assert any(p[0] is None for p in short) and long

    def as_points(q: str) -> bool:  # the fields and tags of every point, not an aggregate
        return q.startswith('SELECT "') and "GROUP BY" not in q

    points = [q for q in asked if as_points(q)]
    assert points and len(points) == len(set(points))
    for level, a, b in report.pieces:
        span = f"time >= '{rfc3339(a)}' AND time < '{rfc3339(b)}'"
        for m in ("gpu_power", "gpu_clocks", "gpu_memory"):
            source = f'"{m}"' if level is None else f'"{level.name}"."{m}"'
            on_it = [q for q in asked if f"{source} WHERE {span}" in q and "time(" not in q]
            if report._as_points((level, a, b), BY_NAME[m]):
                assert len(on_it) == 1 and as_points(on_it[0]), on_it
            else:  # per GPU, the inventory's few fields; the groups' from the rollups per host
                assert on_it and not any(as_points(q) for q in on_it), on_it
                by = [q.split("GROUP BY")[-1] for q in on_it]
                assert all("uuid" in b for b in by) and not any("_n" in q or "fb_used_max" in q for q in on_it), on_it
            if m == "gpu_power" and level is not None and report._as_points((level, a, b), BY_NAME[m]):
                # Its points serve the energy counter too: no FIRST/LAST/subquery over the piece.
                assert not any(f"{source} WHERE {span}" in q and "GROUP BY" in q for q in asked)
    # The group figures by model from the rollups per host and model.
    for m in ("gpu_clocks", "gpu_memory", "gpu_power"):
        assert any(f'."{m}_by_host" WHERE' in q for q in asked), m
    # The power series by model from the per-host rollup (a series per host, not per GPU).
    series = [q for q in asked if "time(" in q and "power_sum" in q]
    assert series and all('"gpu_power_host"' in q for q in series if "gpuagent_1m" in q)


@pytest.mark.parametrize("points_max_buckets", [0, 10**6])
def test_every_figure_equal_whether_pieces_are_read_as_points_or_per_group(rolled_db, influxdb_v1, points_max_buckets):
    """Every rollup piece per group (0), or every one as points (10**6): the same figures as raw."""
    db, end_ns = rolled_db
    start_ns, stop_ns = end_ns - DURATION_S * 10**9 + 437 * 10**9, end_ns - 83 * 10**9
    for by in ("model", "gpu"):
        rolled, raw = _reports(influxdb_v1, db, start_ns, stop_ns, by, points_max_buckets=points_max_buckets)
        assert rolled["source"]["kind"] == "rollup"
        for doc in (rolled, raw):
            doc.pop("source")
        _same(rolled, raw)


def test_rollups_take_a_timeout_as_compare_does(influxdb_v1, cli, fresh_db):
    """The slow-answer error says "give it longer with --timeout": the rollups commands take it."""
    conn = ("--url", influxdb_v1.url, "--database", fresh_db)
    result = cli("rollups", "init", "--timeout", "0s", *conn)
    assert result.exit_code == 1 and "--timeout: expected a positive duration" in result.stderr
    assert "Traceback" not in result.output
    for command in (("init",), ("backfill", "--since", "1h"), ("status",)):
        result = cli("rollups", *command, "--timeout", "120s", *conn)
        assert result.exit_code == 0, result.output


def _reports(server, db, start_ns, stop_ns, by, **attrs):
    """(from rollups, from raw points) as documents, the rollup report's class attributes set."""
    from gpuagent.compare.core import Range
    from gpuagent.compare.query import InfluxQL, connection_from
    from gpuagent.compare.report import Report
    from gpuagent.compare.rollup_report import RollupReport

    client = InfluxQL(connection_from(None, server.url, db))
    report = RollupReport(client, Range(start_ns, stop_ns), by)
    for name, value in attrs.items():
        setattr(report, name, value)
    return report.build(), Report(client, Range(start_ns, stop_ns), by).build()


@pytest.mark.parametrize("by", ["model", "host"])
def test_p95_from_the_histograms_is_within_half_a_bin(rolled_db, influxdb_v1, by):
    """Past p95_raw_max_samples the 95th percentile comes from the rollups' power histograms (and
    the raw edges' points): within HIST_W / 2 of the raw PERCENTILE, said so in source and under the
    table; the rest exact."""
    from gpuagent.compare.render import render_table
    from gpuagent.compare.rollups import HIST_W

    db, end_ns = rolled_db
    start_ns, stop_ns = end_ns - DURATION_S * 10**9 + 437 * 10**9 + 1234, end_ns - 83 * 10**9
    rolled, raw = _reports(influxdb_v1, db, start_ns, stop_ns, by, p95_raw_max_samples=0)
    assert rolled["source"]["approximate"] == {
        "power_p95_w": {"method": "histogram", "bin_w": HIST_W, "bound_w": HIST_W / 2}
    }
    assert "power_p95_w" not in rolled["source"]["from_raw"]
    assert "raw" in [p["level"] for p in rolled["source"]["pieces"]]  # raw edges binned too
    assert f"within {HIST_W / 2:g} W of the exact value" in render_table(rolled)
    assert "approximate" not in render_table(raw)
    off = []
    for a, b in zip(rolled["groups"], raw["groups"], strict=True):
        assert a["label"] == b["label"]
        assert abs(a["power_p95_w"] - b["power_p95_w"]) <= HIST_W / 2, (a["label"], a["power_p95_w"], b["power_p95_w"])
        off.append(a.pop("power_p95_w") != b.pop("power_p95_w"))
    assert any(off)  # approximate indeed: the test would not see an exact answer passed off as one
    for doc in (rolled, raw):
        doc.pop("source")
    _same(rolled, raw)


@pytest.mark.parametrize("by", ["gpu", "model where uuid"])
def test_p95_from_raw_points_where_the_histograms_do_not_hold_the_groups(rolled_db, influxdb_v1, by):
    """The histograms are per host and model: --by gpu, or a --where on another tag, reads raw points."""
    db, end_ns = rolled_db
    start_ns, stop_ns = end_ns - DURATION_S * 10**9 + 437 * 10**9, end_ns - 83 * 10**9
    from gpuagent.compare.core import Range
    from gpuagent.compare.query import InfluxQL, connection_from
    from gpuagent.compare.report import Report
    from gpuagent.compare.rollup_report import RollupReport

    client = InfluxQL(connection_from(None, influxdb_v1.url, db))
    uuids = sorted({r["uuid"] for r in client.rows('SELECT LAST("power_w") FROM "gpu_power" GROUP BY "uuid"')})
    where = None if by == "gpu" else " OR ".join(f"uuid = '{u}'" for u in uuids[:5])
    report = RollupReport(client, Range(start_ns, stop_ns), by.split()[0], where)
    report.p95_raw_max_samples = 0
    rolled, raw = report.build(), Report(client, Range(start_ns, stop_ns), by.split()[0], where).build()
    assert rolled["source"]["approximate"] == {} and "power_p95_w" in rolled["source"]["from_raw"]
    for doc in (rolled, raw):
        doc.pop("source")
    _same(rolled, raw)


def test_p95_from_raw_points_where_a_histogram_bin_is_missing(rolled_db, influxdb_v1):
    """A histogram that does not hold every sample (rollups backfilled before it, a bin dropped) is
    not used: the percentile is then exact, from raw points."""
    from gpuagent.compare import rollup_report

    db, end_ns = rolled_db
    start_ns, stop_ns = end_ns - DURATION_S * 10**9 + 437 * 10**9, end_ns - 83 * 10**9
    names = rollup_report.HISTOGRAM
    try:
        rollup_report.HISTOGRAM = names[:5] + names[6:]  # as if a bin's counts were absent
        rolled, raw = _reports(influxdb_v1, db, start_ns, stop_ns, "model", p95_raw_max_samples=0)
    finally:
        rollup_report.HISTOGRAM = names
    assert rolled["source"]["approximate"] == {} and "power_p95_w" in rolled["source"]["from_raw"]
    for doc in (rolled, raw):
        doc.pop("source")
    _same(rolled, raw)


def test_health_hours_of_one_verdict_come_whole_from_the_1h_level(rolled_db, influxdb_v1):
    """A GPU's hour of one verdict in every minute counts whole from the 1h level; only the GPU with
    two verdicts (_write_verdicts) has its minutes read from the 1m level, asked by its uuid."""
    from gpuagent.compare.core import Range
    from gpuagent.compare.report import Report
    from gpuagent.compare.rollup_report import RollupReport

    db, end_ns = rolled_db
    start_ns, stop_ns = end_ns - DURATION_S * 10**9 + 437 * 10**9, end_ns - 83 * 10**9
    client, asked = _counting(influxdb_v1, db)
    rolled = RollupReport(client, Range(start_ns, stop_ns), "gpu").build()
    raw = Report(client, Range(start_ns, stop_ns), "gpu").build()
    assert "health_gpu_hours" not in rolled["source"]["from_raw"]
    assert any('"gpuagent_1h"."gpu_health_minutes"' in q for q in asked)
    by_uuid = [q for q in asked if '"gpuagent_1m"."gpu_health' in q and '"uuid" = ' in q]
    assert by_uuid and all(q.count('"uuid" = ') == 1 for q in by_uuid)
    assert sum(g["health_gpu_hours"]["degraded"] for g in rolled["groups"]) > 0
    for doc in (rolled, raw):
        doc.pop("source")
    _same(rolled, raw)


def test_the_1h_level_backfilled_alone_from_the_1m_level(influxdb_v1, cli, fresh_db):
    """The cascade: 1-minute rollups first, then the 1h level alone from them (as for 1-minute rollups
    written some other way, bench.compare_scale.rollups_day): every figure still equals raw."""
    from gpuagent.compare import rollups
    from gpuagent.compare.query import InfluxQL, connection_from

    end_s = int(time.time()) // 60 * 60 - 60
    _one_gpu(influxdb_v1, cli, fresh_db, end_s, "1m")  # init, and a backfill of the last minute only
    client = InfluxQL(connection_from(None, influxdb_v1.url, fresh_db))
    client.conn.retention_policy = ""
    a, b = (end_s - 5 * 3600) * 10**9, time.time_ns()
    assert rollups.backfill(client, a, b, levels=rollups.LEVELS[:1]) > 0
    assert rollups.coverage(client)["gpuagent_1h"] is None
    assert rollups.backfill(client, a, b, levels=rollups.LEVELS[1:]) > 0
    start_ns, stop_ns = (end_s - 3 * 3600 - 7) * 10**9, (end_s - 13) * 10**9
    rolled = _compare(cli, influxdb_v1, fresh_db, start_ns, stop_ns)
    raw = _compare(cli, influxdb_v1, fresh_db, start_ns, stop_ns, "--raw")
    assert "gpuagent_1h" in [p["level"] for p in rolled["source"]["pieces"]]
    for doc in (rolled, raw):
        doc.pop("source")
    _same(rolled, raw)


def test_init_says_what_it_made_in_one_line_and_backfill_shows_its_chunks(influxdb_v1, cli):
    from gpuagent.compare.rollups import EVERY, LEVELS

    db = f"lines_{uuid.uuid4().hex[:8]}"
    influxdb_v1.create_database(db)
    try:
        end_s = int(time.time()) // 60 * 60 - 60
        args = sim_fleet_args(influxdb_v1.url, db, hosts=1, duration_s=3600, step_s=60, end_s=end_s, seed=1,
                              specs=("l40s:1",))  # fmt: skip
        assert cli(*args).exit_code == 0
        made = cli("rollups", "init", "--url", influxdb_v1.url, "--database", db)
        assert made.exit_code == 0, made.output
        n = len(LEVELS) * len(EVERY)
        assert (
            made.stdout.splitlines()[0]
            == f"created retention policies gpuagent_1m, gpuagent_1h and {n} continuous queries"
        )
        assert len(made.stdout.splitlines()) == 2  # and the summary of the database
        done = cli("rollups", "backfill", "--since", "3h", "--chunk", "1h", "--url", influxdb_v1.url, "--database", db)
        assert done.exit_code == 0, done.output
        chunks = [
            line
            for line in done.stderr.splitlines() + done.stdout.splitlines()
            if line.startswith("rollups backfill: ")
        ]
        assert chunks and chunks[-1].startswith(f"rollups backfill: {len(chunks)}/{len(chunks)} chunks"), done.output
    finally:
        influxdb_v1.drop_database(db)
