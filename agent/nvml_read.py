"""Per-cycle NVML reads for collectors: sentinels, calls a card refuses, field-value batches.

- ``valid``: NVML's "not available" values (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF,
  and 0 where 0 cannot be a real reading) become None, so no sentinel number
  ever reaches a field.
- ``poll``: ``gpu.query`` under its older name (the error policy lives in
  ``Gpu.query``: a call refused for good is not asked again, see gpuagent.gpu).
- ``poll_first``: the first of several spellings of one call that answers.
- ``FieldReader``: several readings in one nvmlDeviceGetFieldValues call. The
  first read asks for every field; each entry follows ``Gpu.query``'s policy
  (refused for good: dropped from later reads; transient: missing this cycle),
  and a reading whose field is refused may fall back to its own call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pynvml

from gpuagent.gpu import PERMANENT_CODES, Gpu, GpuLost

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
    """``gpu.query(fn, *args)``: the same policy (a permanently refused call is not asked again).

    Kept as a name of its own because collectors use it; it is ``query`` since the policy moved there.
    """
    return gpu.query(fn, *args)


def poll_first(gpu: Gpu, names: tuple[str, ...], *args: Any) -> Any:
    """The reading from the first of several spellings of one NVML call that pynvml has and the
    card answers, newest first. By name: the deprecated spellings leave pynvml with CUDA 14."""
    for name in names:
        fn = getattr(pynvml, name, None)
        if fn is not None:
            value = gpu.query(fn, *args)
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


FIELD_NAMES = {
    value: name
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_FI_") and isinstance(value, int) and name != "NVML_FI_MAX"
}


def field_call(field_id: int) -> str:
    """The call name an entry of a field-values batch is counted under."""
    return f"nvmlDeviceGetFieldValues/{FIELD_NAMES.get(field_id, field_id)}"


class FieldReader:
    """Readings by name through one nvmlDeviceGetFieldValues call per GPU per cycle.

    Each entry of the batch follows the policy of ``Gpu.query``: an entry the card refuses for
    good is dropped from later batches, a transient one is missing this cycle only; both are
    counted under ``nvmlDeviceGetFieldValues/<field>``. A refused entry (or a refused batch)
    falls back to the reading's own call where it has one.
    """

    def __init__(self, fields: Mapping[str, Field]):
        self.fields = dict(fields)
        self._key = "nvml_read.fields:" + ",".join(
            f"{n}={f.field_id}" for n, f in sorted(self.fields.items())
        )

    def read(self, gpu: Gpu) -> dict[str, int | float]:
        """Name -> raw value (sentinels dropped) for every reading the card gave this cycle."""
        # Per GPU: the names still asked through the batch (all of them until refused for good).
        asking: dict[str, int] = gpu.remember(
            self._key, lambda: {n: f.field_id for n, f in self.fields.items()}
        )
        out: dict[str, int | float] = {}
        not_read: set[str] = set()  # asked in the batch, not answered this cycle: try the fallback
        if asking:
            names = list(asking)
            ids = [asking[n] for n in names]
            values = gpu.query(pynvml.nvmlDeviceGetFieldValues, ids)
            if values is None:
                if gpu.refused(pynvml.nvmlDeviceGetFieldValues, ids):
                    for name in names:
                        asking.pop(name, None)
                not_read.update(names)
            else:
                for name, fv in zip(names, values, strict=False):
                    code = fv.nvmlReturn
                    if code == pynvml.NVML_SUCCESS:
                        value = field_value(fv)
                        if value is not None:
                            out[name] = value
                        continue
                    if code == pynvml.NVML_ERROR_GPU_IS_LOST:
                        gpu.mark_lost(f"nvmlDeviceGetFieldValues: {pynvml.NVMLError(code)}")
                        raise GpuLost(gpu)
                    if code in PERMANENT_CODES:
                        asking.pop(name, None)
                    gpu.note_error(field_call(self.fields[name].field_id), code)
                    not_read.add(name)
        for name, spec in self.fields.items():
            if name in out or spec.fallback is None or (name in asking and name not in not_read):
                continue
            value = valid(gpu.query(spec.fallback, *spec.fallback_args))
            if value is not None:
                out[name] = value
        return out
