"""health: XID events, ECC counters, retired pages, remapped rows and lost GPUs (gpu_health)."""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import pynvml

import gpuagent
from gpuagent.gpu import MISSING_CODES, Gpu, GpuLost

log = logging.getLogger("gpuagent.collector.health")

# Short descriptions of the common XIDs (NVIDIA's XID catalogue has the full list and the actions).
XID_DESCRIPTIONS = {
    8: "GPU stopped processing (driver timeout)",
    13: "Graphics engine exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    38: "Driver firmware error",
    43: "GPU stopped processing (application fault)",
    44: "Graphics engine fault during context switch",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double-bit ECC error",
    54: "Auxiliary power is not connected",
    56: "Display engine error",
    57: "Error programming video memory interface",
    58: "Unstable video memory interface detected",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapping recording failure",
    68: "NVDEC0 exception",
    69: "Graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    121: "C2C link corrected error",
    140: "Unrecovered ECC error",
}

NO_INSTANCE = pynvml.NVML_GPU_INSTANCE_ID_ANY  # 0xFFFFFFFF: the event is not tied to a MIG instance


def xid_description(xid: int) -> str:
    return XID_DESCRIPTIONS.get(xid, "Unlisted XID (see NVIDIA's XID catalogue)")


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


class XidWatcher:
    """Waits on an NVML event set for critical XID errors, in its own thread.

    Each wait is short (``poll_s``) so that ``stop()`` returns promptly.
    Events queue up until the collector drains them on its next run; the
    drain first takes any event still waiting in the set, so an XID that
    happened before a run is in that run whatever the thread was doing.
    """

    def __init__(self, gpus: list[Gpu], poll_s: float = 0.5):
        self.poll_ms = max(1, int(poll_s * 1000))
        self.events: deque[XidEvent] = deque(maxlen=10_000)
        self.registered: list[Gpu] = []
        self._gpus = list(gpus)
        self._by_address: dict[int, Gpu] = {}
        self._event_set: Any = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Register every GPU that offers XID events; False when none does (no thread then)."""
        try:
            self._event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            log.warning("XID events unavailable: nvmlEventSetCreate failed: %s", exc)
            return False
        for gpu in self._gpus:
            if gpu.lost:
                continue
            try:
                supported = gpu.query(pynvml.nvmlDeviceGetSupportedEventTypes)
                if supported is not None and not supported & pynvml.nvmlEventTypeXidCriticalError:
                    continue
                # Called directly: it returns None on success, which gpu.query cannot tell from NOT_SUPPORTED.
                pynvml.nvmlDeviceRegisterEvents(gpu.handle, pynvml.nvmlEventTypeXidCriticalError, self._event_set)
            except GpuLost:
                continue
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_GPU_IS_LOST:
                    gpu.mark_lost(str(exc))
                elif exc.value in MISSING_CODES:
                    log.debug("GPU %d: no XID events (%s)", gpu.index, exc)
                else:
                    log.warning("GPU %d: cannot watch XID events: %s", gpu.index, exc)
                continue
            self.registered.append(gpu)
            address = handle_address(gpu.handle)
            if address is not None:
                self._by_address[address] = gpu
        if not self.registered:
            self._free()
            return False
        self._thread = threading.Thread(target=self._run, name="health-xid-events", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        poll_s = self.poll_ms / 1000
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, self.poll_ms)
            except pynvml.NVMLError_Timeout:
                # A wait that times out at once (a driver that does not block) must not spin.
                self._stop.wait(max(0.0, poll_s - (time.monotonic() - started)))
                continue
            except pynvml.NVMLError as exc:
                # e.g. GPU_IS_LOST for a GPU in the set: keep watching the others, without spinning.
                log.debug("nvmlEventSetWait_v2: %s", exc)
                self._stop.wait(poll_s)
                continue
            except Exception:  # never let the thread die silently
                log.exception("XID event thread: unexpected error")
                self._stop.wait(poll_s)
                continue
            with self._lock:
                self._record(data)

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


class HealthCollector(gpuagent.Collector):
    """XID events (as they happen), ECC, page retirement, row remapping, and lost GPUs."""

    name = "health"
    requires_gpus = True

    class Config(gpuagent.CollectorConfig):
        # Watch XID events in a background thread.
        xid_events: bool = True
        # Longest single wait on the NVML event set: bounds how long close() takes.
        event_wait: gpuagent.Duration = 0.5

    def __init__(self, config, context):
        super().__init__(config, context)
        self._watcher: XidWatcher | None = None
        self._watcher_started = False
        self._start_lock = threading.Lock()
        self._reported_lost: set[str] = set()
        self._xid_counts: dict[str, int] = {}

    def _ensure_watcher(self) -> None:
        if not self.config.xid_events or self._watcher_started:
            return
        with self._start_lock:
            if self._watcher_started:
                return
            self._watcher_started = True
            watcher = XidWatcher(self.gpus, poll_s=self.config.event_wait)
            if watcher.start():
                self._watcher = watcher

    def collect(self, acc: gpuagent.Accumulator) -> None:
        self._ensure_watcher()
        if self._watcher is not None:
            for event in self._watcher.drain():
                self._add_xid(acc, event)
        newly_lost = []
        for gpu in self.context.gpus:
            if not gpu.lost:
                try:
                    self.collect_gpu(acc, gpu)
                    continue
                except GpuLost:
                    pass
            if gpu.uuid not in self._reported_lost:
                self._reported_lost.add(gpu.uuid)
                acc.add_fields("gpu_health", {"lost": True, "lost_reason": gpu.lost_reason or None}, tags=gpu.tags)
                newly_lost.append(gpu)
        if newly_lost:
            raise GpuLostError(
                "; ".join(f"GPU {g.index} ({g.uuid}) is lost: {g.lost_reason or 'GPU_IS_LOST'}" for g in newly_lost)
                + "; skipping it from now on"
            )

    def _add_xid(self, acc: gpuagent.Accumulator, event: XidEvent) -> None:
        gpu = event.gpu
        self._xid_counts[gpu.uuid] = self._xid_counts.get(gpu.uuid, 0) + 1
        tags = {**gpu.tags, "gi_id": event.gpu_instance_id, "ci_id": event.compute_instance_id}
        acc.add_fields(
            "gpu_health",
            {"xid": event.xid, "xid_description": xid_description(event.xid)},
            tags=tags,
            time_ns=event.time_ns,
        )

    def collect_gpu(self, acc: gpuagent.Accumulator, gpu: Gpu) -> None:
        fields: dict[str, Any] = {"lost": False}
        ecc = gpu.query(pynvml.nvmlDeviceGetEccMode)
        if ecc is not None:
            fields["ecc_enabled"] = bool(ecc[0])
            fields["ecc_pending_enabled"] = bool(ecc[1])
        if ecc is None or ecc[0]:
            for error_name, error_type in (
                ("corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                ("uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            ):
                for counter_name, counter in (
                    ("volatile", pynvml.NVML_VOLATILE_ECC),
                    ("aggregate", pynvml.NVML_AGGREGATE_ECC),
                ):
                    fields[f"ecc_{error_name}_{counter_name}_total"] = gpu.query(
                        pynvml.nvmlDeviceGetTotalEccErrors, error_type, counter
                    )
        sbe = gpu.query(
            pynvml.nvmlDeviceGetRetiredPages, pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
        )
        dbe = gpu.query(pynvml.nvmlDeviceGetRetiredPages, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pending = gpu.query(pynvml.nvmlDeviceGetRetiredPagesPendingStatus)
        fields["retired_pages_sbe"] = len(sbe) if sbe is not None else None
        fields["retired_pages_dbe"] = len(dbe) if dbe is not None else None
        fields["retired_pages_pending"] = bool(pending) if pending is not None else None
        rows = gpu.query(pynvml.nvmlDeviceGetRemappedRows)
        if rows is not None:
            correctable, uncorrectable, rows_pending, failure = rows
            fields["remapped_rows_correctable"] = int(correctable)
            fields["remapped_rows_uncorrectable"] = int(uncorrectable)
            fields["remapped_rows_pending"] = bool(rows_pending)
            fields["remapped_rows_failure"] = bool(failure)
        if self._watcher is not None and gpu in self._watcher.registered:
            fields["xid_events_total"] = self._xid_counts.get(gpu.uuid, 0)
        acc.add_fields("gpu_health", fields, tags=gpu.tags)

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None


@gpuagent.hookimpl
def gpuagent_register_collectors(register):
    register(HealthCollector)
