"""One GPU as collectors see it: identity tags, cached static facts, and the NVML error policy.

Every NVML read of the agent, built-in or third-party, goes through ``Gpu.query``
(``static``, ``nvml_read.poll_first``/``FieldReader``, the facts of
`inspect` and the MIG/vGPU adapters all call it). One policy, by return code:

- GPU_IS_LOST: the GPU is marked lost and ``GpuLost`` is raised (the lost-GPU path).
- A permanent refusal (NOT_SUPPORTED, DEPRECATED, FUNCTION_NOT_FOUND,
  NO_PERMISSION, ARGUMENT_VERSION_MISMATCH): None, and that call (with those
  arguments) is not asked again on this GPU by the collector that met it:
  support, permissions and the driver's symbols do not change while the
  driver is loaded.
- NOT_FOUND: None (an answer: "no such thing now", e.g. an empty MIG slot); asked
  again next time, not counted.
- Anything else (TIMEOUT, UNKNOWN, NO_DATA, INSUFFICIENT_RESOURCES,
  INVALID_ARGUMENT, a code nobody planned for): None this time, asked again
  next time.

Every refusal is counted in ``NvmlErrors`` (by collector, call and code; the
scheduler writes them into the agent's ``gpuagent`` measurement) and logged
once per (GPU, call, code). No NVML error ever propagates out of ``query``.
"""

from __future__ import annotations

import contextvars
import ctypes
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

log = logging.getLogger("gpuagent.gpus.gpu")

ARCH_NAMES = {
    pynvml.NVML_DEVICE_ARCH_KEPLER: "Kepler",
    pynvml.NVML_DEVICE_ARCH_MAXWELL: "Maxwell",
    pynvml.NVML_DEVICE_ARCH_PASCAL: "Pascal",
    pynvml.NVML_DEVICE_ARCH_VOLTA: "Volta",
    pynvml.NVML_DEVICE_ARCH_TURING: "Turing",
    pynvml.NVML_DEVICE_ARCH_AMPERE: "Ampere",
    pynvml.NVML_DEVICE_ARCH_ADA: "Ada Lovelace",
    pynvml.NVML_DEVICE_ARCH_HOPPER: "Hopper",
    pynvml.NVML_DEVICE_ARCH_BLACKWELL: "Blackwell",
}

# The card, the driver or the caller's privileges do not offer the call: it is not asked again.
PERMANENT_CODES = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_DEPRECATED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    }
)
# An answer, not a refusal: the object asked for does not exist now (an empty MIG slot).
ABSENT_CODES = frozenset({pynvml.NVML_ERROR_NOT_FOUND})
# Answers that end a probe (a link or profile index past the card's last): not refusals.
PROBE_END_CODES = frozenset({pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_NOT_FOUND})

# Refusals a GPU remembers at most: a call whose arguments change every cycle cannot grow it for ever.
MAX_REFUSED = 4096

# The collector whose run is calling NVML (set by the scheduler in each collector's thread).
current_collector: contextvars.ContextVar[str | None] = contextvars.ContextVar("gpuagent_collector", default=None)
OUTSIDE_COLLECTORS = "agent"  # the collector tag of calls made outside any collector's run


class _CallCount(threading.local):
    """NVML calls made through ``Gpu.query`` in this thread (a field-values batch is one call);
    the scheduler reads it around each collector run for the agent's own cost."""

    n = 0


calls_made = _CallCount()

_UNSET = object()


def error_name(code: int) -> str:
    """NVML_ERROR_NO_PERMISSION -> "NO_PERMISSION"; an unknown code -> its number."""
    return _ERROR_NAMES.get(code, str(code))


_ERROR_NAMES = {
    value: name.removeprefix("NVML_ERROR_")
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}


_NONE_QUIET: frozenset[int] = frozenset()  # query's: every refusal counted (one set, not one a call)


def permanent(code: int) -> bool:
    return code in PERMANENT_CODES


def call_name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or repr(fn)


@dataclass
class ErrorCount:
    count: int = 0
    gpus: set[int] = field(default_factory=set)


