"""A sink that holds an exclusive lock while it runs, like one listening on a port.

A second instance cannot start while the first is open: the daemon's reload
must close the running agent's sinks before it can start the new ones.
"""

from __future__ import annotations

import fcntl

import gpuagent


class ExclusiveConfig(gpuagent.SinkConfig):
    lock: str


class ExclusiveSink(gpuagent.Sink):
    name = "exclusive"
    Config = ExclusiveConfig

    def __init__(self, config, context):
        super().__init__(config, context)
        self._fh = None

    def start(self):
        fh = open(self.config.lock, "a")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise RuntimeError(f"{self.config.lock} is held by someone else") from None
        self._fh = fh

    def write(self, points):
        pass

    def close(self):
        if self._fh is not None:
            self._fh.close()  # releases the lock
            self._fh = None


@gpuagent.hookimpl
def gpuagent_register_sinks(register):
    register(ExclusiveSink)
