"""The figure registry (gpuagent.compare.figures): the docs' figure table is made of it, its figures
derive from the aggregates they declare, and each figure's JSON key is named in few product files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpuagent.compare import figures

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "compare.md"
# Where a figure's JSON key means that figure: the compare documents' producers and readers (the
# same words elsewhere are measurement fields, plugin names: l2_cache_bytes, mig, p2p).
PRODUCT = ROOT / "agent" / "compare"
AT_MOST = 2
# The group's identity, not figures: every document and renderer names them.
IDENTITY = {"label", "gpus", "hosts", "models"}
# Words still named in more files than AT_MOST, and in how many, where they are not the figure:
# this table only shrinks.
STILL = {
    "series": 4,  # InfluxDB's answers (query.py, rollups_command.py) and rollups status count their series
    "units": 4,  # work.py's accumulators; a column title of the work tables (work_render.py, html_report.py)
}


def test_docs_hold_the_figure_table():
    assert figures.figure_table() in DOCS.read_text(), "docs/compare.md: paste gpuagent.compare.figures.figure_table()"


def test_every_figure_is_in_the_docs_table_or_says_why_not():
    table = figures.figure_table()
    for f in figures.FIGURES:
        if f.docs:
            assert f"`{f.key}`" in table, f.key


def test_a_derived_figure_declares_what_it_reads():
    for f in figures.FIGURES:
        if f.derive is not None:
            assert f.needs, f.key
            for need in f.needs:
                assert isinstance(need, figures.Aggregate) or need in figures.ENERGY_SUMS, (f.key, need)
    for f in figures.PLAIN + figures.ENERGY:
        assert f.derive is not None, f.key


def test_derive_makes_the_figures_of_the_aggregates():
    clock, peak = figures.mean("gpu_clocks", "sm_clock_mhz"), figures.mean("gpu_clocks", "max_sm_clock_mhz")
    groups: dict[tuple, dict] = {("H100",): {}, ("A100",): {}, ("L4",): {}}
    answers = {("H100",): {clock: 1500.0, peak: 2000.0}, ("A100",): {clock: 1400.0, peak: None}}
    figures.derive(figures.CLOCKS, answers, groups)
    assert groups[("H100",)] == {"sm_clock_mean_mhz": 1500.0, "sm_clock_max_mhz": 2000.0, "sm_clock_pct_of_max": 75.0}
    assert groups[("A100",)]["sm_clock_pct_of_max"] is None
    assert groups[("L4",)] == dict.fromkeys(("sm_clock_mean_mhz", "sm_clock_max_mhz", "sm_clock_pct_of_max"))
    energy: dict[tuple, dict] = {("H100",): {}, ("L4",): {}}
    sums = {figures.ENERGY_J: 7.2e6, figures.OBSERVED_S: 7200.0, figures.BUSY_ENERGY_J: 3.6e6, figures.BUSY_S: 3600.0}
    figures.derive(figures.ENERGY, {("H100",): sums}, energy)
    assert energy[("H100",)]["energy_kwh"] == pytest.approx(2.0)
    assert energy[("H100",)]["energy_wh_per_gpu_hour"] == pytest.approx(1000.0)
    assert energy[("L4",)] == {
        "energy_kwh": 0.0,
        "gpu_hours": 0.0,
        "energy_wh_per_gpu_hour": None,
        "busy_gpu_hours": 0.0,
        "energy_wh_per_busy_gpu_hour": None,
    }


def test_csv_columns_flatten_the_structured_figures():
    group = {f.key: None for f in figures.FIGURES}
    group.update(throttle_share_pct={"sw_power_cap": 12.5}, p2p={"nvlink": 2, "pcie": 0, "none": 1}, hosts=["a", "b"])
    columns = dict(figures.csv_columns([group]))
    assert columns["hosts"](group) == "a;b"
    assert columns["throttle_sw_power_cap_pct"](group) == 12.5
    assert columns["p2p_nvlink_gpus"](group) == 2 and columns["l2_probe_runs"](group) is None
    assert columns["vgpu_host_gpus"](group) == 0
    assert "power_samples" not in columns  # in the JSON only


def _literals(path: Path) -> set[str]:
    return {
        n.value
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


def test_each_figure_key_is_named_in_at_most_two_product_files():
    keys = [f.key for f in (*figures.FIGURES, *figures.GROUP_WORK_FIGURES) if f.key not in IDENTITY]
    keys += [f.key for f in (*figures.WORK_FIGURES, *figures.DOCUMENT_WORK_FIGURES)]
    named = {str(p.relative_to(ROOT)): _literals(p) for p in PRODUCT.rglob("*.py")}
    offenders, shrunk = {}, {}
    for key in dict.fromkeys(keys):
        files = sorted(p for p, literals in named.items() if key in literals)
        allowed = STILL.get(key, AT_MOST)
        if len(files) > allowed:
            offenders[key] = files
        elif key in STILL and len(files) < allowed:
            shrunk[key] = len(files)
    print("\n".join(f"{k}: {len(v)} files: {', '.join(v)}" for k, v in offenders.items()))
    assert not offenders, f"figure keys named in more than {AT_MOST} product files (read the registry): {offenders}"
    assert not shrunk, f"fewer files name these now: lower STILL in this test to {shrunk}"


def test_the_tallies_make_one_shape_of_per_gpu_facts():
    groups: dict[tuple, dict] = {("H100",): {}, ("A100",): {}}
    gpus = {("a", "u1", "H100", "0"), ("a", "u2", "H100", "1"), ("b", "u3", "A100", "0")}

    def group_of(gpu: tuple) -> tuple:
        return (gpu[2],)

    figures.tally_mig(groups, gpus, group_of, {("a", "u1", "H100", "0"): 3}, {("a", "u1", "H100", "0")}, {})
    figures.tally_vgpu(groups, gpus, group_of, {("b", "u3", "A100", "0"): "host_vgpu"}, {}, {("A100",): {"A10-4Q"}})
    assert groups[("H100",)][figures.MIG] == {"capable_gpus": 1, "enabled_gpus": 1, "devices": 3, "profiles": []}
    assert groups[("A100",)][figures.VGPU] == {"modes": {"host_vgpu": 1}, "instances": 0, "types": ["A10-4Q"]}
    asked = []

    def hits(reason: str) -> dict[tuple, int]:
        asked.append(reason)
        return {("H100",): 1}

    figures.throttle_shares(groups, {("H100",): {"sw_power_cap": 4}, ("A100",): {"sw_power_cap": 0}}, hits)
    assert asked == ["sw_power_cap"]  # only the reasons some group carries
    assert groups[("H100",)][figures.THROTTLE] == {"sw_power_cap": 25.0} and groups[("A100",)][figures.THROTTLE] == {}
    assert figures.l2_probe_value(None, {}) is None
    assert figures.l2_probe_value(2, {"l2_bw_gbps": 5.0}) == {
        "runs": 2,
        "l2_effective_bytes": None,
        "l2_bw_gbps": 5.0,
        "dram_bw_gbps": None,
        "l2_dram_ratio": None,
    }


def test_every_backend_answers_each_aggregate_the_figures_need():
    from gpuagent.compare.core import Range
    from gpuagent.compare.promql import PromConnection, PromQL
    from gpuagent.compare.promql_report import PromReport
    from gpuagent.compare.promql_rollups import PromRollupReport
    from gpuagent.compare.report import Report
    from gpuagent.compare.rollup_report import RollupReport, _rollup_fields

    for backend in (Report, RollupReport, PromReport, PromRollupReport):
        assert callable(getattr(backend, "group_aggregates", None)), backend
    wanted = figures.aggregates(figures.PLAIN)
    assert {a.op for a in wanted} == {"mean", "max", "count", "p95"}
    for agg in wanted:  # the rollups record every aggregate but the percentile (histograms or raw points)
        if agg.op != "p95":
            rollup, fields = _rollup_fields(agg)
            assert len(fields) == (2 if agg.op == "mean" else 1), (agg, rollup, fields)
    report = PromReport(PromQL(PromConnection("http://127.0.0.1:9", scheme="influx")), Range(0, 3600 * 10**9), "host")
    mean = report.aggregate_query(figures.mean("gpu_power", "power_w"))
    assert mean == (
        "sum by (host) (sum_over_time(gpu_power_power_w[3600000ms])) / "
        "sum by (host) (count_over_time(gpu_power_power_w[3600000ms]))"
    )
    assert "quantile_over_time(0.95, gpu_power_power_w[3600000ms])" in report.aggregate_query(
        figures.p95("gpu_power", "power_w")
    )
