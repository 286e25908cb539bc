"""agent/service/safe_files.py: the one rule for files in places other users can write (issue 46),
and the state directory's writers that go through it (state.json, cost.json)."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

from gpuagent.service import safe_files
from gpuagent.service.state_file import STATE_FILE, LatestState


@pytest.fixture
def nobody() -> int:
    if os.geteuid() != 0:
        pytest.skip("needs root to make files of another user (os.chown)")
    return pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def shared(tmp_path) -> Path:
    """A state directory any user may write (a Kubernetes emptyDir is 0777), and a file of root's."""
    d = tmp_path / "state"
    d.mkdir()
    d.chmod(0o777)
    (tmp_path / "precious").write_text("root's own\n")
    return d


def test_reads_refuse_links_fifos_devices_big_files_and_other_owners(tmp_path, nobody):
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    assert safe_files.read_bounded(path, 10)[0] == b"x" * 10
    with pytest.raises(safe_files.Refused, match=r"is over 9 bytes"):
        safe_files.read_bounded(path, 9)
    os.chown(path, nobody, nobody)
    assert safe_files.read_bounded(path, 10, owners=None)[1].st_uid == nobody  # the caller judges the owner
    with pytest.raises(safe_files.Refused, match=r"\(owner nobody \(uid \d+\), mode 0644\) is owned by another user"):
        safe_files.read_bounded(path, 10, safe_files.trusted_owners())
    link = tmp_path / "zero"
    link.symlink_to("/dev/zero")
    with pytest.raises(safe_files.Refused, match="is a symlink"):
        safe_files.read_bounded(link, 10)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: opened at once (O_NONBLOCK), refused on its fstat
    with pytest.raises(safe_files.Refused, match="is a FIFO, not a regular file"):
        safe_files.read_bounded(fifo, 10)
    with pytest.raises(safe_files.Refused, match="is a character device"):
        safe_files.read_bounded("/dev/zero", 10)
    with pytest.raises(FileNotFoundError):
        safe_files.read_bounded(tmp_path / "absent", 10)


def test_a_replace_never_follows_a_link_planted_at_the_file_or_a_guessable_temporary_name(tmp_path, shared, nobody):
    precious = tmp_path / "precious"
    for name in ("out.json", f".out.json.{os.getpid()}"):
        (shared / name).symlink_to(precious)
        os.lchown(shared / name, nobody, nobody)
    safe_files.write_replace(shared / "out.json", b"{}")
    assert precious.read_text() == "root's own\n"
    assert not (shared / "out.json").is_symlink() and (shared / "out.json").read_bytes() == b"{}"
    assert sorted(p.name for p in shared.iterdir()) == [f".out.json.{os.getpid()}", "out.json"]  # no temp left
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, nobody, nobody)  # the unit's DynamicUser directory, 0755, as root's health sees it
    safe_files.write_replace(theirs / "out.json", b"{}")
    theirs.chmod(0o777)  # another user's, and anyone may write there: refused
    with pytest.raises(OSError, match=r"\(owner nobody .*, mode 0777\) is another user's and writable by others"):
        safe_files.write_replace(theirs / "out.json", b"{}")


def test_a_planted_state_json_pid_link_does_not_make_root_overwrite_a_file(tmp_path, shared, nobody):
    """Issue 46: `.state.json.<pid>` planted in a 0777 state dir made root overwrite a root-owned file."""
    planted = shared / f".{STATE_FILE}.{os.getpid()}"
    planted.symlink_to(tmp_path / "precious")
    os.lchown(planted, nobody, nobody)
    LatestState().write(shared, 10.0, "n1")
    assert (tmp_path / "precious").read_text() == "root's own\n"
    assert json.loads((shared / STATE_FILE).read_text())["pid"] == os.getpid()


def test_the_cost_file_is_written_the_same_way(tmp_path, shared, nobody):
    from gpuagent.context import AgentContext
    from gpuagent.service.scheduler import COST_FILE, Scheduler

    planted = shared / f".{COST_FILE}.{os.getpid()}"
    planted.symlink_to(tmp_path / "precious")
    os.lchown(planted, nobody, nobody)
    Scheduler(AgentContext(hostname="n1", state_dir=shared), [], [], 10.0).write_cost(force=True)
    assert (tmp_path / "precious").read_text() == "root's own\n"
    assert "collectors" in json.loads((shared / COST_FILE).read_text())
