"""health: XID events, ECC, retired pages, remapped rows, error counters, fabric state, lost GPUs,
and per GPU a verdict an operator can act on (gpu_health).

The rules are in verdict.py and the README's rule table; the XID catalogue is data (xid_catalog.json).
"""

from __future__ import annotations

import ctypes
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic
import pynvml

import gpuagent
from gpuagent.gpus.gpu import ABSENT_CODES, PERMANENT_CODES, Gpu, GpuLost
from gpuagent.gpus.nvml_read import (
    CYCLE,
    Field,
    FieldReader,
    due,
    field_value,
    latest_thermal_margin,
    thermal_margin,
)
from gpuagent.plugins.health.catalog import LOST_XID, SEVERITY, load_catalog
from gpuagent.plugins.health.inventory import AT_FIRST_START, expected_count, inventory_fields
from gpuagent.plugins.health.levels import Level, reaches
from gpuagent.plugins.health.schema import SCHEMA
from gpuagent.plugins.health.slurm_drain import SlurmDrain
from gpuagent.plugins.health.verdict import (
    CounterWindow,
    Finding,
    LinkCounters,
    clock_text,
    decide,
    fabric_findings,
    growth_finding,
    memory_findings,
    recovery_finding,
    window_text,
    xid_finding,
)
from gpuagent.schema.measurements import GPU_ACTION, GPU_HEALTH, GPU_INVENTORY
from gpuagent.service.timebase import monotonic_clock

log = logging.getLogger("gpuagent.collector.health")

# Short descriptions of every XID in NVIDIA's catalogue (xid_catalog.json names the source).
XID_DESCRIPTIONS = {code: entry.meaning for code, entry in load_catalog().entries.items()}

NO_INSTANCE = pynvml.NVML_GPU_INSTANCE_ID_ANY  # 0xFFFFFFFF: the event is not tied to a MIG instance


def xid_description(xid: int) -> str:
    return XID_DESCRIPTIONS.get(xid, f"XID {xid} is not in the catalogue (see NVIDIA's XID catalogue)")


def handle_address(handle: Any) -> int | None:
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


@dataclass(frozen=True)
class XidEvent:
    gpu: Gpu
    xid: int
    gpu_instance_id: int | None
    compute_instance_id: int | None
    time_ns: int
    at: float = 0.0  # on the collector's monotonic clock: for the XID window


UNEXPECTED_LOG_EVERY_S = 60.0


