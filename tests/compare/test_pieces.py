"""The compare arithmetic and rendering that need no server (the rest of tests/compare reads
real servers): bucket edges, overlaps, the driver filter, the job table, the SVG bars, and the
worker pool of `sim fleet --jobs`. These keep compare's modules in the fast lane."""

from __future__ import annotations

import re
import signal

import pytest

from gpuagent.compare import health, jobs_render, render, work, work_render
from gpuagent.compare.core import Range, report_document
from gpuagent.compare.drivers import _uuid_condition
from gpuagent.compare.jobs import JobReport
from gpuagent.errors import AgentError
from gpuagent.sim.workers import worker_pool

S = 10**9
START = 1_700_000_010 * S  # 30 s past a minute's edge


def test_buckets_are_whole_minutes_and_the_range_is_cut_at_their_edges():
    assert health.bucket_for(600) == 60 and health.bucket_for(3 * 86400) == 300
    cut = health.pieces(START, START + 150 * S, 60)
    assert [(a - START) // S for a, _ in cut] == [0, 30, 90] and cut[-1][1] == START + 150 * S
    assert all(b % (60 * S) == 0 for _, b in cut[:-1])  # inner edges on the minute
    # The first bucket counts only its part inside the range.
    first = START - 30 * S
    assert health.inside_s(first, 60, START, START + 150 * S) == 30.0
    assert health.inside_s(first - 60 * S, 60, START, START + 150 * S) == 0


def test_health_text_lists_only_verdicts_with_time():
    assert health.health_text({"ok": 94.0, "degraded": 2.5, "lost": 0.0}) == "ok 94.0, degraded 2.5"
    assert health.health_text({"ok": 0.0}) == health.health_text(None) == "n/a"


def test_a_work_span_is_shared_among_the_buckets_it_covers():
    t0, t1 = START, START + 90 * S  # 30 s in one minute bucket, 60 s in the next
    hours = list(work.span_buckets(t0, t1, 60))
    assert [round(h * 3600) for _, h in hours] == [30, 60]
    rng = Range(START, START + 3600 * S)
    assert work.overlap_hours(rng, START - 30 * S, 60) == 30 / 3600
    series = work.WorkSeries(tags={}, t0_ns=t0, t1_ns=t1, increase=900.0, gpus=2, share=0.5)
    assert (series.seconds, series.gpu_seconds, series.units) == (90.0, 45.0, 450.0)


def test_the_driver_filter_matches_exactly_the_uuids_given():
    cond = _uuid_condition(["GPU-b.2", "GPU-a(1)"])
    pattern = re.search(r"/(.*)/$", cond).group(1)
    assert cond.startswith('"uuid" =~ /^(')
    assert re.fullmatch(pattern, "GPU-a(1)") and re.fullmatch(pattern, "GPU-b.2")
    assert not re.fullmatch(pattern, "GPU-bx2") and not re.fullmatch(pattern, "GPU-a(1)x")


def _job_doc() -> dict:
    rng = Range(START, START + 3600 * S)
    group = {
        "label": "4242 <ana>",
        "models": ["H100", "L40S"],
        "gpus": 2,
        "gpu_hours": 2.0,
        "energy_wh": 812.25,
        "idle_gpu_hours": 0.5,
        "sm_util_mean_pct": None,
        "peak_memory_bytes": 3 * 2**30,
    }
    return report_document(rng, "job", None, {"url": "http://db", "database": "gpu"}, {}, {("4242",): group})


def test_the_job_report_reads_only_its_grouping_s_points():
    # --by pod reads the points that carry a pod's tags (a job's have none), within the user's --where.
    where = JobReport(None, Range(0, 10**9), by="pod", where="host = 'a'")._where()  # type: ignore[arg-type]
    assert "(host = 'a')" in where and "\"k8s_pod_uid\" != ''" in where and "slurm_job_id" not in where
    with pytest.raises(AgentError, match="--by 'model': expected one of job, pod"):
        JobReport(None, Range(0, 10**9), by="model")  # type: ignore[arg-type]


def test_the_job_report_renders_each_format():
    doc = _job_doc()
    text = jobs_render.render(doc, "table")
    table = text.splitlines()
    assert table[0].startswith("GPU use by job, ") and "┃ job " in text  # the other reports' table style
    row = next(line for line in table if line.startswith("│ 4242"))
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells == ["4242 <ana>", "H100, L40S", "2", "2.00", "812.2", "30.0 GPU-min", "-", "3.0"]
    assert "idle GPU-h: the time it held them" in " ".join(text.split())  # its definitions under it
    assert jobs_render.render(doc, "csv").splitlines()[1] == '4242 <ana>,"H100, L40S",2,2.00,812.2,0.50,-,3.0'
    page = jobs_render.render(doc, "html")
    assert "<td>4242 &lt;ana&gt;</td>" in page and doc["range"]["start"] in page


def test_jobs_are_ordered_by_their_numbers():
    rng = Range(START, START + 3600 * S)
    groups = {(j,): {**_job_doc()["groups"][0], "label": j} for j in ("10", "9", "100", "2")}
    doc = report_document(rng, "job", None, {"url": "http://db", "database": "gpu"}, {}, groups)
    assert [g["label"] for g in doc["groups"]] == ["2", "9", "10", "100"]


def test_a_report_without_groups_still_names_its_range_and_source():
    doc = report_document(
        Range(START, START + 60 * S), "model", "host = 'a'", {"url": "http://db", "database": "gpu"}, {}, {}
    )
    flat = "".join(render.render_table(doc).split())  # the title wraps to the empty table's width
    assert doc["range"]["start"] in flat and "(http://db,gpu)" in flat and "wherehost='a'" in flat


def test_bars_scale_to_the_largest_value_and_say_n_a_for_none():
    svg = work_render.bar_svg(["a<b", "c"], [2.0, None], "units/s")
    widths = [float(w) for w in re.findall(r'<rect [^>]*width="([\d.]+)"', svg)]
    assert len(widths) == 1 and widths[0] == 640 - 190 - 110  # the largest fills the bar's width
    assert "a&lt;b" in svg and ">n/a<" in svg and ">2 units/s<" in svg


def test_the_workers_of_the_pool_ignore_ctrl_c():
    # A terminal's SIGINT goes to the whole group: the parent alone decides (issue 29).
    with worker_pool(1) as pool:
        assert pool.submit(signal.getsignal, signal.SIGINT).result(timeout=60) == signal.SIG_IGN


def test_a_config_of_prices_only_with_url_and_database_connects_by_the_flags(tmp_path):
    from gpuagent.compare.prices import prices_from
    from gpuagent.compare.query import connection_from
    from gpuagent.errors import ConfigError

    prices = tmp_path / "prices.toml"
    prices.write_text("[compare.prices]\nkwh = 0.2\n")
    conn = connection_from(str(prices), "http://127.0.0.1:9/", "fleet")
    assert (conn.url, conn.database) == ("http://127.0.0.1:9", "fleet")
    assert prices_from(str(prices)).kwh == 0.2
    try:  # without --database the file must name the server
        connection_from(str(prices), "http://127.0.0.1:9")
    except ConfigError as exc:
        assert "no [sinks.influxdb] table" in str(exc)
    else:
        raise AssertionError("a config without [sinks.influxdb] and no --database was taken")


# -- the rollup reports' pure parts (their queries run against real servers in test_rollups*.py) --
HOUR = 3600 * S


def test_the_promql_rollup_report_unions_one_term_per_piece_at_its_own_time():
    from gpuagent.compare.promql import PromConnection, PromQL
    from gpuagent.compare.promql_rollups import PIECE, RECORDS, PromRollupReport

    assert RECORDS[("gpu_power", "power_w", "sum")] == ("gpu_power", "power_sum")
    t0 = 1_700_000_000 // 3600 * HOUR
    rng = Range(t0 + 30 * S, t0 + 2 * HOUR + 90 * S)
    reach = {"gpuagent_1m": (t0 - HOUR, t0 + 3 * HOUR), "gpuagent_1h": (t0, t0 + 3 * HOUR)}
    report = PromRollupReport(PromQL(PromConnection("http://127.0.0.1:9")), rng, "host", reach=reach)
    levels = [None if level is None else level.name for level, _, _ in report.pieces]
    # Raw samples up to the first minute, 1m buckets to the hour, 1h buckets, 1m, raw at the end.
    assert levels == [None, "gpuagent_1m", "gpuagent_1h", "gpuagent_1m", None]
    q = report.over_range("sum", "gpu_power", "power_w", "host")
    assert q.startswith(f"sum without ({PIECE}) (") and q.count("label_replace(") == 5
    assert q.count(f"@ {(t0 + 2 * HOUR) / 1e9:.3f}") == 1  # the 1h piece ends on its hour
    assert "gpu_power_power_w" in q  # the raw pieces read the raw series


def test_vmalert_replays_from_the_first_stamp_with_the_groups_step():
    from gpuagent.compare.promql_rollups import vmalert_argv

    argv = vmalert_argv("vmalert", "rules.yml", "http://vm", "http://vm/write", START, START, token="t")
    assert "-datasource.queryStep=0s" in argv and "-datasource.bearerToken=t" in argv
    since = next(a for a in argv if a.startswith("-replay.timeFrom=")).split("=", 1)[1]
    until = next(a for a in argv if a.startswith("-replay.timeTo=")).split("=", 1)[1]
    assert since < until  # vmalert wants timeTo after timeFrom, even for one stamp


def test_rollup_work_says_what_it_read_from_rollups():
    from gpuagent.compare.query import Connection, InfluxQL
    from gpuagent.compare.rollup_work import RollupWork

    class Report:  # the RollupReport's part RollupWork reads: its client
        client = InfluxQL(Connection("http://127.0.0.1:9", "fleet"))

    work = RollupWork(Report(), Range(START, START + HOUR), None, True)
    assert work.describe()["kind"] == "raw" and work.describe()["from_rollups"] == []
    work.from_rollups.add("limits")
    assert work.describe() == {
        "url": "http://127.0.0.1:9",
        "database": "fleet",
        "kind": "rollup",
        "from_rollups": ["limits"],
    }


def test_the_canned_answer_of_victoriametrics_is_told_from_a_real_one():
    from gpuagent.compare.query import _canned

    canned = [{"name": "databases", "columns": ["name"], "values": [["_internal"]]}]
    assert _canned('SELECT COUNT("power_w") FROM "gpu_power"', canned)
    assert _canned('CREATE DATABASE "x"', canned) and _canned("SHOW RETENTION POLICIES", canned)
    assert not _canned("SHOW DATABASES", canned) and not _canned(" show databases", canned)
    assert not _canned("SELECT 1", [{"name": "gpu_power", "columns": ["time", "count"], "values": []}])
    assert not _canned("SELECT 1", [])


def test_a_table_wider_than_the_terminal_is_split_with_its_keys_repeated_and_a_footnote():
    from gpuagent.compare import tables

    columns = [tables.Column("group"), *(tables.Column(f"figure {i}", right=True) for i in range(8))]
    rows = [["NVIDIA H100 80GB HBM3 / llama", *(f"{1234567.8 * i:,.1f}" for i in range(8))] for _ in range(3)]
    text = tables.render("title", columns, rows, keys=1, footnote="figure: what it means " * 20, room=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80 and "(part 1 of" in text
    assert all(f"{1234567.8 * i:,.1f}" in text for i in range(8))  # every number whole
    assert text.count("NVIDIA H100 80GB HBM3 / llama") == 3 * text.count("(part ")  # keys in each part
    assert lines[-1].startswith("  ") and "figure: what it means" in lines[-2]  # the footnote, wrapped
    one = tables.render("title", columns[:3], [r[:3] for r in rows], room=80)
    assert "(part" not in one


def test_only_the_best_reads_100_percent_and_short_ranges_read_in_minutes():
    assert work_render._pct(99.96, best=False) == "99.9%" and work_render._pct(100.0, best=True) == "100%"
    assert work_render._pct(46.4, best=False) == "46%"
    assert work_render.hours_text(0.3) == "18.0 GPU-min" and work_render.hours_text(2.5) == "2.50"


def test_rollups_init_says_what_it_created_in_one_line_and_the_docs_count_the_queries():
    from conftest import REPO
    from gpuagent.compare.rollups import EVERY, LEVELS
    from gpuagent.compare.rollups_command import made_summary

    made = [f"retention policy {lv.name}" for lv in LEVELS]
    made += [f"continuous query q{i}" for i in range(len(LEVELS) * len(EVERY))]
    n = len(LEVELS) * len(EVERY)
    assert made_summary(made) == f"retention policies gpuagent_1m, gpuagent_1h and {n} continuous queries"
    assert made_summary(made[-1:]) == "1 continuous query" and made_summary([]) == ""
    doc = " ".join((REPO / "docs" / "compare.md").read_text().split())
    assert f"{len(EVERY)} rollups × {len(LEVELS)} levels, {n} continuous queries" in doc


def test_progress_off_a_terminal_is_a_line_a_step_or_every_5_percent_and_a_stop_says_what_is_partial():
    import io

    from gpuagent.compare.progress import Progress

    out = io.StringIO()
    with Progress("sim fleet", 3, "hosts", stream=out) as p:
        for host in ("a", "b", "c"):
            p.advance(host)
    assert out.getvalue().splitlines() == [
        "sim fleet: 1/3 hosts (a)",
        "sim fleet: 2/3 hosts (b)",
        "sim fleet: 3/3 hosts (c)",
    ]
    for stop in (KeyboardInterrupt, OSError):
        out = io.StringIO()
        try:
            with Progress("backfill", 100, "chunks", partial=lambda d, t: f"partial: {d} of {t}", stream=out) as p:
                for _ in range(41):
                    p.advance()
                raise stop
        except stop as exc:
            notes = getattr(exc, "__notes__", [])
        lines = out.getvalue().splitlines()
        assert lines[:8] == [f"backfill: {n}/100 chunks" for n in (5, 10, 15, 20, 25, 30, 35, 40)]
        if stop is KeyboardInterrupt:  # on Ctrl-C's one line (gpuagent.cli), not a line of its own
            assert notes == ["partial: 41 of 100"] and len(lines) == 8
        else:
            assert lines[8:] == ["partial: 41 of 100"]


def test_short_ranges_read_in_wh_not_thousandths_of_a_kwh():
    assert render._energy(0.002) == "2.0 Wh" and render._energy(12.3456) == "12.346 kWh" and render._energy(None) == "-"


def test_the_html_rest_band_names_one_value_once_and_counts_the_groups_without_it():
    from gpuagent.compare.html_report import TOP_N, Bar, bar_chart

    bars = (
        [Bar(f"g{i}", 50.0 + i) for i in range(TOP_N)] + [Bar("h100", 32.3)] + [Bar(f"l40s{i}", None) for i in range(3)]
    )
    page = bar_chart("DRAM", "%", bars)
    assert "32.3–32.3" not in page and ">32.3<" in page and "the other 4, 3 n/a" in page


def test_the_html_by_model_page_shows_work_limits_and_the_cross_model_view():
    from gpuagent.compare.html_report import work_section

    work = {"units": 900.0, "gpu_hours": 0.5, "units_per_gpu_hour": 1800.0, "wh_per_unit": 0.1,
            "cost_per_million_units": 12.5}  # fmt: skip
    limits = {"compute": 80.0, "memory": 0.0, "power": 0.0, "thermal": 0.0, "interconnect": 0.0, "starved": 0.0,
              "idle": 20.0}  # fmt: skip
    group = {"label": "NVIDIA L40S", "work": {"tokens_out": work}, "limits": limits,
             "limits_proxy": {"compute": True}}  # fmt: skip
    model = {"model": "NVIDIA L40S", "gpus": 1, "gpu_hours": 0.5, "spread_units_per_s_per_gpu": None}
    for figure in ("units_per_s_per_gpu", "units_per_s_per_kw", "units_per_dollar"):
        model[figure], model[f"{figure}_best_pct"] = 1.0, 100.0
    doc = {"groups": [group], "cross_model": [{"workload": "llama", "unit": "tokens_out", "models": [model]}]}
    page = work_section(doc)
    assert 'id="work"' in page and "<td>1,800.0</td>" in page and "<td>12.500</td>" in page
    assert 'id="limits"' in page and "<td>80.0*</td>" in page and "<td>20.0</td>" in page
    assert 'id="cross-model"' in page and "llama" in page
    assert work_section({"groups": [{"label": "x"}]}) == ""  # no work points: no section


def test_a_long_report_shows_it_is_at_work_on_a_terminal_and_nothing_off_one():
    import io
    import time

    from gpuagent.compare.progress import Activity

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    asked = [0]
    screen = Terminal()
    with Activity("compare", lambda: asked[0], "queries answered", after_s=0, stream=screen):
        asked[0] = 7
        deadline = time.monotonic() + 30  # a wait for the spinner's thread, not a timing check
        while "compare: 7 queries answered" not in screen.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "compare: 7 queries answered" in screen.getvalue()
    pipe = io.StringIO()
    with Activity("compare", lambda: 1, "queries answered", after_s=0, stream=pipe):
        pass
    assert pipe.getvalue() == ""