class NvmlErrors:
    """Refusals counted by (collector, call, code); one per NVML session, shared by its GPUs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str, int], ErrorCount] = {}

    def add(self, call: str, code: int, gpu_index: int | None) -> None:
        key = (current_collector.get() or OUTSIDE_COLLECTORS, call, code)
        with self._lock:
            entry = self._counts.get(key)
            if entry is None:
                entry = self._counts[key] = ErrorCount()
            entry.count += 1
            if gpu_index is not None:
                entry.gpus.add(gpu_index)

    def snapshot(self) -> list[tuple[str, str, int, int, int]]:
        """(collector, call, code, times answered, GPUs that answered it), sorted."""
        with self._lock:
            return sorted((*k, e.count, len(e.gpus)) for k, e in self._counts.items())

    def points_fields(self) -> list[tuple[dict[str, str], dict[str, Any]]]:
        """(tags, fields) of each count, as the scheduler writes them into `gpuagent`."""
        return [
            (
                {"collector": collector, "nvml_call": call, "nvml_error": error_name(code)},
                {
                    "nvml_errors_total": count,
                    "nvml_error_code": code,
                    "nvml_error_gpus": gpus,
                    "nvml_error_permanent": permanent(code),
                },
            )
            for collector, call, code, count, gpus in self.snapshot()
        ]


class GpuLost(Exception):
    """The GPU answered NVML_ERROR_GPU_IS_LOST; it is skipped from now on."""

    def __init__(self, gpu: Gpu):
        super().__init__(f"GPU {gpu.index} ({gpu.uuid}) is lost")
        self.gpu = gpu


def as_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _args_key(args: tuple) -> tuple:
    """The arguments of a call as part of a refusal's key (plain ints, the common case, as they are)."""
    for value in args:
        if type(value) is not int:
            return tuple(_arg_key(v) for v in args)
    return args


def _arg_key(value: Any) -> Any:
    """An argument as part of a refusal's key: by value, a handle by its address."""
    if value is None or isinstance(value, int | float | str | bytes | bool):
        return value
    if isinstance(value, list | tuple):
        return tuple(_arg_key(v) for v in value)
    if isinstance(value, ctypes._Pointer | ctypes.c_void_p):
        return ("ptr", ctypes.cast(value, ctypes.c_void_p).value)
    if isinstance(value, ctypes._SimpleCData):
        return _arg_key(value.value)
    return ("type", type(value).__name__)


# A GPU lost again within RELAPSE_WINDOW_S of coming back is flapping: before it is taken
# back again it must answer for HOLD_S, doubled at each relapse up to HOLD_MAX_S.
RELAPSE_WINDOW_S = 60.0
HOLD_S = 10.0
HOLD_MAX_S = 600.0


