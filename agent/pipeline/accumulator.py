"""The Accumulator: what a collector hands its readings to."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from gpuagent.pipeline.metric import MAX_FIELDS_PER_POINT, FieldValue, Point, bound_fields

_PLAIN = frozenset({int, str, bool})
# InfluxDB stores integers as int64: a value outside would get its whole line refused by the server.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


class Accumulator:
    """Collects points for one collection run.

    None values are missing readings and are left out; NaN and infinities are
    left out too and counted in `nonfinite_dropped`, integers outside int64 in
    `out_of_range_dropped` (the agent reports both counts in its own `gpuagent`
    measurement). A point left with no fields is not emitted. A point keeps its first
    MAX_FIELDS_PER_POINT fields (gpuagent.pipeline.metric: the rest counted, warned once).
    """

    __slots__ = ("points", "default_tags", "time_ns", "nonfinite_dropped", "out_of_range_dropped", "empty_dropped")

    def __init__(self, default_tags: Mapping[str, str] | None = None, time_ns: int | None = None):
        self.points: list[Point] = []
        self.default_tags = dict(default_tags or {})
        self.time_ns = time_ns
        self.nonfinite_dropped = 0
        self.out_of_range_dropped = 0
        self.empty_dropped = 0

    def add_fields(
        self,
        measurement: str,
        fields: Mapping[str, FieldValue | None],
        tags: Mapping[str, object] | None = None,
        time_ns: int | None = None,
    ) -> Point | None:
        if not isinstance(measurement, str) or not measurement:
            raise ValueError(f"measurement must be a non-empty string, got {measurement!r}")
        if len(fields) > MAX_FIELDS_PER_POINT:
            fields = bound_fields(measurement, fields)
        # The usual point keeps every field but its Nones: checked in one pass over the values,
        # then copied whole (a dict copy, not an insert per field).
        missing = 0
        for value in fields.values():
            kind = type(value)
            if kind is float:  # the ignores: `kind is float` narrows nothing for mypy (one type() a field)
                if value - value != 0.0:  # type: ignore[operator]
                    break
            elif kind is int:
                if value > INT_MAX or value < INT_MIN:  # type: ignore[operator]
                    break
            elif kind not in _PLAIN:
                if value is not None:
                    break
                missing += 1
        else:
            clean: dict[str, Any] = dict(fields)  # its Nones deleted below: FieldValues
            if missing:
                for key in [key for key, value in clean.items() if value is None]:
                    del clean[key]
            return self._point(measurement, clean, tags, time_ns)
        clean = {}
        for key, value in fields.items():
            kind = type(value)
            if kind is float:
                # mypy ignores below: `kind is float` (one type() per field, the hot path) narrows nothing for it
                if value - value != 0.0:  # type: ignore[operator]  # NaN or ±inf: never written, counted
                    self.nonfinite_dropped += 1
                    continue
            elif kind is int:
                if value > INT_MAX or value < INT_MIN:  # type: ignore[operator]  # kind is int, as above
                    self.out_of_range_dropped += 1
                    continue
            elif kind not in _PLAIN:
                if value is None:
                    continue
                if isinstance(value, float):
                    if not math.isfinite(value):
                        self.nonfinite_dropped += 1
                        continue
                    value = float(value)
                elif isinstance(value, bool):
                    pass
                elif isinstance(value, int):  # an int subclass, such as an IntEnum
                    if value > INT_MAX or value < INT_MIN:
                        self.out_of_range_dropped += 1
                        continue
                elif isinstance(value, str):
                    pass
                else:
                    raise TypeError(
                        f"{measurement}.{key}: field values must be int, float, bool or str, got {type(value).__name__}"
                    )
            clean[key] = value  # type: ignore[assignment]  # a plain kind, or checked above
        return self._point(measurement, clean, tags, time_ns)

    def _point(
        self, measurement: str, clean: dict[str, FieldValue], tags: Mapping[str, object] | None, time_ns: int | None
    ) -> Point | None:
        if not clean:
            self.empty_dropped += 1
            return None
        merged = self.default_tags.copy()
        if tags:
            for key, tag in tags.items():
                if type(tag) is str:
                    if tag:
                        merged[key] = tag
                elif tag is not None and tag != "":
                    merged[key] = str(tag)
        if time_ns is None:
            time_ns = self.time_ns if self.time_ns is not None else time.time_ns()
        point = Point(measurement, merged, clean, int(time_ns))
        self.points.append(point)
        return point
