"""Per-cycle NVML reads for collectors: sentinels, calls a card refuses, field-value batches.

- ``valid``: NVML's "not available" values (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF,
  and 0 where 0 cannot be a real reading) become None, so no sentinel number
  ever reaches a field.
- ``poll_first``: the first of several spellings of one call that answers.
- ``FieldReader``: several readings in one nvmlDeviceGetFieldValues call. The
  first read asks for every field; each entry follows ``Gpu.query``'s policy
  (refused for good: dropped from later reads; transient: missing this cycle),
  and a reading whose field is refused may fall back to its own call.
- ``FieldGroup``: readers of collectors that run on the same scheduler tick
  (the same interval) share one nvmlDeviceGetFieldValues call per GPU: the
  first of them to read asks for the fields of all, the others take their
  entries from that answer (each entry's errors counted under the collector
  that takes it). Outside a scheduler tick (tests, `inspect`) each reader
  asks for its own fields only.
"""

from __future__ import annotations

import contextvars
import ctypes
import functools
import itertools
import math
import operator
import struct
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pynvml

from gpuagent.gpus.gpu import PERMANENT_CODES, Gpu, GpuLost
from gpuagent.service.timebase import monotonic_clock

NA_UINT = 0xFFFFFFFF
NA_ULONGLONG = 0xFFFFFFFFFFFFFFFF
_SENTINELS = (
    NA_UINT,
    NA_ULONGLONG,
    NA_UINT - 1,
)  # 0xFFFFFFFE: NVML_VALUE_NOT_AVAILABLE in some structs


def valid(value: Any, *, zero: bool = True) -> Any:
    """The reading, or None for NVML's not-available values (and for 0 when ``zero`` is False)."""
    if type(value) is int and 0 < value < NA_UINT - 1:  # the usual reading: below every sentinel
        return value
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


# Plain ctypes attribute access: pynvml's printable-structure hook costs ~1 µs a read (it only
# decodes bytes: a number field reads the same either way). ``raw`` is the collectors' name for it.
_get = raw = ctypes.Structure.__getattribute__
_get_union = ctypes.Union.__getattribute__


def field_value(fv: Any) -> int | float | None:
    """The value of one c_nvmlFieldValue_t, or None when it failed or is a sentinel."""
    if _get(fv, "nvmlReturn") != pynvml.NVML_SUCCESS:
        return None
    member = _DECODE.get(_get(fv, "valueType"))
    if member is None:
        return None
    return member_value(member, _get_union(_get(fv, "value"), member))


def member_value(member: str, value: Any) -> int | float | None:
    """A field value read from the union as ``member``, or None for a not-available value."""
    if member == "dVal":
        return valid(float(value))
    value = int(value)
    if member == "usVal" and value == 0xFFFF:
        return None
    return valid(value)


# A batch is decoded in one pass over its bytes (struct), not five ctypes attribute reads an
# entry: valueType, nvmlReturn and the 8-byte value union sit side by side in c_nvmlFieldValue_t.
_FV = pynvml.c_nvmlFieldValue_t
_PACKED = (
    _FV.nvmlReturn.offset == _FV.valueType.offset + 4
    and _FV.value.offset == _FV.nvmlReturn.offset + 4
    and _FV.value.size == 8
)
_ENTRY = struct.Struct(f"={_FV.valueType.offset}xII8s{ctypes.sizeof(_FV) - _FV.value.offset - 8}x" if _PACKED else "x")
# The struct format of each union member _DECODE names; by valueType, (member, Struct) in a list
# (an index, not a dict look-up).
_FORMATS = {
    "dVal": "=d",
    "uiVal": "=I",
    "ulVal": "=Q" if ctypes.sizeof(ctypes.c_ulong) == 8 else "=I",
    "ullVal": "=Q",
    "sllVal": "=q",
    "siVal": "=i",
    "usVal": "=H",
}
_UNIONS = [(_DECODE[t], struct.Struct(_FORMATS[_DECODE[t]])) if t in _DECODE else None for t in range(max(_DECODE) + 1)]


# The usual batch (every entry answered, every value an unsigned integer, no sentinel) is read
# as 8-byte words: valueType and nvmlReturn share one word (little-endian: type low, code high),
# the value union is the next. A few C-level passes for the whole batch, none per entry.
_WORDS = (
    _PACKED
    and sys.byteorder == "little"
    and ctypes.sizeof(_FV) % 8 == 0
    and _FV.valueType.offset % 8 == 0
    and _FV.value.offset % 8 == 0
)
_STRIDE = ctypes.sizeof(_FV) // 8
_TYPE_WORD, _VALUE_WORD = _FV.valueType.offset // 8, _FV.value.offset // 8
_UINT = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
_UNSIGNED = {_UINT, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG}
if ctypes.sizeof(ctypes.c_ulong) == 8:
    _UNSIGNED.add(pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG)