class Gpu:
    """A GPU on this machine (real or simulated; nothing here knows which)."""

    def __init__(self, index: int, handle: Any, errors: NvmlErrors | None = None):
        self.index = index
        self.handle = handle
        self.lost = False
        self.lost_reason = ""
        self._still_lost: Callable[[Any], bool] | None = None  # asks again what answered GPU_IS_LOST
        # Flapping (see try_recover): when it last came back, relapses in a row, answering since.
        self._recovered_at: float | None = None
        self._relapses = 0
        self._answering_since: float | None = None
        self.errors = errors if errors is not None else NvmlErrors()
        self._static: dict[str, Any] = {}
        # (collector, call, args) -> code of the calls this GPU refused for good; (call, code) logged.
        self._refused: dict[tuple[str | None, str, tuple], int] = {}
        self._refused_calls: set[str] = set()  # the call names in _refused: most calls skip the key
        self._logged: set[tuple[str, int]] = set()
        self.transient_errors = 0  # transient refusals so far: ``remember`` does not cache across one
        # Identity: these raise (the caller reports the GPU as unavailable), unlike every later read.
        self.uuid = as_str(pynvml.nvmlDeviceGetUUID(handle))
        self.name = as_str(pynvml.nvmlDeviceGetName(handle))
        self.pci_bus_id = as_str(pynvml.nvmlDeviceGetPciInfo_v3(handle).busId)
        arch = self.query(pynvml.nvmlDeviceGetArchitecture)
        self.arch = ARCH_NAMES.get(arch, "unknown") if arch is not None else "unknown"
        self.tags: dict[str, str] = {
            "gpu": str(index),
            "uuid": self.uuid,
            "model": self.name,
            "pci_bus_id": self.pci_bus_id,
            "arch": self.arch,
        }

    def __repr__(self) -> str:
        return f"<Gpu {self.index} {self.name} {self.pci_bus_id}{' LOST' if self.lost else ''}>"

    # -- the one way to call NVML ------------------------------------------------------------

    def query(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(handle, *args)``, or None when NVML refuses it (see the module's policy).

        Raises GpuLost (and marks the GPU lost) on GPU_IS_LOST; never raises an NVML error.
        """
        # _call's steps written out (a collector makes some 200 of these a cycle: two calls fewer each).
        if self.lost:
            raise GpuLost(self)
        name = getattr(fn, "__name__", None) or repr(fn)
        if name in self._refused_calls and (current_collector.get(), name, _args_key(args)) in self._refused:
            return None
        calls_made.n += 1
        try:
            return fn(self.handle, *args)
        except pynvml.NVMLError as exc:
            self._refusal(fn, args, name, exc, _NONE_QUIET)
            return None

    def probe(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``query`` for loops that look for the end of a range (NVLink links, MIG profiles):
        INVALID_ARGUMENT and NOT_FOUND are the answer "no such index", not refusals."""
        return self._call(fn, args, quiet=PROBE_END_CODES)

    def refused(self, fn: Callable[..., Any] | str, *args: Any) -> bool:
        """Whether this GPU refused ``fn`` with these arguments for good (it is not asked again)."""
        name = fn if isinstance(fn, str) else call_name(fn)
        return (current_collector.get(), name, _args_key(args)) in self._refused

    def _call(self, fn: Callable[..., Any], args: tuple, quiet: frozenset[int]) -> Any:
        if self.lost:
            raise GpuLost(self)
        name = call_name(fn)
        refused = self._refused
        # Per collector: each one that asks meets the refusal once (so it is counted under every
        # collector that reads it, whichever thread asks first), then never asks again.
        if name in self._refused_calls and (current_collector.get(), name, _args_key(args)) in refused:
            return None
        calls_made.n += 1
        try:
            return fn(self.handle, *args)
        except pynvml.NVMLError as exc:
            self._refusal(fn, args, name, exc, quiet)
            return None

    def _refusal(self, fn: Callable[..., Any], args: tuple, name: str, exc: Any, quiet: frozenset[int]) -> None:
        """A refused call: GpuLost on GPU_IS_LOST, else None (counted, kept for good when permanent)."""
        code = exc.value
        if code == pynvml.NVML_ERROR_GPU_IS_LOST:
            self.mark_lost(f"{name}: {exc}", still_lost=functools.partial(_answers_lost, fn, args))
            raise GpuLost(self) from None
        if code in quiet:
            return
        refused = self._refused
        if code in PERMANENT_CODES and len(refused) < MAX_REFUSED:
            refused[(current_collector.get(), name, _args_key(args))] = code
            self._refused_calls.add(name)
        self.note_error(name, code)

    def note_error(self, call: str, code: int) -> None:
        """Count and (once per call and code) log an NVML refusal; for readers that see codes
        without an exception (an entry of a field-values batch)."""
        if code in ABSENT_CODES:
            return
        self.errors.add(call, code, self.index)
        if code not in PERMANENT_CODES:
            self.transient_errors += 1
        if (call, code) in self._logged:
            return
        self._logged.add((call, code))
        text = f"{error_name(code)} ({code})"
        if code in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_DEPRECATED):
            # The card or driver does not offer it (an old call a newer driver retired): no news at
            # every start, once per GPU.
            log.debug("GPU %d: %s: %s; the reading is left out", self.index, call, text)
        elif code in PERMANENT_CODES:
            log.info("GPU %d: %s answered %s; the reading is left out and not asked again", self.index, call, text)
        else:
            log.warning(
                "GPU %d: %s answered %s; the reading is left out this time and asked again "
                "(logged once per GPU, call and code)",
                self.index,
                call,
                text,
            )

    # -- caches --------------------------------------------------------------------------------

    def static(self, key: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``query`` once and cache: for facts that never change (limits, bus width, L2 size).

        A transient refusal is not cached: the fact is asked again next time.
        """
        value = self._static.get(key, _UNSET)
        if value is _UNSET:
            value = self.query(fn, *args)
            if value is not None or self.refused(fn, *args):
                self._static[key] = value
        return value

    def remember(self, key: str, compute: Callable[[], Any]) -> Any:
        """Cache any derived static value under ``key``.

        Not cached when a transient refusal happened while computing it: the fact is
        computed again next time rather than kept incomplete for good. No lock: dict
        reads and writes are atomic, and two collectors racing on a first read both
        compute the same fact; this runs several times per GPU per cycle.
        """
        value = self._static.get(key, _UNSET)
        if value is _UNSET:
            transients = self.transient_errors
            value = compute()
            if self.transient_errors == transients:
                self._static[key] = value
        return value

    def mark_lost(self, reason: str, still_lost: Callable[[Any], bool] | None = None) -> None:
        """``still_lost(handle)``: whether what answered GPU_IS_LOST still does (try_recover asks)."""
        if not self.lost:
            self.lost = True
            self.lost_reason = reason
            self._still_lost = still_lost
            back = self._recovered_at
            relapsed = back is not None and time.monotonic() - back < RELAPSE_WINDOW_S
            since_back = 0.0 if back is None else time.monotonic() - back  # logged when relapsed
            self._relapses = self._relapses + 1 if relapsed else 0
            self._answering_since = None
            if relapsed:
                log.error(
                    "GPU %d (%s, %s) is lost again %.0fs after it came back: %s; it must answer for %.0fs "
                    "before it is read again",
                    self.index,
                    self.name,
                    self.uuid,
                    since_back,
                    reason,
                    self._hold_s(),
                )
            else:
                log.error(
                    "GPU %d (%s, %s) is lost: %s; skipping it from now on", self.index, self.name, self.uuid, reason
                )

    def _hold_s(self) -> float:
        relapses = self._relapses
        return min(HOLD_MAX_S, HOLD_S * 2 ** (relapses - 1)) if relapses else 0.0

    def try_recover(self) -> bool:
        """A lost GPU that answers again (after a reset) is taken back; True when it is live.

        The GPU is looked up afresh (by UUID when known, else by index) and must be the same GPU;
        it then gets a new handle and empty caches (a reset may change what it supports), keeping
        this object so every collector holding it sees it come back. The call that answered
        GPU_IS_LOST is asked again first: a GPU whose identity answers but that one call keeps
        answering LOST stays lost (else it would flap lost/recovered, an ERROR and a WARNING a cycle);
        one that flaps all the same must answer for a while first (HOLD_S, doubling).
        """
        if not self.lost:
            return True
        try:
            if self.uuid != "unknown":
                handle = pynvml.nvmlDeviceGetHandleByUUID(self.uuid.encode())
            else:
                handle = pynvml.nvmlDeviceGetHandleByIndex(self.index)
            fresh = Gpu(self.index, handle, self.errors)
        except pynvml.NVMLError:
            self._answering_since = None
            return False
        if self.uuid not in ("unknown", fresh.uuid):
            return False
        if self._still_lost is not None and self._still_lost(handle):
            self._answering_since = None
            return False
        now = time.monotonic()
        hold = self._hold_s()
        if hold:
            since = self._answering_since
            if since is None:
                self._answering_since = since = now
            if now - since < hold:
                return False
        relapses = self._relapses
        self.__dict__.update(fresh.__dict__)
        self._recovered_at, self._relapses = now, relapses
        log.warning("GPU %d (%s, %s) answers again; reading it again", self.index, self.name, self.uuid)
        return True


def lost_at_start(index: int, reason: str, errors: NvmlErrors | None = None) -> Gpu:
    """A GPU that NVML lists but that is already lost: kept so it is reported, never read."""
    gpu = Gpu.__new__(Gpu)
    gpu.index, gpu.handle = index, None
    gpu.lost, gpu.lost_reason, gpu._still_lost = True, reason, None
    gpu._recovered_at, gpu._relapses, gpu._answering_since = None, 0, None
    gpu.errors = errors if errors is not None else NvmlErrors()
    gpu._static, gpu._refused, gpu._logged = {}, {}, set()
    gpu._refused_calls = set()
    gpu.transient_errors = 0
    gpu.uuid = gpu.name = gpu.pci_bus_id = gpu.arch = "unknown"
    gpu.tags = {
        "gpu": str(index),
        "uuid": "unknown",
        "model": "unknown",
        "pci_bus_id": "unknown",
        "arch": "unknown",
    }
    log.error("GPU %d is lost: %s; skipping it", index, reason)
    return gpu


def _answers_lost(fn: Callable[..., Any], args: tuple, handle: Any) -> bool:
    try:
        fn(handle, *args)
    except pynvml.NVMLError as exc:
        return exc.value == pynvml.NVML_ERROR_GPU_IS_LOST
    return False


@dataclass
class UnavailableGpu:
    """A GPU NVML lists but that cannot be opened (its handle or identity refused): reported, never read."""

    index: int
    reason: str
    uuid: str = "unknown"
    name: str = "unknown"
    pci_bus_id: str = "unknown"

    @property
    def tags(self) -> dict[str, str]:
        return {"gpu": str(self.index), "uuid": self.uuid, "model": self.name, "pci_bus_id": self.pci_bus_id}
