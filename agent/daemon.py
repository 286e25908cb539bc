"""gpuagent run as a long-running service."""

from __future__ import annotations

import logging
import signal
import threading

from gpuagent.runtime import build

log = logging.getLogger("gpuagent")


def serve(options, config, host) -> None:
    agent = build(options, config, host)
    stop = threading.Event()

    def on_signal(signum, frame):
        log.info("received %s; stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        agent.scheduler.run_forever(stop)
    finally:
        agent.close()
