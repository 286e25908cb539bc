"""Working-set sizes, the interleaved sweep, and the simulated GPU curve."""

import math

import pytest

from gpuagent.probe.backends import SimulatedBackend, _norm_bus_id, parse_size, spec_for
from gpuagent.probe.result import run_probe
from gpuagent.probe.sweep import ALIGN, MIB, run_sweep, working_set_sizes


def test_sizes_are_log_spaced_aligned_and_span_the_range():
    sizes = working_set_sizes(1 * MIB, 240 * MIB, 24)
    assert len(sizes) == 24
    assert sizes[0] == 1 * MIB and abs(sizes[-1] - 240 * MIB) < ALIGN
    assert all(s % ALIGN == 0 for s in sizes)
    ratios = [b / a for a, b in zip(sizes, sizes[1:], strict=False)]
    assert max(ratios) / min(ratios) < 1.01  # evenly spaced in log size


def test_narrow_range_still_gives_distinct_sizes():
    sizes = working_set_sizes(ALIGN, 4 * ALIGN, 10)
    assert len(set(sizes)) == 10 and sizes == sorted(sizes)


@pytest.mark.parametrize("args", [(1 * MIB, 1 * MIB, 24), (100, MIB, 24), (MIB, 2 * MIB, 1)])
def test_bad_ranges_are_refused(args):
    with pytest.raises(ValueError):
        working_set_sizes(*args)


class Recorder:
    """A backend that answers a fixed curve and remembers the order it was asked in."""

    name, device, target_bytes = "recorder", "test", 0

    def __init__(self):
        self.asked = []

    def prepare(self, max_bytes):
        self.max_bytes = max_bytes

    def read_gbps(self, nbytes):
        self.asked.append(nbytes)
        return 100.0 if len(self.asked) % 5 else 1.0  # every 5th sample disturbed

    def close(self):
        pass


def test_sweep_interleaves_rounds_and_keeps_medians():
    backend = Recorder()
    sizes = working_set_sizes(MIB, 64 * MIB, 8)
    result = run_sweep(backend, sizes, rounds=5, seed=1)
    assert backend.max_bytes == sizes[-1]
    rounds = [backend.asked[i : i + 8] for i in range(0, 40, 8)]
    assert all(sorted(r) == sizes for r in rounds)  # every size once per round
    assert len({tuple(r) for r in rounds}) > 1  # in a shuffled order
    assert result.bandwidth_gbps == [100.0] * 8  # disturbed samples are outvoted


@pytest.mark.parametrize("model", ["NVIDIA L40S", "NVIDIA A100-SXM4-80GB", "NVIDIA H200"])
def test_simulated_curve_knee_is_the_profile_l2(model):
    backend = SimulatedBackend(model, seed=3)
    sizes = working_set_sizes(MIB, 4 * backend.l2_bytes, 24)
    result = run_probe(backend, sizes, rounds=3)
    step = math.log(sizes[1] / sizes[0])
    assert result.knee is not None
    assert abs(math.log(result.knee.bytes / spec_for(model)[0])) <= step
    assert result.knee.bw_above_gbps == pytest.approx(0.9 * spec_for(model)[1], rel=0.05)


def test_sizes_and_bus_ids_parse():
    assert parse_size("512K") == 512 << 10 and parse_size("8192K") == 8 << 20 and parse_size("1 MiB") == 1 << 20
    assert _norm_bus_id("00000000:1B:00.0") == _norm_bus_id("0000:1b:00.0") == "0:1b:0.0"
