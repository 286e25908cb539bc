"""The gpu_l2_probe points: schema, distinct timestamps, line protocol."""

import pytest

from gpuagent.pipeline.metric import to_lines
from gpuagent.probe.backends import SimulatedBackend
from gpuagent.probe.result import MEASUREMENT, STEP_NS, run_probe
from gpuagent.probe.sweep import MIB, working_set_sizes

TAGS = {
    "gpu": "1",
    "uuid": "GPU-abc",
    "model": "NVIDIA H200",
    "pci_bus_id": "00000000:1B:00.0",
    "arch": "Hopper",
}


@pytest.fixture(scope="module")
def result():
    backend = SimulatedBackend("NVIDIA H200", seed=1)
    sizes = working_set_sizes(MIB, 4 * backend.l2_bytes, 24)
    return run_probe(backend, sizes, rounds=3, gpu_tags=TAGS, reported_cache_bytes={"L2": backend.l2_bytes})


def test_one_summary_and_one_point_per_size(result):
    points = result.to_points({"host": "node7"})
    n_knees = len(result.knees)
    assert n_knees >= 1
    assert [p.measurement for p in points] == [MEASUREMENT] * (25 + n_knees)
    summary, knees, curve = points[0], points[1 : 1 + n_knees], points[1 + n_knees :]
    assert all(p.tags["knee"] for p in knees) and all("knee" not in p.tags for p in curve)
    assert summary.fields["l2_effective_bytes"] == result.knee.bytes
    assert summary.fields["l2_bw_gbps"] == result.knee.bw_below_gbps
    assert summary.fields["dram_bw_gbps"] == result.knee.bw_above_gbps
    assert summary.fields["l2_dram_ratio"] == pytest.approx(result.knee.ratio)
    assert summary.fields["reported_l2_bytes"] == 60 << 20
    assert summary.fields["method"] == "simulated" and summary.fields["knee_found"] is True
    assert "working_set_bytes" not in summary.fields
    assert [p.fields["working_set_bytes"] for p in curve] == result.sweep.sizes
    assert [p.fields["bandwidth_gbps"] for p in curve] == result.sweep.bandwidth_gbps
    assert [p.fields["step"] for p in curve] == list(range(24))
    for p in (summary, *curve):
        assert p.tags == {**TAGS, "host": "node7"}


def test_every_knee_is_its_own_point_with_both_plateaus(result):
    points = [p for p in result.to_points() if "knee" in p.tags]
    assert [p.tags["knee"] for p in points] == [str(i) for i in range(len(result.knees))]
    for p, k in zip(points, result.knees, strict=True):
        assert p.fields["knee_bytes"] == k.bytes
        assert p.fields["knee_bw_below_gbps"] == k.bw_below_gbps
        assert p.fields["knee_bw_above_gbps"] == k.bw_above_gbps
        assert p.fields["knee_ratio"] == k.ratio
        assert p.fields["knee_largest"] is (k is result.knee)
        assert p.time_ns == points[0].time_ns
    # The summary knee is the largest drop, and exactly one knee point says so.
    assert result.knee.ratio == max(k.ratio for k in result.knees)
    assert sum(p.fields["knee_largest"] for p in points) == 1


def test_timestamps_are_distinct_whole_milliseconds(result):
    # One series per GPU: points with equal timestamps would overwrite each other in InfluxDB,
    # and VictoriaMetrics keeps milliseconds only.
    times = [p.time_ns for p in result.to_points() if "knee" not in p.tags]
    assert len({t // 1_000_000 for t in times}) == 25
    assert times == sorted(times) and times[0] % STEP_NS == 0
    assert times[1] - times[0] == STEP_NS and times[0] <= result.started_ns


def test_line_protocol(result):
    text = to_lines(result.to_points({"host": "node7"}))
    lines = text.splitlines()
    assert len(lines) == 25 + len(result.knees)
    assert lines[0].startswith("gpu_l2_probe,arch=Hopper,gpu=1,host=node7,model=NVIDIA\\ H200,")
    assert f"l2_effective_bytes={result.knee.bytes}i" in lines[0]
    assert f"working_set_bytes={result.sweep.sizes[0]}i,bandwidth_gbps=" in lines[1 + len(result.knees)]


def test_cpu_result_is_not_a_gpu_point():
    backend = SimulatedBackend("NVIDIA L40S")
    res = run_probe(backend, working_set_sizes(MIB, 4 * backend.l2_bytes, 8), rounds=1)
    with pytest.raises(ValueError, match="GPU identity"):
        res.to_points()


def test_send_writes_through_the_configured_sinks(result, tmp_path, monkeypatch):
    from gpuagent.probe.cli import send_points

    monkeypatch.delenv("GPUAGENT_CONFIG", raising=False)
    out = tmp_path / "probe.lp"
    cfg = tmp_path / "gpuagent.toml"
    cfg.write_text(f'[agent]\nhostname = "node9"\ntags = {{ rack = "r1" }}\n\n[sinks.file]\npath = "{out}"\n')
    assert send_points(result, str(cfg), None, None, as_json=True) == 25 + len(result.knees)
    lines = out.read_text().splitlines()
    assert len(lines) == 25 + len(result.knees)
    assert all(line.startswith("gpu_l2_probe,arch=Hopper,gpu=1,host=node9,") and ",rack=r1," in line for line in lines)
    assert lines == [p.to_line() for p in result.to_points({"host": "node9", "rack": "r1"})]


def test_json_send_without_a_sink_is_refused(result, tmp_path, monkeypatch):
    from gpuagent.errors import AgentError
    from gpuagent.probe.cli import send_points

    monkeypatch.delenv("GPUAGENT_CONFIG", raising=False)
    cfg = tmp_path / "gpuagent.toml"
    cfg.write_text('[agent]\nhostname = "node9"\n')
    with pytest.raises(AgentError, match="no sink is configured"):
        send_points(result, str(cfg), None, None, as_json=True)
