"""Logging to stderr: plain text, journald-friendly text, or JSON lines for log shippers.

Under systemd, stderr is usually a stream to journald, which stamps each line
itself and reads a ``<N>`` prefix (a syslog priority) as the line's level; so
there we write no timestamp of our own and prefix every line with its
priority. systemd says stderr is the journal by setting JOURNAL_STREAM to the
stream's ``st_dev:st_ino``; when stderr was redirected elsewhere the values
differ and we log as usual.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from typing import TextIO

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

# logging level -> syslog priority (sd-daemon(3): <3> err, <4> warning, <6> info, <7> debug)
SYSLOG_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def syslog_priority(levelno: int) -> int:
    for level, priority in SYSLOG_PRIORITY.items():  # highest level first
        if levelno >= level:
            return priority
    return 7


def stream_is_journal(stream: TextIO | None = None, environ=None) -> bool:
    """Whether ``stream`` (stderr by default) is the journal stream systemd connected."""
    env = os.environ if environ is None else environ
    value = env.get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep or not dev.isdigit() or not ino.isdigit():
        return False
    stream = sys.stderr if stream is None else stream
    try:
        st = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return False
    return (st.st_dev, st.st_ino) == (int(dev), int(ino))


_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/@\s]*)@")


def mask_url(text: str) -> str:
    """Credentials inside URLs hidden: http://admin:SECRET@host -> http://admin:***@host."""
    if "@" not in text:
        return text

    def sub(m: re.Match) -> str:
        user, sep, _ = m.group("userinfo").partition(":")
        return f"{m.group('scheme')}{user}:***@" if sep else f"{m.group('scheme')}***@"

    return _URL_USERINFO.sub(sub, text)


class MaskUrlCredentials(logging.Formatter):
    """Wraps a formatter: http://user:password@host in any log line (a plugin's, a library's
    exception text) is written as http://user:***@host."""

    def __init__(self, inner: logging.Formatter):
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        return mask_url(self.inner.format(record))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


class PriorityPrefix(logging.Formatter):
    """Wraps a formatter and puts ``<N>`` before every line it writes.

    journald turns each line into its own entry, so a traceback's lines keep
    the level of the record they belong to.
    """

    def __init__(self, inner: logging.Formatter):
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{syslog_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in self.inner.format(record).split("\n"))


def make_formatter(fmt: str = "text", journal: bool = False) -> logging.Formatter:
    if fmt == "json":
        inner: logging.Formatter = JsonFormatter()
    elif journal:
        inner = logging.Formatter("%(name)s: %(message)s")  # journald adds time and level
    else:
        inner = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    inner = MaskUrlCredentials(inner)
    return PriorityPrefix(inner) if journal else inner


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_gpuagent", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler._gpuagent = True  # type: ignore[attr-defined]
    handler.setFormatter(make_formatter(fmt, journal=stream_is_journal(sys.stderr)))
    root.addHandler(handler)
    root.setLevel(LEVELS.get(level, logging.INFO))