class XidWatcher:
    """Waits on an NVML event set for critical XID errors, in its own thread.

    Each wait is short (``poll_s``) so that ``stop()`` returns promptly.
    Events queue up until the collector drains them on its next run; the
    drain first takes any event still waiting in the set, so an XID that
    happened before a run is in that run whatever the thread was doing.
    """

    def __init__(self, gpus: list[Gpu], poll_s: float = 0.5, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.poll_ms = max(1, int(poll_s * 1000))
        self.events: deque[XidEvent] = deque(maxlen=10_000)
        self.registered: list[Gpu] = []
        self._gpus = list(gpus)
        self._by_address: dict[int, Gpu] = {}
        self._event_set: Any = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.unexpected_total = 0
        self._unexpected_logged: float | None = None
        self._unexpected_counted = 0

    def start(self) -> bool:
        """Register every GPU that offers XID events; False when none does (no thread then)."""
        try:
            self._event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            log.warning("XID events unavailable: nvmlEventSetCreate failed: %s", exc)
            return False
        for gpu in self._gpus:
            self.register(gpu)
        if not self.registered:
            self._free()
            return False
        self._thread = threading.Thread(target=self._run, name="health-xid-events", daemon=True)
        self._thread.start()
        return True

    def register(self, gpu: Gpu) -> bool:
        """Watch ``gpu``'s XIDs (again, for a GPU back after a reset); False when it offers none."""
        if gpu.lost or self._event_set is None:
            return False
        try:
            supported = gpu.query(pynvml.nvmlDeviceGetSupportedEventTypes)
            if supported is not None and not supported & pynvml.nvmlEventTypeXidCriticalError:
                return False
            # Called directly: it returns None on success, which gpu.query cannot tell from NOT_SUPPORTED.
            pynvml.nvmlDeviceRegisterEvents(gpu.handle, pynvml.nvmlEventTypeXidCriticalError, self._event_set)
        except GpuLost:
            return False
        except pynvml.NVMLError as exc:
            if exc.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                gpu.mark_lost(str(exc))
            elif exc.value in PERMANENT_CODES | ABSENT_CODES:
                log.debug("GPU %d: no XID events (%s)", gpu.index, exc)
            else:
                log.warning("GPU %d: cannot watch XID events: %s", gpu.index, exc)
            return False
        if gpu not in self.registered:
            self.registered.append(gpu)
        address = handle_address(gpu.handle)
        if address is not None:
            self._by_address[address] = gpu
        return True

    def _run(self) -> None:
        poll_s = self.poll_ms / 1000
        while not self._stop.is_set():
            try:
                self._wait_once(poll_s)
            except Exception as exc:  # never let the thread die silently, nor flood the log
                self._unexpected(exc)
                self._stop.wait(poll_s)

    def _wait_once(self, poll_s: float) -> None:
        started = time.monotonic()
        try:
            data = pynvml.nvmlEventSetWait_v2(self._event_set, self.poll_ms)
        except pynvml.NVMLError_Timeout:
            # A wait that times out at once (a driver that does not block) must not spin.
            self._stop.wait(max(0.0, poll_s - (time.monotonic() - started)))
            return
        except pynvml.NVMLError as exc:
            # e.g. GPU_IS_LOST for a GPU in the set: keep watching the others, without spinning.
            log.debug("nvmlEventSetWait_v2: %s", exc)
            self._stop.wait(poll_s)
            return
        with self._lock:
            self._record(data)

    def _unexpected(self, exc: Exception) -> None:
        """The first unexpected error with its traceback; then one line a minute with a count
        (the thread retries every poll_s: a lasting fault must not log a traceback each time)."""
        self.unexpected_total += 1
        now = time.monotonic()
        if self._unexpected_logged is None:
            log.exception("XID event thread: unexpected error (further ones are counted and logged once a minute)")
        elif now - self._unexpected_logged >= UNEXPECTED_LOG_EVERY_S:
            log.error(
                "XID event thread: unexpected error: %s: %s (%d since the last line)",
                type(exc).__name__,
                exc,
                self.unexpected_total - self._unexpected_counted,
            )
        else:
            return
        self._unexpected_logged, self._unexpected_counted = now, self.unexpected_total

    def poll(self) -> None:
        """Take every event already waiting, without blocking (so none waits for the thread's next turn)."""
        with self._lock:
            if self._event_set is None:
                return
            for _ in range(1000):
                try:
                    data = pynvml.nvmlEventSetWait_v2(self._event_set, 0)
                except pynvml.NVMLError:
                    return  # TIMEOUT: nothing more waiting
                self._record(data)

    def _record(self, data: Any) -> None:
        if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
            return
        gpu = self._gpu_of(data.device)
        if gpu is None:
            log.warning("XID %d from a device this agent does not know", data.eventData)
            return
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        event = XidEvent(
            gpu=gpu,
            xid=int(data.eventData),
            gpu_instance_id=None if gi == NO_INSTANCE else gi,
            compute_instance_id=None if ci == NO_INSTANCE else ci,
            time_ns=time.time_ns(),
            at=self.clock(),
        )
        log.warning("GPU %d (%s): XID %d: %s", gpu.index, gpu.uuid, event.xid, xid_description(event.xid))
        self.events.append(event)

    def _gpu_of(self, device: Any) -> Gpu | None:
        address = handle_address(device)
        if address is not None and address in self._by_address:
            return self._by_address[address]
        if len(self.registered) == 1:
            return self.registered[0]
        try:  # a handle that is not the one we hold: match by UUID (fails for a GPU gone from the bus)
            uuid = pynvml.nvmlDeviceGetUUID(device)
        except pynvml.NVMLError:
            return None
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        return next((g for g in self.registered if g.uuid == uuid), None)

    def drain(self) -> list[XidEvent]:
        """Every event received so far, oldest first (polling the set first)."""
        self.poll()
        with self._lock:
            out = list(self.events)
            self.events.clear()
        return out

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.poll_ms / 1000 + 2.0)
            if self._thread.is_alive():
                log.warning("XID event thread did not stop within its wait timeout")
                return  # freeing the set under a waiting thread would be unsafe
        self._free()

    def _free(self) -> None:
        with self._lock:
            if self._event_set is not None:
                try:
                    pynvml.nvmlEventSetFree(self._event_set)
                except pynvml.NVMLError:
                    pass
                self._event_set = None


