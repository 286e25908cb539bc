"""The metric model (a Point) and its InfluxDB line-protocol form.

Escaping follows what influxd itself reads back (checked against influxd 1.6
in tests/test_line_protocol.py): one backslash before each delimiter
(measurement: comma and space; tag keys, tag values and field keys: comma,
equals and space); every other backslash is written as it is, since InfluxDB
stores it literally (doubling it would store two). String field values
escape backslash and double quote, and CR/LF as \\r \\n as influxdb-client
writes them, so no input can end a line early.

Names InfluxDB cannot store unchanged (gpuagent.pipeline.names: a tag ending in a
backslash, the key ``time``, an empty name, a line break ...) are left out,
with one warning per name: a bad tag costs the tag, never the point; a bad
field name costs that field; a bad measurement name costs the point (it is
serialised as "", which every sink skips).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import islice
from operator import itemgetter
from typing import Any

from gpuagent.pipeline import names

FieldValue = int | float | bool | str

# Bounds on one point, so that a collector emitting a million fields (or a 50 MB string) cannot
# put one huge line at the head of every sink's queue, retried whole. A point keeps its first
# MAX_FIELDS_PER_POINT fields; a line longer than MAX_LINE_BYTES (VictoriaMetrics's default
# -influx.maxLineSize, which refuses a longer line) loses its longest fields until it fits. Each
# left-out field is counted (fields_over_bound_total in the `gpuagent` point), warned once per
# measurement.
MAX_FIELDS_PER_POINT = 1000
MAX_LINE_BYTES = 256 * 1024
fields_over_bound_total = 0

# Points that have no line (a measurement name InfluxDB cannot store, or every field refused):
# counted once per point and exported as the `gpuagent` field points_unwritable_total.
unwritable_total = 0
_unwritable_lock = threading.Lock()

_MEASUREMENT = str.maketrans({",": r"\,", " ": r"\ "})
_KEY = str.maketrans({",": r"\,", "=": r"\=", " ": r"\ "})
# Raw CR/LF in a string field is legal for InfluxDB's parser but breaks every
# line-oriented consumer (VictoriaMetrics, the spool, tail -f): written as \n, \r.
_STRING = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r"})
# A byte that is not UTF-8 (names.NOT_UTF8) is stored as the text \xff: its backslash escaped.
_STRING.update({c: text.replace("\\", "\\\\") for c, text in names.NOT_UTF8.items()})


@dataclass(slots=True)
class Point:
    measurement: str
    tags: dict[str, str]
    fields: dict[str, FieldValue]
    time_ns: int = 0
    _line: str | None = field(default=None, repr=False, compare=False)

    def to_line(self) -> str:
        """One line of line protocol, without the newline. Cached: points are immutable once built."""
        line = self._line
        if line is None:
            fields = self.fields
            if len(fields) > MAX_FIELDS_PER_POINT:
                line = serialize(self.measurement, self.tags, fields, self.time_ns)
            else:  # serialize, one call fewer: this runs for every point
                line = _line(self.measurement, self.tags, fields, self.time_ns)
                if len(line) > MAX_LINE_BYTES // 4 and len(line.encode("utf-8")) > MAX_LINE_BYTES:
                    line = _fit(self.measurement, self.tags, fields, self.time_ns)
            self._line = line
            if not line:
                _count_unwritable()
        return line


def _count_unwritable() -> None:
    global unwritable_total
    with _unwritable_lock:
        unwritable_total += 1


def _count_over_bound(n: int) -> None:
    global fields_over_bound_total
    with _unwritable_lock:
        fields_over_bound_total += n


def escape_text(value: str) -> str:
    """A string field's value, escaped (without its quotes). str.translate with a dict table
    looks up every character (a KeyError for each one it leaves alone): most values (states,
    bus ids, names) need nothing, which five C-level scans tell; the table maps only ", \\,
    CR, LF and lone surrogates (not ASCII)."""
    if value.isascii() and '"' not in value and "\\" not in value and "\n" not in value and "\r" not in value:
        return value
    return value.translate(_STRING)


def escape_measurement(name: str) -> str:
    return name.translate(_MEASUREMENT)


def escape_key(key: str) -> str:
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
        return '"' + escape_text(value) + '"'
    raise TypeError(f"unsupported field type {type(value).__name__}")


@lru_cache(maxsize=8192)
def _head(measurement: str, tag_items: tuple[tuple[str, str], ...]) -> str:
    """Measurement and tags as line protocol; "" when the measurement cannot be written.
    Cached, so the names of the same GPUs are checked once, not every cycle. Bytes that are not
    UTF-8 are written as \\xNN (names.utf8_safe), not refused: a process name can hold them."""
    measurement, safe_items = _utf8_safe(measurement), [(_utf8_safe(k), _utf8_safe(v)) for k, v in tag_items]
    problem = names.measurement_problem(measurement)
    if problem:
        names.warn_once("measurement", str(measurement), problem, "its points are not written")
        return ""
    tags = []
    for k, v in sorted(safe_items):  # sorted is what InfluxDB stores; sending it so saves it the work
        if v == "":
            continue
        problem = names.tag_key_problem(k)
        what = "tag key"
        if problem is None:
            problem, what = names.tag_value_problem(v), f"value of tag {k!r}"
        if problem:
            names.warn_once(
                what, str(v) if what != "tag key" else str(k), problem, "points are written without this tag"
            )
            continue
        tags.append(f",{escape_key(k)}={escape_key(v)}")
    head = escape_measurement(measurement) + "".join(tags)
    while len(head.encode("utf-8")) > names.MAX_SERIES_KEY_BYTES and tags:
        longest = max(tags, key=len)
        tags.remove(longest)
        names.warn_once(
            "tag",
            longest[1:200],
            f"makes the series key longer than {names.MAX_SERIES_KEY_BYTES} bytes",
            "points are written without this tag",
        )
        head = escape_measurement(measurement) + "".join(tags)
    return head


def _utf8_safe(name):
    return names.utf8_safe(name) if isinstance(name, str) else name


_FIELD_KEYS: dict[str, str] = {}


def _field_key(key: str) -> str:
    """The escaped key and "=", or "" for a name InfluxDB cannot store (warned once)."""
    escaped = _FIELD_KEYS.get(key)
    if escaped is None:
        safe = _utf8_safe(key)
        problem = names.field_key_problem(safe)
        if problem:
            names.warn_once("field", str(safe), problem, "the field is left out")
            escaped = ""
        else:
            escaped = escape_key(safe) + "="
        if len(_FIELD_KEYS) < 65536:  # bounded: field names come from code, but be safe
            _FIELD_KEYS[key] = escaped
    return escaped


# -- the hot path: one %-format per point shape --------------------------------------
#
# A collector emits the same shape (measurement, tags, field names and value types) every
# cycle: its line is one "%"-format of the values, built once from the escaping below, so a
# point costs one C-level format instead of a Python step per field (bench/RESULTS.md). The
# shape is per series (its tags are in it), and a series' text and boolean fields mostly hold
# the same values run after run (a link's state and far end, a verdict, a process name): the
# last ones are kept with a format that has them written in, so while they hold only the
# numbers are formatted (the line cache).

_NUMBER_FORMATS = {float: "%r", int: "%di"}


class _Shape:
    """One point shape's line format: the general one (every value a %-argument) and, for the
    text and boolean values last seen, one with those written in (``fixed``: (values, format))."""

    __slots__ = ("fmt", "floats", "bools", "strs", "pick_floats", "pick_fixed", "pick_numbers", "parts", "fixed")

    def __init__(self, head: str, keys: list[str], types: tuple):
        self.floats = tuple(i for i, t in enumerate(types) if t is float)
        self.bools = tuple(i for i, t in enumerate(types) if t is bool)
        self.strs = tuple(i for i, t in enumerate(types) if t is str)
        numbers = tuple(i for i, t in enumerate(types) if t is float or t is int)
        fixed = tuple(i for i, t in enumerate(types) if t is bool or t is str)
        self.parts = (head.replace("%", "%%"), [k.replace("%", "%%") for k in keys], types)
        self.fmt = self._format({})
        # itemgetter answers a tuple for two positions or more (one value for one): keep tuples.
        self.pick_floats = _picker(self.floats)
        self.pick_fixed = _picker(fixed) if fixed else None
        self.pick_numbers = _picker(numbers)
        self.fixed: tuple[tuple, str] | None = None

    def _format(self, written: dict[int, str]) -> str:
        head, keys, types = self.parts
        out = []
        for i, (key, t) in enumerate(zip(keys, types, strict=True)):
            if i in written:
                out.append(key + written[i].replace("%", "%%"))
            elif t is bool:
                out.append(key + "%s")
            elif t is str:
                out.append(key + '"%s"')
            else:
                out.append(key + _NUMBER_FORMATS[t])
        return f"{head} {','.join(out)} %d"

    def with_fixed(self, values: tuple, fixed: tuple) -> str:
        """The format with these text and boolean values (``fixed``) written in, kept for the next
        point (_line uses the kept one while they hold)."""
        written = {i: ("true" if values[i] else "false") for i in self.bools}
        written.update({i: '"' + escape_text(values[i]) + '"' for i in self.strs})
        fmt = self._format(written)
        self.fixed = (fixed, fmt)  # one assignment: a reader on another thread sees both or neither
        return fmt


def _picker(positions: tuple[int, ...]) -> itemgetter:
    """The values at ``positions`` as a tuple, in C (a slice for none or one: still a tuple)."""
    if len(positions) < 2:
        start = positions[0] if positions else 0
        return itemgetter(slice(start, start + len(positions)))
    return itemgetter(*positions)


_SHAPES: dict[tuple, _Shape | None] = {}
_MAX_SHAPES = 4096


def _shape(measurement: str, tag_items: tuple, keys: tuple, types: tuple) -> _Shape | None:
    """The line format of a point shape, or None when a value's type has no fast form or a
    name is left out (the general path does those)."""
    head = _head(measurement, tag_items)
    if not head:
        return None
    escaped = []
    for k, t in zip(keys, types, strict=True):
        key = _field_key(k)
        if not key or (t is not float and t is not int and t is not bool and t is not str):
            return None
        escaped.append(key)
    return _Shape(head, escaped, types)


def serialize(measurement: str, tags: Mapping[str, str], fields: Mapping[str, FieldValue], time_ns: int) -> str:
    if len(fields) > MAX_FIELDS_PER_POINT:
        fields = bound_fields(measurement, fields)
    line = _line(measurement, tags, fields, time_ns)
    if len(line) > MAX_LINE_BYTES // 4 and len(line.encode("utf-8")) > MAX_LINE_BYTES:
        return _fit(measurement, tags, fields, time_ns)
    return line


def bound_fields(measurement: str, fields: Mapping) -> Mapping:
    """The first MAX_FIELDS_PER_POINT fields; the rest counted and warned (once per measurement).
    The Accumulator calls it too, so that no sink (/metrics included) sees more."""
    if len(fields) <= MAX_FIELDS_PER_POINT:
        return fields
    _count_over_bound(len(fields) - MAX_FIELDS_PER_POINT)
    names.warn_once(
        "point of measurement",
        str(measurement),
        f"has {len(fields)} fields",
        f"the first {MAX_FIELDS_PER_POINT} are written, the rest counted (fields_over_bound_total)",
    )
    return dict(islice(fields.items(), MAX_FIELDS_PER_POINT))


def _fit(measurement: str, tags: Mapping[str, str], fields: Mapping[str, FieldValue], time_ns: int) -> str:
    """A line over MAX_LINE_BYTES without its longest fields ("" when not even one fits)."""
    head = _head(measurement, tuple(tags.items()))
    parts: list[tuple[int, int, str]] = []
    for k, v in fields.items():
        key = _field_key(k)
        if key and not (type(v) is float and v - v != 0.0):  # what _serialize leaves out or refuses
            part = key + format_field(v)
            parts.append((len(part.encode("utf-8")), len(parts), part))
    budget = MAX_LINE_BYTES - len(head.encode("utf-8")) - len(str(time_ns)) - 2
    size = sum(n for n, _, _ in parts) + len(parts) - 1
    by_size = sorted(parts, reverse=True)
    while by_size and size > budget:
        n, _, _ = by_size.pop(0)
        size -= n + 1
    _count_over_bound(len(fields) - len(by_size))
    names.warn_once(
        "point of measurement",
        str(measurement),
        f"makes a line longer than {MAX_LINE_BYTES} bytes",
        "its longest fields are left out and counted (fields_over_bound_total)",
    )
    if not head or not by_size:
        return ""
    return f"{head} {','.join(part for _, _, part in sorted(by_size, key=lambda p: p[1]))} {time_ns}"


def _line(measurement: str, tags: Mapping[str, str], fields: Mapping[str, FieldValue], time_ns: int) -> str:
    values = tuple(fields.values())
    # One flat tuple, no tuple per tag: the tag names and values, field names (all str), then the
    # value types (types, one per field name): the count of types tells the field names from the
    # tags, so no two shapes have the same key.
    key = (measurement, *tags, *tags.values(), *fields, *map(type, values))
    shape = _SHAPES.get(key, _UNSEEN)
    if shape is _UNSEEN:
        if len(_SHAPES) >= _MAX_SHAPES:  # bounded: shapes come from code, but be safe
            _SHAPES.clear()
        parts = (measurement, tuple(tags.items()), tuple(fields), tuple(map(type, values)))
        shape = _SHAPES[key] = _shape(*parts) if values else None
    if shape is not None:
        if shape.floats:
            total = sum(shape.pick_floats(values))
            if total - total != 0.0:  # a NaN or an infinity (or an overflowing sum): the general path
                return _serialize(measurement, tags, fields, time_ns)
        if shape.pick_fixed is not None:
            fixed, kept = shape.pick_fixed(values), shape.fixed
            # bools and strs at fixed positions (the shape's types): == is exact
            fmt = kept[1] if kept is not None and kept[0] == fixed else shape.with_fixed(values, fixed)
            return fmt % (*shape.pick_numbers(values), time_ns)
        return shape.fmt % (*values, time_ns)
    return _serialize(measurement, tags, fields, time_ns)


_UNSEEN: Any = object()  # Any: `shape is _UNSEEN` then leaves Shape | None


def _serialize(measurement: str, tags: Mapping[str, str], fields: Mapping[str, FieldValue], time_ns: int) -> str:
    # The general path (any value type; raises on what has no line-protocol form).
    head = _head(measurement, tuple(tags.items()))
    if not head:
        return ""
    keys = _FIELD_KEYS
    parts = []
    for k, v in fields.items():
        key = keys.get(k)
        if not key:
            key = _field_key(k)
            if not key:
                continue
        t = type(v)  # one type() per field; `t is float` narrows nothing for mypy, hence its ignores
        if t is float:
            parts.append(key + (repr(v) if v - v == 0.0 else _float(v)))  # type: ignore[operator, arg-type]
        elif t is int:
            parts.append(f"{key}{v}i")
        elif t is bool:
            parts.append(key + ("true" if v else "false"))
        elif t is str:
            parts.append(key + '"' + escape_text(v) + '"')  # type: ignore[arg-type]
        else:
            parts.append(key + format_field(v))
    if not parts:
        return ""  # every field refused (warned): a line without fields is not line protocol
    return f"{head} {','.join(parts)} {time_ns}"


def to_lines(points: Iterable[Point]) -> str:
    """Points as a line-protocol document, one line each, newline-terminated (unwritable points skipped)."""
    text = "\n".join(filter(None, map(Point.to_line, points)))  # C-level passes, no generator a point
    return text + "\n" if text else ""
