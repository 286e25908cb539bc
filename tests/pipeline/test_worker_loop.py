"""The thread behind a sink's delivery (gpuagent.pipeline.worker_loop)."""

from __future__ import annotations

import logging
import threading

import pytest

from gpuagent.pipeline.worker_loop import WorkerLoop


class Notes:
    def __init__(self):
        self.notes = []

    def note(self, key, count, message, level=logging.WARNING):
        self.notes.append((key, count, message, level))


@pytest.mark.slow
def test_an_exception_from_step_is_noted_and_step_runs_again():
    cond, notes, calls = threading.Condition(), Notes(), []
    again = threading.Event()

    def step():
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("a bug in a step")
        again.set()
        return 3600.0

    loop = WorkerLoop("influxdb", step, cond, notes)
    loop.start()
    assert again.wait(30), "step was not run again after raising"
    loop.stop(30)
    assert not loop.alive and len(calls) == 2
    ((key, count, message, level),) = notes.notes
    assert "delivery worker error: ValueError: a bug in a step" in message and level == logging.ERROR


def test_wake_cuts_a_sleep_short_and_stop_ends_the_thread():
    cond, calls = threading.Condition(), []
    second = threading.Event()

    def step():
        calls.append(1)
        if len(calls) == 2:
            second.set()
        return 3600.0  # would sleep an hour unless woken

    loop = WorkerLoop("s", step, cond, Notes())
    loop.start()
    while not calls:
        with cond:
            cond.wait(0.05)
    loop.wake()
    assert second.wait(30)
    loop.stop(30)
    assert not loop.alive


def test_a_step_stuck_past_the_deadline_is_aborted():
    cond, release, started = threading.Condition(), threading.Event(), threading.Event()

    def step():  # a request that does not return until cut short
        started.set()
        release.wait(60)
        return 0.0

    loop = WorkerLoop("s", step, cond, Notes())
    loop.start()
    assert started.wait(30)
    loop.stop(0.0, abort=release.set)
    assert release.is_set()
    loop.thread.join(30)
    assert not loop.alive