_SENTINEL_SET = frozenset(_SENTINELS)


def _decode_words(values: Any) -> list[tuple[int, int]] | None:
    """The usual batch's answers, or None when any entry needs the per-entry path."""
    words = memoryview(values).cast("B").cast("Q")
    kinds = words[_TYPE_WORD::_STRIDE].tolist()  # valueType | nvmlReturn << 32
    found = set(kinds)
    if not found <= _UNSIGNED:  # an error code, a signed, short or double value
        return None
    numbers = words[_VALUE_WORD::_STRIDE].tolist()
    if not _SENTINEL_SET.isdisjoint(numbers):
        return None
    # an unsigned int fills the low half of the union: the high half must be the zeroes pynvml
    # allocated, or the per-entry path reads the low half alone
    if _UINT in found and max(itertools.compress(numbers, map(_UINT.__eq__, kinds))) > 0xFFFFFFFF:
        return None
    return list(zip(itertools.repeat(pynvml.NVML_SUCCESS), numbers))


def decode_batch(values: Any) -> list[tuple[int, int | float | None]]:
    """(nvmlReturn, value) for each entry of an nvmlDeviceGetFieldValues answer, in order; the
    value as ``field_value`` gives it (None on an error, an unknown type or a sentinel)."""
    if not _PACKED or not isinstance(values, ctypes.Array):
        return [(_get(fv, "nvmlReturn"), field_value(fv)) for fv in values]
    if _WORDS and len(values):
        answers = _decode_words(values)
        if answers is not None:
            return answers  # type: ignore[return-value]
    out: list[tuple[int, int | float | None]] = []
    append = out.append
    ok, unions, known = pynvml.NVML_SUCCESS, _UNIONS, len(_UNIONS)
    for value_type, code, raw in _ENTRY.iter_unpack(bytes(values)):
        if code != ok:
            append((code, None))
            continue
        decoder = unions[value_type] if value_type < known else None
        if decoder is None:
            append((code, None))
            continue
        member, union = decoder
        append((code, member_value(member, union.unpack_from(raw)[0])))
    return out


@dataclass(frozen=True)
class Field:
    """One reading: its NVML field id (and scope: the NVLink link, for per-link fields), and
    optionally a direct call for cards that refuse the field."""

    field_id: int
    fallback: Callable[..., Any] | None = None
    fallback_args: tuple = ()
    scope: int | None = None

    @property
    def key(self) -> int | tuple[int, int]:
        """How nvmlDeviceGetFieldValues is asked for it: the id, or (id, scope)."""
        return self.field_id if self.scope is None else (self.field_id, self.scope)


FIELD_NAMES = {
    value: name
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_FI_") and isinstance(value, int) and name != "NVML_FI_MAX"
}


def field_call(field_id: int) -> str:
    """The call name an entry of a field-values batch is counted under."""
    return f"nvmlDeviceGetFieldValues/{FIELD_NAMES.get(field_id, field_id)}"


# The scheduler tick the current collector run started on (set by the scheduler in the
# collector's thread): runs started on the same tick share a FieldGroup's batch.
current_tick: contextvars.ContextVar[Any] = contextvars.ContextVar("gpuagent_tick", default=None)

_FAILED = object()  # a group batch NVML refused as a whole
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)  # (nvmlReturn, value), (name, key)
_ALL_OK = {pynvml.NVML_SUCCESS}


class _Batch:
    """One GPU's latest group answer: the tick it was read on, key -> (nvmlReturn, value), who
    took it, the readers that read this GPU (only their fields are asked: a disabled collector's
    are not), and the key list asked (rebuilt only when a reader joins or drops a field)."""

    __slots__ = ("lock", "tick", "entries", "taken", "readers", "keys", "shape")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tick: Any = None
        self.entries: Any = None
        self.taken: set[int] = set()
        self.readers: list[FieldReader] = []
        self.keys: list = []
        self.shape: tuple = ()


