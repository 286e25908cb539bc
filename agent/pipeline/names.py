"""Which names a sink can store unchanged: measurement, tag and field names and tag values.

One place for the rules, so `config check` (global tags, hostname), the
serialiser (every point, third-party collectors' included) and the
Prometheus sink refuse the same things, each with a reason an operator can act on.
(The Prometheus names a field becomes are plugins/prometheus/naming.py's.)

InfluxDB line protocol (checked against influxd 1.6, see tests/test_line_protocol.py):

- A tag key or value is read up to the first ``,`` ``=`` or space that is
  not preceded by a backslash, and ``\\,`` ``\\=`` ``\\ `` are then unescaped;
  nothing else is (``\\\\`` stays two characters). So any text can be written
  by putting one backslash before each delimiter, except text that *ends* in
  a backslash: whatever delimiter follows reads as escaped (influxd answers
  "invalid tag format"). Such a name is refused here, and so is a backslash
  before a space: influxd first splits the request into lines with "a
  backslash escapes the next byte", reads that space as the start of the
  fields, and a later double quote can then swallow the line break.
- Field keys are read with "a backslash escapes the next byte", and influxd
  unescapes measurement names twice: a backslash right before a delimiter
  (or at the end) in those cannot come back unchanged, so it is refused.
- No raw newline, carriage return or NUL anywhere in a name (a newline ends the
  line; a CR in a name is always a bug), nothing empty, no line starting with
  ``#`` (a comment: influxd answers 204 and stores nothing).
- Reserved keys: ``time`` (influxd 1.x refuses the tag and silently drops the
  field), ``_measurement`` and ``_field`` (InfluxDB 2.x/3.x).
- The series key (measurement plus tags) is at most 65,535 bytes.
"""

from __future__ import annotations

import logging
import re
import threading

log = logging.getLogger("gpuagent.pipeline.names")

MAX_SERIES_KEY_BYTES = 65535
RESERVED_KEYS = frozenset({"time", "_measurement", "_field"})

_BACKSLASH_AT_END = re.compile(r"\\( |$)")
_BACKSLASH_BEFORE_DELIMITER = re.compile(r'\\([,= "]|$)')


def _common(name: object) -> str | None:
    if not isinstance(name, str):
        return f"not a string ({type(name).__name__})"
    if name == "":
        return "empty"
    if "\n" in name or "\r" in name:
        return "contains a line break"
    if "\x00" in name:
        return "contains a NUL character (influxd drops it from field keys)"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid UTF-8"
    if len(name.encode("utf-8")) > MAX_SERIES_KEY_BYTES:
        return f"longer than {MAX_SERIES_KEY_BYTES} bytes"
    return None


def measurement_problem(name: object) -> str | None:
    """Why InfluxDB cannot store this measurement name unchanged, or None."""
    problem = _common(name)
    if problem or not isinstance(name, str):  # _common said None: a str
        return problem
    if name.startswith("#"):
        return "starts with # (InfluxDB reads the line as a comment)"
    if name.startswith("\t"):
        return "starts with a tab (influxd strips it)"
    if _BACKSLASH_BEFORE_DELIMITER.search(name):
        return 'has a backslash at the end or before , = " or a space'
    return None


def _tag_problem(text: str) -> str | None:
    m = _BACKSLASH_AT_END.search(text)
    if m is None:
        return None
    if m.group(1):
        return "has a backslash before a space (influxd's line splitter misreads it)"
    return "ends with a backslash (no line-protocol form can end a tag with one)"


def _key_problem(name: object) -> str | None:
    """What tag keys and field keys share: the common checks, then InfluxDB's reserved keys."""
    problem = _common(name)
    if problem:
        return problem
    if name in RESERVED_KEYS:
        return "is reserved by InfluxDB"  # callers name the key before the problem
    return None


def tag_key_problem(name: object) -> str | None:
    problem = _key_problem(name)
    if problem or not isinstance(name, str):  # the common checks passed: a str
        return problem
    return _tag_problem(name)


def tag_value_problem(value: object) -> str | None:
    problem = _common(value)
    if problem or not isinstance(value, str):
        return problem
    return _tag_problem(value)


def field_key_problem(name: object) -> str | None:
    problem = _key_problem(name)
    if problem or not isinstance(name, str):
        return problem
    if name.startswith("\t"):
        return "starts with a tab (influxd strips it)"
    if _BACKSLASH_BEFORE_DELIMITER.search(name):
        return 'has a backslash at the end or before , = " or a space'
    return None


# -- text that is not UTF-8 -------------------------------------------------------------
#
# psutil (like os.listdir and os.environ) decodes what Linux hands it with surrogateescape:
# a process named b"train\xffjob" is the str "train\udcffjob", which no UTF-8 sink can
# encode. Rather than lose the point (or a whole batch, or a /metrics scrape), every sink
# writes such a byte as the four characters \xff (the byte it stood for, readable and
# searchable) and any other lone surrogate as U+FFFD, the replacement character.
NOT_UTF8 = {c: (f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else "\ufffd") for c in range(0xD800, 0xE000)}


def utf8_safe(text: str) -> str:
    """``text`` with its lone surrogates written as above; costs one translate (ASCII is fast)."""
    return text.translate(NOT_UTF8)


# -- warn once per bad name -------------------------------------------------------------

_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()
_WARN_LIMIT = 1000  # bounded: a collector emitting random bad names must not grow memory
# Distinct names left out since start (tag keys and values, field keys, measurements), exported
# as the `gpuagent` field names_refused_total so a refusal is never only a log line. Past
# _WARN_LIMIT distinct names each further refusal counts (they can no longer be told apart).
refused_total = 0


def warn_once(kind: str, name: str, problem: str, action: str) -> None:
    """Log one warning per (kind, name): the refusal repeats every cycle, the log line must not."""
    global refused_total
    key = (kind, name[:200])
    with _warned_lock:
        if key in _warned:
            return
        refused_total += 1
        if len(_warned) >= _WARN_LIMIT:
            return
        _warned.add(key)
    log.warning("%s %r %s: %s (warned once per name)", kind, name[:200], problem, action)
