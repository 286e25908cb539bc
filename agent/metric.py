"""The metric model (a Point) and its InfluxDB line-protocol form.

Escaping follows the line-protocol reference and InfluxDB's own parser:
measurement escapes comma and space; tag keys, tag values and field keys
escape comma, equals and space; string field values escape backslash and
double quote. A backslash in a name is kept as it is (InfluxDB stores it
literally), except before a delimiter or at the end, where it is doubled so
it cannot swallow the delimiter. CR/LF/TAB in names become \\r \\n \\t
and CR/LF in string fields \\r \\n, as influxdb-client writes them, so no
input can end a line early.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

FieldValue = int | float | bool | str

_MEASUREMENT = str.maketrans({",": r"\,", " ": r"\ ", "\n": r"\n", "\r": r"\r", "\t": r"\t"})
_KEY = str.maketrans({",": r"\,", "=": r"\=", " ": r"\ ", "\n": r"\n", "\r": r"\r", "\t": r"\t"})
_MEASUREMENT_BACKSLASH = re.compile(r"\\(?=[, \n\r\t]|$)")
_KEY_BACKSLASH = re.compile(r"\\(?=[,= \n\r\t]|$)")
# Raw CR/LF in a string field is legal for InfluxDB's parser but breaks every
# line-oriented consumer (VictoriaMetrics, the spool, tail -f): written as \n, \r.
_STRING = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})


@dataclass(slots=True)
class Point:
    measurement: str
    tags: dict[str, str]
    fields: dict[str, FieldValue]
    time_ns: int = 0
    _line: str | None = field(default=None, repr=False, compare=False)

    def to_line(self) -> str:
        """One line of line protocol, without the newline. Cached: points are immutable once built."""
        if self._line is None:
            self._line = serialize(self.measurement, self.tags, self.fields, self.time_ns)
        return self._line


def escape_measurement(name: str) -> str:
    if "\\" in name:
        name = _MEASUREMENT_BACKSLASH.sub(r"\\\\", name)
    return name.translate(_MEASUREMENT)


def escape_key(key: str) -> str:
    if "\\" in key:
        key = _KEY_BACKSLASH.sub(r"\\\\", key)
    return key.translate(_KEY)


def _float(value: float) -> str:
    if value - value != 0.0:  # NaN or ±inf
        raise ValueError("non-finite float has no line-protocol form")
    return repr(value)


def format_field(value: FieldValue) -> str:
    """A field value as line protocol; ``serialize`` inlines the exact-type cases."""
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}i"
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return '"' + value.translate(_STRING) + '"'
    raise TypeError(f"unsupported field type {type(value).__name__}")


@lru_cache(maxsize=8192)
def _head(measurement: str, tag_items: tuple[tuple[str, str], ...]) -> str:
    # Sorted tags are what InfluxDB stores; sending them sorted saves it the work.
    return escape_measurement(measurement) + "".join(
        f",{escape_key(k)}={escape_key(v)}" for k, v in sorted(tag_items) if v != ""
    )


_FIELD_KEYS: dict[str, str] = {}


def _field_key(key: str) -> str:
    escaped = _FIELD_KEYS.get(key)
    if escaped is None:
        escaped = escape_key(key) + "="
        if len(_FIELD_KEYS) < 65536:  # bounded: field names come from code, but be safe
            _FIELD_KEYS[key] = escaped
    return escaped


# -- the hot path: one %-format per point shape --------------------------------------
#
# A collector emits the same shape (measurement, tags, field names and value types) every
# cycle: its line is one "%"-format of the values, built once from the escaping below, so a
# point costs one C-level format instead of a Python step per field (bench/RESULTS.md).

_SHAPES: dict[tuple, tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None] = {}
_MAX_SHAPES = 4096


def _shape(measurement: str, tag_items: tuple, keys: tuple, types: tuple):
    """(format, float positions, bool positions, str positions) of a point shape, or None
    when a value's type has no fast form (the general path formats it)."""
    parts, floats, bools, strs = [], [], [], []
    for i, (k, t) in enumerate(zip(keys, types, strict=True)):
        key = _field_key(k).replace("%", "%%")
        if t is float:
            floats.append(i)
            parts.append(key + "%r")
        elif t is int:
            parts.append(key + "%di")
        elif t is bool:
            bools.append(i)
            parts.append(key + "%s")
        elif t is str:
            strs.append(i)
            parts.append(key + '"%s"')
        else:
            return None
    head = _head(measurement, tag_items).replace("%", "%%")
    return f"{head} {','.join(parts)} %d", tuple(floats), tuple(bools), tuple(strs)


def serialize(
    measurement: str, tags: Mapping[str, str], fields: Mapping[str, FieldValue], time_ns: int
) -> str:
    tag_items = tuple(tags.items())
    values = tuple(fields.values())
    key = (measurement, tag_items, tuple(fields), tuple(map(type, values)))
    shape = _SHAPES.get(key, _UNSEEN)
    if shape is _UNSEEN:
        if len(_SHAPES) >= _MAX_SHAPES:  # bounded: shapes come from code, but be safe
            _SHAPES.clear()
        shape = _SHAPES[key] = _shape(*key) if values else None
    if shape is not None:
        fmt, floats, bools, strs = shape
        if floats:
            total = sum([values[i] for i in floats])
            if total - total != 0.0:  # a NaN or an infinity (or an overflowing sum): the general path
                return _serialize(measurement, tags, fields, time_ns)
        if bools or strs:
            out = list(values)
            for i in bools:
                out[i] = "true" if values[i] else "false"
            for i in strs:
                out[i] = values[i].translate(_STRING)
            return fmt % (*out, time_ns)
        return fmt % (*values, time_ns)
    return _serialize(measurement, tags, fields, time_ns)


_UNSEEN = object()


def _serialize(
    measurement: str, tags: Mapping[str, str], fields: Mapping[str, FieldValue], time_ns: int
) -> str:
    # The general path (any value type; raises on what has no line-protocol form).
    head = _head(measurement, tuple(tags.items()))
    keys = _FIELD_KEYS
    parts = []
    for k, v in fields.items():
        key = keys.get(k) or _field_key(k)
        t = type(v)
        if t is float:
            parts.append(key + (repr(v) if v - v == 0.0 else _float(v)))
        elif t is int:
            parts.append(f"{key}{v}i")
        elif t is bool:
            parts.append(key + ("true" if v else "false"))
        elif t is str:
            parts.append(key + '"' + v.translate(_STRING) + '"')
        else:
            parts.append(key + format_field(v))
    return f"{head} {','.join(parts)} {time_ns}"


def to_lines(points: Iterable[Point]) -> str:
    """Points as a line-protocol document, one line each, newline-terminated."""
    return "".join(p.to_line() + "\n" for p in points)