class FieldGroup:
    """FieldReaders whose fields are read in one nvmlDeviceGetFieldValues call per GPU per tick."""

    def __init__(self, name: str):
        self.name = name
        self._batches: weakref.WeakKeyDictionary[Gpu, _Batch] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def _batch(self, gpu: Gpu) -> _Batch:
        batch = self._batches.get(gpu)
        if batch is None:
            with self._lock:
                batch = self._batches.setdefault(gpu, _Batch())
        return batch

    def entries(self, gpu: Gpu, reader: FieldReader, tick: Any) -> Any:
        """key -> (nvmlReturn, value) of this tick's batch (read now if ``reader`` already took the
        last one, or it is from another tick), or _FAILED when NVML refused the batch."""
        batch = self._batch(gpu)
        me = id(reader)
        with batch.lock:
            new_reader = reader not in batch.readers
            if new_reader:  # its fields join from now on (its first tick reads once more)
                batch.readers.append(reader)
            if new_reader or batch.tick != tick or me in batch.taken or batch.entries is None:
                # A reader's fields only ever leave (refused for good): equal sizes, same keys.
                askings = [r._asking(gpu) for r in batch.readers]
                shape = tuple(len(a) for a in askings)
                if shape != batch.shape:
                    seen: dict = {}
                    for asking in askings:
                        seen.update(dict.fromkeys(list(asking.values())))  # a copy: another thread may drop one
                    batch.keys, batch.shape = list(seen), shape
                keys = batch.keys
                values = gpu.query(pynvml.nvmlDeviceGetFieldValues, keys) if keys else None
                batch.tick, batch.taken = tick, set()
                batch.entries = _FAILED if values is None else dict(zip(keys, decode_batch(values), strict=False))
            batch.taken.add(me)
            return batch.entries


def _entry_lost(field_id: int, handle) -> bool:
    """Whether field ``field_id`` still answers GPU_IS_LOST (Gpu.try_recover asks before taking it back)."""
    try:
        (entry,) = pynvml.nvmlDeviceGetFieldValues(handle, [field_id])
    except pynvml.NVMLError as exc:
        return exc.value == pynvml.NVML_ERROR_GPU_IS_LOST
    return _get(entry, "nvmlReturn") == pynvml.NVML_ERROR_GPU_IS_LOST


class FieldReader:
    """Readings by name through one nvmlDeviceGetFieldValues call per GPU per cycle.

    Each entry of the batch follows the policy of ``Gpu.query``: an entry the card refuses for
    good is dropped from later batches, a transient one is missing this cycle only; both are
    counted under ``nvmlDeviceGetFieldValues/<field>``. A refused entry (or a refused batch)
    falls back to the reading's own call where it has one. With a ``group``, the batch is
    shared with the group's other readers run on the same scheduler tick (see FieldGroup).
    """

    def __init__(self, fields: Mapping[str, Field], group: FieldGroup | None = None):
        self.fields = dict(fields)
        self.group = group
        self._key = "nvml_read.fields:" + ",".join(
            f"{n}={f.field_id}/{f.scope}" for n, f in sorted(self.fields.items())
        )
        self._fallbacks = [(n, f) for n, f in self.fields.items() if f.fallback is not None]

    def _asking(self, gpu: Gpu) -> dict[str, Any]:
        """Per GPU: name -> batch key of the fields still asked (all of them until refused for good)."""
        return gpu.remember(self._key, lambda: {n: f.key for n, f in self.fields.items()})

    def _take(self, gpu: Gpu, asking: dict, names: list, answers: list, out: dict, not_read: set) -> None:
        """Answers ((nvmlReturn, value), or None: not in the batch) of ``names`` into ``out``;
        the rest follow the policy."""
        if None not in answers and set(map(_FIRST, answers)) == _ALL_OK:
            # Every entry answered (the usual cycle): C-level passes, no Python step per entry.
            values = list(map(_SECOND, answers))
            if None in values:
                out.update([(n, v) for n, v in zip(names, values, strict=True) if v is not None])
            else:
                out.update(zip(names, values, strict=True))
            return
        ok = pynvml.NVML_SUCCESS
        failed = []
        for name, answer in zip(names, answers, strict=True):
            if answer is None:  # not in the group's batch (asked for since): next tick
                not_read.add(name)
            elif answer[0] == ok:
                if answer[1] is not None:
                    out[name] = answer[1]
            else:
                failed.append((name, answer[0]))
        for name, code in failed:
            if code == pynvml.NVML_ERROR_GPU_IS_LOST:
                gpu.mark_lost(
                    f"nvmlDeviceGetFieldValues: {pynvml.NVMLError(code)}",
                    still_lost=functools.partial(_entry_lost, self.fields[name].field_id),
                )
                raise GpuLost(gpu)
            if code in PERMANENT_CODES:
                asking.pop(name, None)
            gpu.note_error(field_call(self.fields[name].field_id), code)
            not_read.add(name)

    def read(self, gpu: Gpu) -> dict[str, int | float]:
        """Name -> raw value (sentinels dropped) for every reading the card gave this cycle."""
        asking = self._asking(gpu)
        out: dict[str, int | float] = {}
        not_read: set[str] = set()  # asked in the batch, not answered this cycle: try the fallback
        if asking:
            tick = current_tick.get() if self.group is not None else None
            if tick is not None:
                entries = self.group.entries(gpu, self, tick)  # type: ignore[union-attr]
                if entries is _FAILED:
                    not_read.update(asking)
                else:
                    items = list(asking.items())  # a copy: another thread may drop a field meanwhile
                    names = list(map(_FIRST, items))
                    answers = list(map(entries.get, map(_SECOND, items)))
                    self._take(gpu, asking, names, answers, out, not_read)
            else:
                names = list(asking)
                batch_keys = [asking[n] for n in names]
                values = gpu.query(pynvml.nvmlDeviceGetFieldValues, batch_keys)
                if values is None:
                    if gpu.refused(pynvml.nvmlDeviceGetFieldValues, batch_keys):
                        for name in names:
                            asking.pop(name, None)
                    not_read.update(names)
                else:
                    self._take(gpu, asking, names, decode_batch(values), out, not_read)
        for name, spec in self._fallbacks:
            if name in out or (name in asking and name not in not_read):
                continue
            assert spec.fallback is not None  # _fallbacks holds only specs with one
            value = valid(gpu.query(spec.fallback, *spec.fallback_args))
            if value is not None:
                out[name] = value
        return out


