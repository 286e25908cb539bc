"""Running processes: the compute, graphics and MPS process lists, per-process utilisation and
accounting statistics.

Compute processes come from the simulated workload (or from ``@proc``: real host processes),
and a MIG device lists only those in its own GPU instance. No workload is graphics or MPS, so
those lists are always empty. All use NVML's two-call pattern (ask for the count, then the array).

A fault forced on one GPU's process lists (``force=nvmlDeviceGetComputeRunningProcesses_v3:
NO_PERMISSION:0``) refuses that GPU's own handle, not its MIG devices' handles: nvml.h marks the
parent's process list as needing privileges on a MIG GPU, while each MIG device handle lists its
own instance's processes, so an unprivileged agent is refused the one and given the others.

Per-process utilisation (nvmlDeviceGetProcessUtilization, nvmlDeviceGetProcessesUtilizationInfo)
returns the samples newer than the caller's lastSeenTimeStamp, one per process per clock tick,
and NOT_FOUND when there is none (nvml.h: "if sample entries are not found"); both are
NOT_SUPPORTED with MIG on, as device utilisation is. Accounting answers per pid while the card's
accounting mode is on (profile ``accounting_mode``), NOT_FOUND for a pid it has no record of.
"""

from __future__ import annotations

import pynvml

from gpuagent.sim.fakelib.args import (
    _GET,
    _SET,
    E_INVALID,
    E_NOT_FOUND,
    E_NS,
    E_SIZE,
    E_VERSION,
    OK,
    NvmlCalls,
    _fill_proc,
    _int,
    _out,
)
from gpuagent.sim.fakelib.calls import device_call
from gpuagent.sim.load import process_samples

# A code forced on a GPU hits only its own handle here: its MIG device handles still answer.
process_list_call = device_call(forced_on_mig_handles=False)


def _stamp_us(dev) -> int:
    """The sample time of the current tick in microseconds (> 0 from the first tick on)."""
    return int(dev.machine.now() * 1_000_000) + 1


class ProcessCalls(NvmlCalls):
    def _procs(self, dev, count, arr):
        gpu = dev.gpu if dev.is_mig else dev
        procs = gpu.processes(dev.gi_id if dev.is_mig else None)
        return self._two_call(count, arr, procs, _fill_proc)

    @process_list_call
    def nvmlDeviceGetComputeRunningProcesses_v3(self, dev, count=None, arr=None):
        return self._procs(dev, count, arr)

    @process_list_call
    def nvmlDeviceGetComputeRunningProcesses_v2(self, dev, count=None, arr=None):
        return self._procs(dev, count, arr)

    @process_list_call
    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, dev, count=None, arr=None):
        return self._graphics(dev, count, arr)

    @process_list_call
    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, dev, count=None, arr=None):
        return self._graphics(dev, count, arr)

    def _graphics(self, dev, count, arr):
        # Only an imported capture has graphics processes (gnome-shell, Xwayland on the 2080 SUPER).
        gpu = dev.gpu if dev.is_mig else dev
        procs = gpu.captured_processes("G", dev.gi_id if dev.is_mig else None)
        return self._two_call(count, arr, procs, _fill_proc)

    @process_list_call
    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, dev, count=None, arr=None):
        return self._two_call(count, arr, [], _fill_proc)

    # -- per-process utilisation --------------------------------------------------------------
    def _samples(self, dev, last_seen: int) -> list[tuple[int, int, int, int, int, int]] | None:
        """(timestamp µs, pid, sm, mem, enc, dec) newer than ``last_seen``; None with MIG on."""
        if dev.mig_devices:
            return None
        stamp = _stamp_us(dev)
        if stamp <= last_seen:
            return []
        procs = dev.processes()
        utils = process_samples(dev.state(), [used for _, used, _, _ in procs])
        return [(stamp, pid, *u) for (pid, *_), u in zip(procs, utils, strict=True)]

    @device_call
    def nvmlDeviceGetProcessUtilization(self, dev, arr=None, count=None, last_seen=None):
        c = _out(count)
        if c is None:
            return E_INVALID
        samples = self._samples(dev, _int(last_seen) or 0)
        if samples is None:
            return E_NS
        if not samples:
            return E_NOT_FOUND
        if arr is None or c.value < len(samples):
            c.value = len(samples)
            return E_SIZE
        a = _out(arr)
        for i, (stamp, pid, sm, mem, enc, dec) in enumerate(samples):
            s = a[i]
            s.pid, s.timeStamp, s.smUtil, s.memUtil, s.encUtil, s.decUtil = (
                pid,
                stamp,
                sm,
                mem,
                enc,
                dec,
            )
        c.value = len(samples)
        return OK

    @device_call
    def nvmlDeviceGetProcessesUtilizationInfo(self, dev, info=None):
        o = _out(info)
        if o is None:
            return E_INVALID
        if _GET(o, "version") != pynvml.ProcessesUtilizationInfo_v1:
            return E_VERSION
        samples = self._samples(dev, int(_GET(o, "lastSeenTimeStamp")))
        if samples is None:
            return E_NS
        if not samples:
            return E_NOT_FOUND
        array = _GET(o, "procUtilArray")
        if not array or _GET(o, "processSamplesCount") < len(samples):
            _SET(o, "processSamplesCount", len(samples))
            return E_SIZE
        for i, (stamp, pid, sm, mem, enc, dec) in enumerate(samples):
            s = array[i]
            _SET(s, "timeStamp", stamp)
            _SET(s, "pid", pid)
            _SET(s, "smUtil", sm)
            _SET(s, "memUtil", mem)
            _SET(s, "encUtil", enc)
            _SET(s, "decUtil", dec)
            _SET(s, "jpgUtil", 0)
            _SET(s, "ofaUtil", 0)
        _SET(o, "processSamplesCount", len(samples))
        return OK

    # -- accounting -----------------------------------------------------------------------------
    @device_call
    def nvmlDeviceGetAccountingMode(self, dev, mode=None):
        return self._put(mode, pynvml.NVML_FEATURE_ENABLED if dev.accounting else pynvml.NVML_FEATURE_DISABLED)

    @device_call
    def nvmlDeviceGetAccountingStats(self, dev, pid=None, stats=None):
        o = _out(stats)
        if o is None:
            return E_INVALID
        if not dev.accounting:
            return E_NS
        pid = _int(pid)
        procs = {p: used for p, used, _, _ in dev.processes()}
        if pid not in procs:
            return E_NOT_FOUND
        st = dev.state()
        share = procs[pid] / max(1, sum(procs.values()))
        # Means over the process's life so far; the load model's integrals give them exactly.
        life_s = max(1e-9, st.t)
        o.gpuUtilization = int(round(st.util_s / life_s * share))
        o.memoryUtilization = int(round(st.mem_util_s / life_s * share))
        o.maxMemoryUsage = procs[pid]
        o.time = int(st.t * 1000)
        o.startTime = int((dev.machine.clock.now() - st.t) * 1_000_000)
        o.isRunning = 1
        return OK