class GpuLostError(RuntimeError):
    """Raised once by the health collector when it reports newly lost GPUs, so the agent counts an error."""


# One nvmlDeviceGetFieldValues call per GPU per run for these (each missing where the driver lacks it).
PCIE_ERROR_FIELDS = {
    "pcie_correctable_errors": pynvml.NVML_FI_DEV_PCIE_COUNT_CORRECTABLE_ERRORS,
    "pcie_naks_received": pynvml.NVML_FI_DEV_PCIE_COUNT_NAKS_RECEIVED,
    "pcie_receiver_errors": pynvml.NVML_FI_DEV_PCIE_COUNT_RECEIVER_ERROR,
    "pcie_bad_tlp": pynvml.NVML_FI_DEV_PCIE_COUNT_BAD_TLP,
    "pcie_naks_sent": pynvml.NVML_FI_DEV_PCIE_COUNT_NAKS_SENT,
    "pcie_bad_dllp": pynvml.NVML_FI_DEV_PCIE_COUNT_BAD_DLLP,
    "pcie_non_fatal_errors": pynvml.NVML_FI_DEV_PCIE_COUNT_NON_FATAL_ERROR,
    "pcie_fatal_errors": pynvml.NVML_FI_DEV_PCIE_COUNT_FATAL_ERROR,
    "pcie_unsupported_requests": pynvml.NVML_FI_DEV_PCIE_COUNT_UNSUPPORTED_REQ,
    "pcie_lcrc_errors": pynvml.NVML_FI_DEV_PCIE_COUNT_LCRC_ERROR,
    "pcie_lane_errors": pynvml.NVML_FI_DEV_PCIE_COUNT_LANE_ERROR,
}
_C, _U = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
_VOL, _AGG = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC
# ECC totals by field id, each falling back to nvmlDeviceGetTotalEccErrors where the driver
# lacks the field (nvml.h: SBE = corrected, DBE = uncorrected).
ECC_TOTAL_FIELDS = {
    "ecc_corrected_volatile_total": Field(
        pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, pynvml.nvmlDeviceGetTotalEccErrors, (_C, _VOL)
    ),
    "ecc_corrected_aggregate_total": Field(
        pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL, pynvml.nvmlDeviceGetTotalEccErrors, (_C, _AGG)
    ),
    "ecc_uncorrected_volatile_total": Field(
        pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL, pynvml.nvmlDeviceGetTotalEccErrors, (_U, _VOL)
    ),
    "ecc_uncorrected_aggregate_total": Field(
        pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL, pynvml.nvmlDeviceGetTotalEccErrors, (_U, _AGG)
    ),
}
# nvmlDeviceGetRemappedRows' four numbers by field id (the call is the fallback, all four at once).
REMAP_FIELDS = {
    "remapped_rows_correctable": pynvml.NVML_FI_DEV_REMAPPED_COR,
    "remapped_rows_uncorrectable": pynvml.NVML_FI_DEV_REMAPPED_UNC,
    "remapped_rows_pending": pynvml.NVML_FI_DEV_REMAPPED_PENDING,
    "remapped_rows_failure": pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
}
# Everything health reads that has a field id, in the cycle's one field-values call per GPU
# (shared with power, clocks and pcie: gpuagent.gpus.nvml_read.CYCLE).
HEALTH_FIELDS = FieldReader(
    {
        "ecc_current": Field(pynvml.NVML_FI_DEV_ECC_CURRENT),
        "ecc_pending": Field(pynvml.NVML_FI_DEV_ECC_PENDING),
        **ECC_TOTAL_FIELDS,
        **{name: Field(fid) for name, fid in REMAP_FIELDS.items()},
        "recovery_action": Field(pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
        "pcie_replays": Field(pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER, pynvml.nvmlDeviceGetPcieReplayCounter),
        **{name: Field(fid) for name, fid in PCIE_ERROR_FIELDS.items()},
    },
    group=CYCLE,
)
# Per-link NVLink data-link error counters (scopeId = link), and their field names here.
NVLINK_ERROR_FIELDS = {
    "crc": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_CRC,
    "replay": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY,
    "recovery": pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_RECOVERY,
}
HISTOGRAM_BUCKETS = ("max", "high", "partial", "low", "none")
_NVLINK_READERS: dict[int, FieldReader] = {}


def nvlink_error_reader(links: int) -> FieldReader:
    """The reader of every NVLink error counter on each of ``links`` links, named (kind, link) kind
    by kind, in the cycle's one field-values call per GPU (scopeId = link)."""
    reader = _NVLINK_READERS.get(links)
    if reader is None:
        reader = _NVLINK_READERS[links] = FieldReader(
            {
                (kind, link): Field(fid, scope=link)  # type: ignore[misc]  # names are (kind, link), not str
                for kind, fid in NVLINK_ERROR_FIELDS.items()
                for link in range(links)
            },
            group=CYCLE,
        )
    return reader


def fabric_info(handle: Any) -> Any:
    """nvmlDeviceGetGpuFabricInfoV with the v3 struct (health summary), or v2 on an older driver."""
    for struct in (pynvml.c_nvmlGpuFabricInfo_v3_t, pynvml.c_nvmlGpuFabricInfo_v2_t):
        info = struct()
        try:
            pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.byref(info))
        except pynvml.NVMLError as exc:
            if exc.value == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
                continue
            raise
        return info
    return None