# Collectors on the default [agent] interval (clocks, power, ...) read their fields in one batch.
CYCLE = FieldGroup("cycle")


# Architectures with T.Limit readings (margin temperature, the *_tlimit thresholds): Ada and newer.
TLIMIT_ARCHS = frozenset({"Ada Lovelace", "Hopper", "Blackwell"})


# Readings added after the cycle's call budget was set (the thermal margin, the video engines'
# utilisation) are asked at most this often per GPU on the scheduler's ticks, not every cycle:
# on a 10 s cycle every third tick, as pcie and nvlink run (issue 42: NVML calls a cycle).
SLOW_READING_S = 30.0


def due(gpu: Gpu, key: str, every_s: float = SLOW_READING_S) -> bool:
    """Whether this tick reads ``key`` on ``gpu``: always outside the scheduler (no tick: inspect,
    a one-off check); else on its first tick, then once ``every_s`` have passed (less a second of
    the scheduler's jitter). Every reader on one tick gets the same answer."""
    tick = current_tick.get()
    if tick is None:
        return True
    state = gpu.remember("due:" + key, dict)
    if state.get("tick") != tick:
        now = monotonic_clock()()
        state["tick"], state["due"] = tick, "at" not in state or now - state["at"] >= every_s - 1.0
        if state["due"]:
            state["at"] = now
    return state["due"]


def thermal_margin(gpu: Gpu) -> int | None:
    """Degrees left before the GPU reaches T.Limit 0 (nvmlDeviceGetMarginTemperature; nvidia-smi's
    "GPU T.Limit Temp"). Negative past the limit; None where the card has no margin (pre-Ada), and
    on the ticks between its reads (``due``: every SLOW_READING_S)."""
    if gpu.arch not in TLIMIT_ARCHS or not hasattr(pynvml, "nvmlDeviceGetMarginTemperature"):
        return None
    # Asked once per scheduler tick it is due on: power and health (its verdict) both read it.
    tick = current_tick.get()
    last = gpu.remember("power.margin", dict)
    if tick is not None and last.get("tick") == tick:
        return last["value"]
    value = None
    if due(gpu, "thermal_margin"):
        margin = gpu.query(pynvml.nvmlDeviceGetMarginTemperature)
        value = last["latest"] = int(margin) if isinstance(margin, int) and -300 < margin < 300 else None
    if tick is not None:
        last.update(tick=tick, value=value)
    return value


def latest_thermal_margin(gpu: Gpu) -> int | None:
    """The margin of thermal_margin's latest read (at most SLOW_READING_S old on the scheduler's
    ticks): what a verdict judges on the ticks between reads."""
    return gpu.remember("power.margin", dict).get("latest")
