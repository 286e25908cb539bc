"""gpuagent.service.logsetup: timestamps in a terminal, <N> priorities and none of our own in the journal."""

from __future__ import annotations

import json
import logging
import os
import re
import sys

import pytest

from gpuagent.service.logsetup import setup_logging, stream_is_journal, syslog_priority

STAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")


@pytest.fixture
def stderr_file(tmp_path, monkeypatch):
    """A real file for sys.stderr (tests swap it in themselves: pytest's capture replaces
    sys.stderr after fixtures run); gpuagent's handler removed afterwards."""
    root = logging.getLogger()
    level = root.level
    path = tmp_path / "stderr"
    with open(path, "w", encoding="utf-8") as fh:
        yield fh, path
        for handler in list(root.handlers):
            if getattr(handler, "_gpuagent", False):
                root.removeHandler(handler)
        root.setLevel(level)


def journal_of(fh) -> str:
    st = os.fstat(fh.fileno())
    return f"{st.st_dev}:{st.st_ino}"


def log_some() -> None:
    log = logging.getLogger("gpuagent.test")
    log.info("started")
    log.warning("slow sink")
    try:
        raise ValueError("bad reading")
    except ValueError:
        log.exception("collector x failed")


def test_journal_gets_priorities_and_no_timestamps(stderr_file, monkeypatch):
    fh, path = stderr_file
    monkeypatch.setenv("JOURNAL_STREAM", journal_of(fh))
    monkeypatch.setattr(sys, "stderr", fh)
    setup_logging("info", "text")
    log_some()
    fh.flush()
    lines = path.read_text().splitlines()
    assert lines[0] == "<6>gpuagent.test: started"
    assert lines[1] == "<4>gpuagent.test: slow sink"
    assert lines[2] == "<3>gpuagent.test: collector x failed"
    # Each traceback line is its own journal entry: it keeps the record's priority.
    assert len(lines) > 4 and all(line.startswith("<3>") for line in lines[2:])
    assert any("ValueError: bad reading" in line for line in lines)
    assert not any(STAMP.search(line) for line in lines)


def test_stderr_elsewhere_keeps_timestamps(stderr_file, monkeypatch, tmp_path):
    fh, path = stderr_file
    other = tmp_path / "other"
    other.write_text("")
    with open(other) as ofh:
        monkeypatch.setenv("JOURNAL_STREAM", journal_of(ofh))  # the journal, but not our stderr
    monkeypatch.setattr(sys, "stderr", fh)
    setup_logging("info", "text")
    log_some()
    fh.flush()
    first = path.read_text().splitlines()[0]
    assert STAMP.match(first) and first.endswith(" INFO gpuagent.test: started")
    assert "<6>" not in path.read_text()


@pytest.mark.parametrize("journal", [False, True])
def test_json_lines(stderr_file, monkeypatch, journal):
    fh, path = stderr_file
    monkeypatch.setenv("JOURNAL_STREAM", journal_of(fh) if journal else "")
    monkeypatch.setattr(sys, "stderr", fh)
    setup_logging("info", "json")
    log_some()
    fh.flush()
    lines = path.read_text().splitlines()
    assert len(lines) == 3  # the traceback is inside its record, not on lines of its own
    if journal:
        assert [line[:3] for line in lines] == ["<6>", "<4>", "<3>"]
        lines = [line[3:] for line in lines]
    docs = [json.loads(line) for line in lines]
    assert [d["level"] for d in docs] == ["info", "warning", "error"]
    assert docs[2]["message"] == "collector x failed" and "ValueError: bad reading" in docs[2]["exc"]


@pytest.mark.parametrize("value", ["", "12", "a:b", "1:2:3x"])
def test_malformed_journal_stream_means_not_the_journal(value):
    assert stream_is_journal(sys.__stderr__, {"JOURNAL_STREAM": value}) is False


def test_syslog_priority():
    assert [
        syslog_priority(lv) for lv in (logging.CRITICAL, logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG, 5)
    ] == [2, 3, 4, 6, 7, 7]