fabric_info.__name__ = "nvmlDeviceGetGpuFabricInfoV"  # what its refusals are counted under


@dataclass
class GpuHealth:
    """What the verdict remembers about one GPU between runs."""

    # (at, wall ns, code) inside the XID window; bounded so an XID storm cannot grow it without end
    # (a storm then counts at most this many repeats)
    xids: deque = field(default_factory=lambda: deque(maxlen=10_000))
    expired: list = field(default_factory=list)  # (at, wall ns, code) decayed, said in the reason for a while
    counters: dict = field(default_factory=dict)  # name -> CounterWindow
    lost_since_ns: int | None = None
    # (evidence, verdict) of the last run judged while nothing in the verdict moved with time (no
    # XID held or said, no counter window with more than its baseline): the same evidence then
    # gives the same verdict, without the rules' run (they run a GPU a cycle).
    still: tuple | None = None


class HealthCollector(gpuagent.Collector):
    """XID events (as they happen), ECC, memory repair, error counters, fabric state, lost GPUs, and a verdict."""

    name = "health"
    schema = SCHEMA
    requires_gpus = True

    class Config(gpuagent.CollectorConfig):
        # Watch XID events in a background thread.
        xid_events: bool = True
        # Longest single wait on the NVML event set: bounds how long close() takes.
        event_wait: gpuagent.Duration = 0.5
        # How long an XID holds a verdict before it decays (when nothing else holds it).
        xid_window: gpuagent.Duration = 900.0
        # The window error counters' growth is measured over.
        error_window: gpuagent.Duration = 900.0
        # Growth within error_window at or above which the GPU is degraded (0 turns a rule off).
        ecc_uncorrected_errors: int = 1
        pcie_replays: int = 100
        # Degrees of thermal margin (T.Limit; Ada and newer) at or below which the GPU is
        # degraded: it is about to slow down (slowdown lies 2 degC past T.Limit 0 on H100). 0: off.
        thermal_margin_c: int = 3
        pcie_errors: int = 100
        nvlink_crc_errors: int = 100
        nvlink_replay_errors: int = 100
        nvlink_recovery_errors: int = 1
        # How many GPUs this node has: a count, or "at_first_start" (remembered in the state dir).
        # Fewer is a lost-grade finding (gpu_inventory) and fails `gpuagent health`.
        expected_gpus: int | Literal["at_first_start"] | None = None

        @pydantic.field_validator("expected_gpus")
        @classmethod
        def _a_count(cls, value):
            # 0 or less would never find a GPU missing; `config check` says so, not only the start.
            if isinstance(value, int) and not 1 <= value <= 1024:
                raise ValueError(f'expected a count from 1 to 1024 or "{AT_FIRST_START}", got {value}')
            return value

        # `gpuagent health` fails (exit 1) at this level: degraded, drain (drain, reset_required,
        # reboot_required, lost) or lost.
        fail_on: Level = "drain"
        # Drain the Slurm node when a GPU reaches drain_on (opt-in); never resumes it.
        slurm_drain: bool = False
        drain_on: Level = "drain"
        slurm_node: str = ""  # default: this machine's short host name
        scontrol: str = "scontrol"

    def read_gpu(self, gpu: Gpu) -> dict[str, Any]:
        """inspect's one-off: the ECC mode (one call, under gpu_health's field names) and the
        verdict of one read by these rules (no XID watch: a one-off sees no events)."""
        lost = {"verdict": "lost", "reason": "The GPU answers GPU_IS_LOST."}
        if gpu.lost:
            return {"health": lost}
        modes = gpu.query(pynvml.nvmlDeviceGetEccMode)
        ecc = (
            {"ecc_enabled": bool(modes[0]), "ecc_pending_enabled": bool(modes[1])}
            if modes is not None
            else {"ecc_enabled": None, "ecc_pending_enabled": None}
        )
        from gpuagent.context import AgentContext
        from gpuagent.pipeline.accumulator import Accumulator

        one_off = HealthCollector(self.Config(xid_events=False), AgentContext("inspect", gpus=[gpu]))
        acc = Accumulator()
        try:
            one_off.collect_gpu(acc, gpu)  # not collect(): a one-off view never takes a lost GPU back
        except GpuLost:
            return {"health": lost}
        except pynvml.NVMLError as exc:
            log.warning("GPU %d: health read failed: %s; shown as degraded", gpu.index, exc)
            return {
                GPU_HEALTH: ecc,
                "health": {"verdict": "degraded", "reason": f"Health could not be read ({exc})."},
            }
        fields = acc.points[-1].fields
        return {GPU_HEALTH: ecc, "health": {"verdict": fields["verdict"], "reason": fields["verdict_reason"]}}

    def __init__(self, config, context):
        super().__init__(config, context)
        if config.expected_gpus is not None and not isinstance(config.expected_gpus, str) and config.expected_gpus < 1:
            raise ValueError(f'expected_gpus must be at least 1 or "{AT_FIRST_START}", not {config.expected_gpus}')
        unavailable = len(getattr(context.nvml, "unavailable", None) or ())
        self.expected = expected_count(config.expected_gpus, context.state_dir, len(context.gpus) + unavailable)
        self.drainer = (
            SlurmDrain(config.slurm_node or socket.gethostname().split(".")[0], config.scontrol)
            if config.slurm_drain
            else None
        )
        self._watcher: XidWatcher | None = None
        self._watcher_started = False
        self._start_lock = threading.Lock()
        self._reported_lost: set[str] = set()
        self._xid_counts: dict[str, int] = {}
        self._state: dict[int, GpuHealth] = {}
        self._nvlink_refused: set[int] = set()
        self.clock = monotonic_clock()

    def start_watching(self) -> None:
        """Register for XID events now (a run does it too): `gpuagent health` watches before judging."""
        self._ensure_watcher()

    def _ensure_watcher(self) -> None:
        if not self.config.xid_events or self._watcher_started:
            return
        with self._start_lock:
            if self._watcher_started:
                return
            self._watcher_started = True
            watcher = XidWatcher(self.gpus, poll_s=self.config.event_wait, clock=self.clock)
            if watcher.start():
                self._watcher = watcher

    def state(self, gpu: Gpu) -> GpuHealth:
        st = self._state.get(gpu.index)
        if st is None:
            st = self._state[gpu.index] = GpuHealth()
        return st

    def collect(self, acc: gpuagent.Accumulator) -> None:
        self._ensure_watcher()
        if self._watcher is not None:
            for event in self._watcher.drain():
                self._add_xid(acc, event)
        newly_lost = []
        verdicts: list[tuple[int, str, str]] = []  # (gpu index, verdict, reason)
        for gpu in self.context.gpus:
            if gpu.lost and self._recovered(gpu):
                self._reported_lost.discard(gpu.uuid)
            if not gpu.lost:
                try:
                    verdicts.append((gpu.index, *self.collect_gpu(acc, gpu)))
                    continue
                except GpuLost:
                    pass
            first = gpu.uuid not in self._reported_lost
            verdicts.append((gpu.index, "lost", self._add_lost(acc, gpu, first)))
            if first:
                self._reported_lost.add(gpu.uuid)
                newly_lost.append(gpu)
        self._node(acc, verdicts)
        if newly_lost:
            raise GpuLostError(
                "; ".join(f"GPU {g.index} ({g.uuid}) is lost: {g.lost_reason or 'GPU_IS_LOST'}" for g in newly_lost)
                + "; skipping it until it answers again"
            )

    def _node(self, acc: gpuagent.Accumulator, verdicts: list[tuple[int, str, str]]) -> None:
        """The node's findings: GPUs missing against expected_gpus (gpu_inventory), and the drain action."""
        unavailable = len(getattr(self.context.nvml, "unavailable", None) or ())
        present = len(self.context.gpus) + unavailable
        inventory = inventory_fields(self.expected, present)
        if self.expected is not None:
            acc.add_fields(GPU_INVENTORY, inventory, tags={})
        if self.drainer is None:
            return
        level = self.config.drain_on
        worst = sorted((v for v in verdicts if reaches(v[1], level)), key=lambda v: (-SEVERITY[v[1]], v[0]))
        if worst:
            index, verdict, reason = worst[0]
            problem = f"GPU {index} {verdict}: {reason}"
        elif inventory.get("gpus_missing"):
            problem = f"GPU {present} lost: {inventory['reason']}"
        else:
            problem = None
        self.drainer.update(problem)
        acc.add_fields(GPU_ACTION, self.drainer.fields(), tags={"action": "slurm_drain", "node": self.drainer.node})

    def _recovered(self, gpu: Gpu) -> bool:
        """A lost GPU answering again: back to what the evidence says; XIDs before it came back are
        settled by the reset that brought it back."""
        if not gpu.try_recover():
            return False
        st = self.state(gpu)
        st.xids.clear()
        st.counters.clear()  # counters restart after a reset
        st.lost_since_ns = None
        st.still = None
        if self._watcher is not None:
            self._watcher.register(gpu)
        return True

    def _add_lost(self, acc: gpuagent.Accumulator, gpu: Gpu, first: bool) -> str:
        st = self.state(gpu)
        if st.lost_since_ns is None:
            st.lost_since_ns = time.time_ns()
        fell = [wall for _at, wall, code in st.xids if code == LOST_XID]
        reason = f"answers GPU_IS_LOST since {clock_text(st.lost_since_ns)} UTC."
        if fell:
            reason = f"XID 79 (GPU has fallen off the bus) at {clock_text(fell[-1])} UTC; it {reason}"
        else:
            reason = f"The GPU {reason}"
        fields: dict[str, Any] = {"lost": True, "verdict": "lost", "verdict_reason": reason}
        if first:
            fields["lost_reason"] = gpu.lost_reason or None
        acc.add_fields(GPU_HEALTH, fields, tags=gpu.tags)
        return reason

    def _add_xid(self, acc: gpuagent.Accumulator, event: XidEvent) -> None:
        gpu = event.gpu
        self._xid_counts[gpu.uuid] = self._xid_counts.get(gpu.uuid, 0) + 1
        self.state(gpu).xids.append((event.at, event.time_ns, event.xid))
        tags = {**gpu.tags, "gi_id": event.gpu_instance_id, "ci_id": event.compute_instance_id}
        acc.add_fields(
            GPU_HEALTH,
            {"xid": event.xid, "xid_description": xid_description(event.xid)},
            tags=tags,
            time_ns=event.time_ns,
        )

    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: Gpu) -> tuple[str, str]:
        fields: dict[str, Any] = {"lost": False}
        readings = HEALTH_FIELDS.read(gpu)
        if "ecc_current" in readings and "ecc_pending" in readings:
            ecc = (readings["ecc_current"], readings["ecc_pending"])
        else:  # a driver without the ECC mode fields: the call they mirror
            ecc = gpu.query(pynvml.nvmlDeviceGetEccMode)
        if ecc is not None:
            fields["ecc_enabled"] = bool(ecc[0])
            fields["ecc_pending_enabled"] = bool(ecc[1])
        if ecc is None or ecc[0]:
            for name in ECC_TOTAL_FIELDS:
                fields[name] = readings.get(name)
        sbe = gpu.query(
            pynvml.nvmlDeviceGetRetiredPages, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        )
        dbe = gpu.query(pynvml.nvmlDeviceGetRetiredPages, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pending = gpu.query(pynvml.nvmlDeviceGetRetiredPagesPendingStatus)
        fields["retired_pages_sbe"] = len(sbe) if sbe is not None else None
        fields["retired_pages_dbe"] = len(dbe) if dbe is not None else None
        fields["retired_pages_pending"] = bool(pending) if pending is not None else None
        if readings.keys() >= REMAP_FIELDS.keys():  # C-level passes: this runs a GPU a cycle
            rows = tuple(map(readings.__getitem__, REMAP_FIELDS))
        else:  # a driver without the remapping fields: the one call that gives all four
            rows = gpu.query(pynvml.nvmlDeviceGetRemappedRows)
        if rows is not None:
            correctable, uncorrectable, rows_pending, failure = rows
            fields["remapped_rows_correctable"] = int(correctable)
            fields["remapped_rows_uncorrectable"] = int(uncorrectable)
            fields["remapped_rows_pending"] = bool(rows_pending)
            fields["remapped_rows_failure"] = bool(failure)
            # The banks left move only when rows remap: asked every 30 s (nvml_read.due) and on a
            # run whose remapped-row counts changed, not every cycle.
            remapped = gpu.remember("health.remapped_rows", dict)
            if due(gpu, "health.row_remap") or remapped.get("rows") != rows:
                remapped["rows"] = rows
                histogram = gpu.query(pynvml.nvmlDeviceGetRowRemapperHistogram)
                if histogram is not None:
                    for bucket in HISTOGRAM_BUCKETS:
                        fields[f"row_remap_banks_{bucket}"] = int(getattr(histogram, bucket))
        if self._watcher is not None and gpu in self._watcher.registered:
            fields["xid_events_total"] = self._xid_counts.get(gpu.uuid, 0)
        if "recovery_action" in readings:
            fields["recovery_action"] = int(readings["recovery_action"])
        pcie_errors = [int(readings[n]) for n in PCIE_ERROR_FIELDS if n in readings]
        if pcie_errors:
            fields["pcie_errors_total"] = sum(pcie_errors)
        nvlink = self._nvlink_errors(gpu)
        for kind in NVLINK_ERROR_FIELDS:
            if nvlink.get(kind):
                fields[f"nvlink_{kind}_errors_total"] = sum(nvlink[kind].values())
        fabric = gpu.query(fabric_info)
        if fabric is not None and fabric.state != pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
            fields["fabric_state"] = {1: "not_started", 2: "in_progress", 3: "completed"}.get(
                int(fabric.state), str(int(fabric.state))
            )
            fields["fabric_status"] = int(fabric.status)
            fields["fabric_clique_id"] = int(fabric.cliqueId)
            fields["fabric_health_mask"] = int(fabric.healthMask)
        margin = thermal_margin(gpu)  # power reads it too: once a tick it is due (agent/gpus/nvml_read.py)
        if margin is not None:
            fields["thermal_margin_c"] = margin
        verdict, reason = self.verdict(gpu, fields, readings, nvlink, fabric)
        fields["verdict"], fields["verdict_reason"] = verdict, reason
        acc.add_fields(GPU_HEALTH, fields, tags=gpu.tags)
        return verdict, reason

    def _nvlink_errors(self, gpu: Gpu) -> dict[str, dict[int, int]]:
        """kind -> link -> count, from one field-values call (scopeId = link); {} without NVLink."""
        if gpu.index in self._nvlink_refused:
            return {}
        links = gpu.remember("health.nvlink_links", lambda: self._link_count(gpu))
        if not links:
            self._nvlink_refused.add(gpu.index)
            return {}
        counts: dict[Any, Any] = nvlink_error_reader(links).read(gpu)  # (kind, link) -> count
        if set(map(type, counts.values())) != {int}:  # a driver answering another value type
            counts = {name: int(value) for name, value in counts.items()}
        out: dict[str, dict[int, int]] = {}
        if len(counts) == len(NVLINK_ERROR_FIELDS) * links:  # every count answered (the usual run): C-level passes
            values, numbers = list(counts.values()), range(links)
            for i, kind in enumerate(NVLINK_ERROR_FIELDS):
                out[kind] = dict(zip(numbers, values[i * links : (i + 1) * links], strict=True))
        else:
            for (kind, link), value in counts.items():
                out.setdefault(kind, {})[link] = value
        if not out:
            self._nvlink_refused.add(gpu.index)  # the driver has none of them: do not ask again
        return out

    @staticmethod
    def _link_count(gpu: Gpu) -> int:
        values = gpu.query(pynvml.nvmlDeviceGetFieldValues, [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT])
        return int(field_value(values[0]) or 0) if values is not None else 0

    def verdict(self, gpu, fields, readings, nvlink, fabric) -> tuple[str, str]:
        """The rules of the README's table, applied to this run's evidence."""
        st = self.state(gpu)
        get = fields.get
        # Everything the rules read (the counters' values too: a window's baseline moves only
        # when its counter does); the thermal margin as the rules take it below.
        evidence = (
            get("recovery_action"),
            get("remapped_rows_pending"),
            get("remapped_rows_failure"),
            get("retired_pages_pending"),
            get("ecc_uncorrected_volatile_total"),
            readings.get("pcie_replays"),
            get("pcie_errors_total"),
            get("thermal_margin_c", latest_thermal_margin(gpu)),
            None if fabric is None else (fabric.state, fabric.status, fabric.healthMask),
            getattr(fabric, "healthSummary", None),
            nvlink,
        )
        still = st.still
        if still is not None and not st.xids and still[0] == evidence:
            return still[1]
        judged = self._judge(gpu, st, fields, readings, nvlink, fabric)
        moving = st.xids or st.expired or any(c.moving for c in st.counters.values())
        st.still = None if moving else (evidence, judged)
        return judged

    def _judge(self, gpu, st, fields, readings, nvlink, fabric) -> tuple[str, str]:
        cfg, now = self.config, self.clock()
        findings: list[Finding | None] = [recovery_finding(fields.get("recovery_action"))]
        findings += memory_findings(
            fields.get("remapped_rows_pending"),
            fields.get("remapped_rows_failure"),
            fields.get("retired_pages_pending"),
        )
        if fabric is not None:
            findings += fabric_findings(
                int(fabric.state), int(fabric.status), int(fabric.healthMask), getattr(fabric, "healthSummary", None)
            )
        window = cfg.error_window
        counters = st.counters

        def grew(name: Any, value: Any, what: str, threshold: int) -> None:
            if value is None:
                return
            counter = counters.get(name)
            if counter is None:
                counter = counters[name] = CounterWindow()
            findings.append(growth_finding(what, counter.add(now, int(value), window), threshold, window))

        grew(
            "ecc", fields.get("ecc_uncorrected_volatile_total"), "uncorrectable ECC errors", cfg.ecc_uncorrected_errors
        )
        grew("pcie_replays", readings.get("pcie_replays"), "PCIe replays", cfg.pcie_replays)
        grew("pcie_errors", fields.get("pcie_errors_total"), "PCIe errors", cfg.pcie_errors)
        thresholds = {
            "crc": cfg.nvlink_crc_errors,
            "replay": cfg.nvlink_replay_errors,
            "recovery": cfg.nvlink_recovery_errors,
        }
        for kind, links in nvlink.items():
            threshold = thresholds[kind]
            per_link = counters.get(("nvlink", kind))
            if per_link is None:
                per_link = counters[("nvlink", kind)] = LinkCounters()
            for link, growth in per_link.growth(now, links, window).items():  # only links that grew
                findings.append(growth_finding(f"NVLink {kind} errors on link {link}", growth, threshold, window))
        # The latest margin read (it is read every 30 s, the verdict every run: no flapping).
        margin = fields.get("thermal_margin_c", latest_thermal_margin(gpu))
        if cfg.thermal_margin_c and margin is not None and margin <= cfg.thermal_margin_c:
            findings.append(
                Finding(
                    "degraded",
                    f"thermal margin {margin} °C (at most {cfg.thermal_margin_c} °C left before its max operating temperature)",
                )
            )
        findings += self._xid_findings(st, now)
        notes = [
            f"XID {code} at {clock_text(wall)} UTC expired after the {window_text(cfg.xid_window)} window"
            for _at, wall, code in st.expired
        ]
        return decide([f for f in findings if f is not None], notes)

    def _xid_findings(self, st: GpuHealth, now: float) -> list[Finding]:
        window = self.config.xid_window
        while st.xids and st.xids[0][0] <= now - window:
            st.expired.append(st.xids.popleft())
        st.expired = [e for e in st.expired if e[0] > now - 2 * window][-3:]  # said for one more window
        latest: dict[int, tuple[int, int]] = {}  # code -> (count, last wall ns)
        for _at, wall, code in st.xids:
            count, _ = latest.get(code, (0, 0))
            latest[code] = (count + 1, wall)
        if latest:
            st.expired = [e for e in st.expired if e[2] not in latest]
        return [xid_finding(code, count, wall) for code, (count, wall) in latest.items()]

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(HealthCollector)


@gpuagent.hookimpl
def gpuagent_register_commands(cli):
    # `gpuagent health` is this plugin's: with the plugin disabled there is no such command.
    from gpuagent.plugins.health.command import health

    cli.add_command(health)
