"""Per-cycle NVML reads for collectors: sentinels, calls a card refuses, field-value batches.

- ``valid``: NVML's "not available" values (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF,
  and 0 where 0 cannot be a real reading) become None, so no sentinel number
  ever reaches a field.
- ``poll``: like ``gpu.query``, but a call the card answered NOT_SUPPORTED
  (or another "missing" code) is not asked again: support does not change
  while the driver is loaded, and the call would cost a round trip per cycle.
- ``FieldReader``: several readings in one nvmlDeviceGetFieldValues call. The
  first read asks for every field; fields the card refuses are dropped from
  later reads, and a reading whose field is refused may fall back to its own
  call (also asked only while supported).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pynvml

from gpuagent.gpu import MISSING_CODES, Gpu, GpuLost

log = logging.getLogger("gpuagent.nvml_read")

NA_UINT = 0xFFFFFFFF
NA_ULONGLONG = 0xFFFFFFFFFFFFFFFF
_SENTINELS = (
    NA_UINT,
    NA_ULONGLONG,
    NA_UINT - 1,
)  # 0xFFFFFFFE: NVML_VALUE_NOT_AVAILABLE in some structs


def valid(value: Any, *, zero: bool = True) -> Any:
    """The reading, or None for NVML's not-available values (and for 0 when ``zero`` is False)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if value in _SENTINELS or value < 0:
            return None
        if not zero and value == 0:
            return None
    elif isinstance(value, float):
        if not math.isfinite(value) or (not zero and value == 0.0):
            return None
    return value


def poll(gpu: Gpu, fn: Callable[..., Any], *args: Any) -> Any:
    """``gpu.query(fn, *args)``; once the card has refused the call, None without asking."""
    key = (fn, args)
    if key in gpu.refused_calls:
        return None
    value = gpu.query(fn, *args)
    if value is None:
        gpu.refused_calls.add(key)
    return value


def poll_first(gpu: Gpu, names: tuple[str, ...], *args: Any) -> Any:
    """The reading from the first of several spellings of one NVML call that pynvml has and the
    card answers, newest first. By name: the deprecated spellings leave pynvml with CUDA 14."""
    for name in names:
        fn = getattr(pynvml, name, None)
        if fn is not None:
            value = poll(gpu, fn, *args)
            if value is not None:
                return value
    return None


_DECODE = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}


def field_value(fv: Any) -> int | float | None:
    """The value of one c_nvmlFieldValue_t, or None when it failed or is a sentinel."""
    if fv.nvmlReturn != pynvml.NVML_SUCCESS:
        return None
    member = _DECODE.get(fv.valueType)
    if member is None:
        return None
    value = getattr(fv.value, member)
    if member == "dVal":
        return valid(float(value))
    value = int(value)
    if member == "usVal" and value == 0xFFFF:
        return None
    return valid(value)


@dataclass(frozen=True)
class Field:
    """One reading: its NVML field id, and optionally a direct call for cards that refuse the field."""

    field_id: int
    fallback: Callable[..., Any] | None = None
    fallback_args: tuple = ()


class FieldReader:
    """Readings by name through one nvmlDeviceGetFieldValues call per GPU per cycle."""

    def __init__(self, fields: Mapping[str, Field]):
        self.fields = dict(fields)
        self._key = "nvml_read.fields:" + ",".join(
            f"{n}={f.field_id}" for n, f in sorted(self.fields.items())
        )

    def read(self, gpu: Gpu) -> dict[str, int | float]:
        """Name -> raw value (sentinels dropped) for every reading the card gave this cycle."""
        # Per GPU: the names still asked through the batch (all of them until the first answer).
        asking: dict[str, int] = gpu.remember(
            self._key, lambda: {n: f.field_id for n, f in self.fields.items()}
        )
        out: dict[str, int | float] = {}
        refused: list[str] = []
        if asking:
            names = list(asking)
            values = gpu.query(pynvml.nvmlDeviceGetFieldValues, [asking[n] for n in names])
            if values is None:
                refused = names
            else:
                for name, fv in zip(names, values, strict=False):
                    code = fv.nvmlReturn
                    if code == pynvml.NVML_SUCCESS:
                        value = field_value(fv)
                        if value is not None:
                            out[name] = value
                    elif code == pynvml.NVML_ERROR_GPU_IS_LOST:
                        gpu.mark_lost(str(pynvml.NVMLError(code)))
                        raise GpuLost(gpu)
                    elif code in MISSING_CODES:
                        refused.append(name)
            for name in refused:
                asking.pop(name, None)
                log.debug(
                    "GPU %d: field %s (%d) unavailable; leaving it out",
                    gpu.index,
                    name,
                    self.fields[name].field_id,
                )
        for name, spec in self.fields.items():
            if name in out or name in asking or spec.fallback is None:
                continue
            value = valid(poll(gpu, spec.fallback, *spec.fallback_args))
            if value is not None:
                out[name] = value
        return out
