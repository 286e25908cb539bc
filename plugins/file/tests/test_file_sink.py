"""The file sink: line protocol to a file or stdout, rotation by size."""

from __future__ import annotations

import pytest

from gpuagent import Accumulator
from gpuagent.context import AgentContext
from gpuagent.errors import AgentError
from gpuagent.metric import Point
from gpuagent.plugins.file import FileSink


def points(n: int, start: int = 0):
    acc = Accumulator({"host": "h"}, time_ns=10**18)
    for i in range(start, start + n):
        acc.add_fields("gpu_power", {"power_w": 100.5, "seq": i}, tags={"gpu": "0"})
    return acc.points


def make(tmp_path, **options) -> FileSink:
    sink = FileSink(FileSink.Config.model_validate(options), AgentContext(hostname="h", state_dir=tmp_path))
    sink.start()
    return sink


def test_writes_line_protocol_flushed_after_each_write(tmp_path):
    path = tmp_path / "sub" / "metrics.lp"
    sink = make(tmp_path, path=str(path))
    sink.write(points(3))
    # Readable before close: each write is flushed.
    lines = path.read_text().splitlines()
    assert lines == [p.to_line() for p in points(3)]
    sink.close()
    assert sink.stats()["points_written_total"] == 3


def test_stdout_is_the_default(tmp_path, capsys):
    sink = make(tmp_path)
    sink.write(points(2))
    sink.flush(1)
    sink.close()
    assert capsys.readouterr().out.splitlines() == [p.to_line() for p in points(2)]


def test_rotation_by_size_keeps_n_files_and_loses_no_line_in_between(tmp_path):
    path = tmp_path / "metrics.lp"
    line_len = len(points(1, start=100)[0].to_line()) + 1
    sink = make(tmp_path, path=str(path), max_bytes=line_len * 10, keep=2)
    for i in range(100, 135, 5):  # 7 writes of 5 equal-length lines: 10 lines fit in one file
        sink.write(points(5, start=i))
    sink.close()
    files = [path.with_name("metrics.lp.2"), path.with_name("metrics.lp.1"), path]
    sizes = [f.stat().st_size for f in files]
    assert all(s <= line_len * 10 for s in sizes)
    assert not path.with_name("metrics.lp.3").exists()
    seqs = [int(line.rsplit("seq=", 1)[1].split("i")[0]) for f in files for line in f.read_text().splitlines()]
    assert seqs == list(range(110, 135))  # 100-109 went with the third rotation; no gap after
    assert sink.stats()["rotations_total"] == 3


def test_keep_zero_truncates(tmp_path):
    path = tmp_path / "m.lp"
    sink = make(tmp_path, path=str(path), max_bytes="100B", keep=0)
    for i in range(5):
        sink.write(points(1, start=i))
    sink.close()
    assert list(tmp_path.glob("m.lp*")) == [path]


def test_unwritable_path_is_a_one_line_error(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(AgentError, match="cannot open"):
        make(tmp_path, path=str(tmp_path / "file" / "x.lp"))


def test_config_refuses_unknown_keys_and_bad_sizes():
    with pytest.raises(Exception, match="max_bytes"):
        FileSink.Config.model_validate({"max_bytes": "big"})
    with pytest.raises(Exception, match="rotate"):
        FileSink.Config.model_validate({"rotate": 1})


def test_a_string_that_is_not_utf8_costs_nothing(tmp_path):
    """A lone surrogate in one point's string field (issue 28, item 3): the whole batch is
    written, the byte as \\xff; before, the UnicodeEncodeError lost every point of the batch."""
    sink = make(tmp_path, path=str(tmp_path / "out.lp"))
    try:
        sink.write([Point("m", {"gpu": str(i)}, {"name": "train\udcffjob" if i == 1 else "ok"}, i) for i in range(3)])
    finally:
        sink.close()
    lines = (tmp_path / "out.lp").read_text(encoding="utf-8").splitlines()
    assert lines == ['m,gpu=0 name="ok" 0', 'm,gpu=1 name="train\\\\xffjob" 1', 'm,gpu=2 name="ok" 2']
    assert sink.points_written == 3
