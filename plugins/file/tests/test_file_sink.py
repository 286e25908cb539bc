"""The file sink: line protocol to a file or stdout, rotation by size."""

from __future__ import annotations

import re

import pytest

from gpuagent import Accumulator
from gpuagent.context import AgentContext
from gpuagent.errors import AgentError
from gpuagent.pipeline.metric import Point
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


# -- ownership and symlinks (issue 28, item 7) ------------------------------------------------


def _nobody() -> int:
    import os
    import pwd

    if os.geteuid() != 0:
        pytest.skip("needs root to make files of another user (os.chown)")
    return pwd.getpwnam("nobody").pw_uid


def test_a_symlink_planted_in_a_world_writable_dir_is_not_followed(tmp_path):
    """A root agent appended 103 KB to a root-owned file through user nobody's symlink; now one
    line names the path, its owner and mode, and the target is untouched."""
    import os

    nobody = _nobody()
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    target = tmp_path / "precious"
    target.write_text("root's own\n")
    link = shared / "metrics.lp"
    link.symlink_to(target)
    os.lchown(link, nobody, nobody)
    refused = make(tmp_path, path=str(link))  # stops this sink only (issue 46): the agent runs on
    refused.write(points(3))
    message = refused.refused
    assert "\n" not in message
    assert f"{link} (owner nobody (uid {nobody}), mode 0777) is a symlink (not followed)" in message
    assert refused.stats()["points_refused_total"] == 3 and refused.describe().startswith("refused: ")
    assert target.read_text() == "root's own\n"
    link.unlink()
    planted = shared / "planted.lp"  # a regular file of theirs: what is appended would be theirs to read
    planted.write_text("")
    os.chown(planted, nobody, nobody)
    assert re.search(
        r"planted.lp \(owner nobody .* is owned by another user", make(tmp_path, path=str(planted)).refused
    )
    # A file of the agent's own in that directory (a Kubernetes emptyDir is 0777) is written.
    sink = make(tmp_path, path=str(shared / "metrics.lp"))
    sink.write(points(1))
    sink.close()
    assert (shared / "metrics.lp").read_text().startswith("gpu_power,")


def test_a_file_of_another_user_is_refused_and_a_symlink_is_followed_when_the_operator_says_so(tmp_path):
    import os

    nobody = _nobody()
    theirs = tmp_path / "theirs.lp"
    theirs.write_text("")
    os.chown(theirs, nobody, nobody)
    assert re.search(r"theirs.lp \(owner nobody .* is owned by another user", make(tmp_path, path=str(theirs)).refused)
    mine = tmp_path / "real.lp"
    link = tmp_path / "metrics.lp"
    link.symlink_to(mine)
    assert "is a symlink" in make(tmp_path, path=str(link)).refused
    sink = make(tmp_path, path=str(link), follow_symlinks=True)
    sink.write(points(2))
    sink.close()
    assert len(mine.read_text().splitlines()) == 2
    # What keeps working: a file in a sticky directory like /tmp, and /dev/null (a character device).
    sticky = tmp_path / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)
    for path in (sticky / "metrics.lp", "/dev/null"):
        sink = make(tmp_path, path=str(path))
        sink.write(points(1))
        sink.close()
        assert sink.points_written == 1
    assert (sticky / "metrics.lp").read_text().startswith("gpu_power,")


@pytest.mark.slow
def test_a_planted_symlink_stops_the_file_sink_only_and_the_agent_runs_on(tmp_path):
    """Issue 46: a file-sink symlink planted in a 0777 state dir stopped the whole agent at start."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    nobody = _nobody()
    shared = tmp_path / "state"
    shared.mkdir()
    shared.chmod(0o777)
    (tmp_path / "precious").write_text("root's own\n")
    link = shared / "metrics.lp"
    link.symlink_to(tmp_path / "precious")
    os.lchown(link, nobody, nobody)
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        f'[agent]\ninterval = "500ms"\nstate_dir = "{shared}"\nsimulate = "l40s:1"\n[sinks.file]\npath = "{link}"\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "GPUAGENT_CONFIG"}
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "run", "--config", str(cfg)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline, state = time.monotonic() + 30, None
        while state is None and time.monotonic() < deadline and agent.poll() is None:
            time.sleep(0.2)
            try:
                state = json.loads((shared / "state.json").read_text())
            except (OSError, ValueError):
                pass
        assert agent.poll() is None, agent.communicate()[1][-2000:]
    finally:
        agent.send_signal(signal.SIGTERM)
        _, err = agent.communicate(timeout=30)
    assert state is not None and state["pid"] == agent.pid  # it collected: health reads it
    assert (tmp_path / "precious").read_text() == "root's own\n"
    said = [line for line in err.splitlines() if "is a symlink (not followed): not written to" in line]
    assert len(said) == 1, err[-2000:]
