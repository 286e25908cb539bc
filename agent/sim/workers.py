"""Worker processes for `sim fleet --jobs N` that stop with the command on Ctrl-C.

A terminal sends SIGINT to the whole process group: workers that took it too would die
mid-task while the parent waited for them (issue 29: `Aborted!`, then a hang; a second
Ctrl-C left a traceback and orphans). Workers ignore it; the parent, interrupted, cancels
what is queued, terminates the workers and waits for them before it exits.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def worker_pool(workers: int) -> Iterator[ProcessPoolExecutor]:
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_sigint
    )
    try:
        yield pool
    except BaseException:
        # A second Ctrl-C must not cut this short and leave the workers behind.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            processes = list((pool._processes or {}).values())  # noqa: SLF001 - no public handle
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in processes:
                proc.terminate()
            for proc in processes:
                proc.join(10)
        finally:
            signal.signal(signal.SIGINT, previous)
        raise
    pool.shutdown(wait=True)
