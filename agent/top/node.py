"""This node's frame: the agent's own collectors, run once per refresh through its scheduler.

The same runtime as `gpuagent run` builds them (one NVML session, the one error policy, the
processes collector's Slurm / Kubernetes attribution), without sinks: each refresh is
`Scheduler.run_once()` and the frame is made of the points it returns. Only the collectors
a frame shows run (TOP_COLLECTORS); a collector that needs an earlier sample (GPM, the
per-process SM share) fills in from the second refresh.
"""

from __future__ import annotations

import socket
import time
from collections import defaultdict

from gpuagent.schema.measurements import GPU_MIG, GPU_PROCESS, GPU_VGPU
from gpuagent.top.model import ROW_READS, Frame, Proc, Row, gpu_row, short_model

TOP_COLLECTORS = ("clocks", "power", "memory", "mig", "vgpu", "health", "processes")


class NodeSource:
    def __init__(self, simulate: str | None, seed: int | None, config_path: str | None, plugins_dir: str | None = None):
        from gpuagent.service.runtime import Options, build, load

        options = Options(config_path=config_path, simulate=simulate, seed=seed, plugins_dir=plugins_dir, sinks=False)
        config, host = load(options)
        # Configs are frozen: the ones a frame does not show are dropped, not switched off.
        config.collectors = {n: c for n, c in config.collectors.items() if n in TOP_COLLECTORS}
        self.agent = build(options, config, host)
        nvml = self.agent.nvml
        self.hostname = config.hostname or socket.gethostname()
        self.simulated = bool(nvml and nvml.simulated)
        self.spec = nvml.spec if nvml is not None and nvml.simulated else None
        self.unavailable = list(getattr(nvml, "unavailable", None) or ())
        self.interval = 2.0

    def read(self, host: str | None = None) -> Frame:
        points = self.agent.scheduler.run_once()
        frame = frame_from_points(points, self.unavailable)
        frame.title = self.hostname + (f"  (simulated: {self.spec})" if self.simulated else "")
        frame.time_s = time.time()
        return frame

    def close(self) -> None:
        self.agent.close(flush_timeout=1.0)


def frame_from_points(points, unavailable=()) -> Frame:
    """Rows per GPU (MIG and vGPU instances under theirs) and the process list, from one run's points."""
    per_gpu: dict[str, dict] = defaultdict(dict)  # a GPU's fields that its row reads
    model: dict[str, str] = {}
    mig: dict[str, list] = defaultdict(list)
    vgpus: dict[str, list] = defaultdict(list)
    procs: list[Proc] = []
    for p in points:
        gpu = p.tags.get("gpu")
        if gpu is None:
            continue
        model[gpu] = p.tags.get("model", "")
        if p.measurement == GPU_MIG and "mig_uuid" in p.tags:
            mig[gpu].append(p)
        elif p.measurement == GPU_VGPU and "vgpu_instance" in p.tags:
            vgpus[gpu].append(p)
        elif p.measurement == GPU_PROCESS:
            procs.append(process_of(p))
        elif p.measurement in ROW_READS:
            per_gpu[gpu].update({f: p.fields[f] for f in ROW_READS[p.measurement] if f in p.fields})
    rows = []
    for gpu in sorted(per_gpu, key=int):
        row = gpu_row({**per_gpu[gpu], "model": model[gpu]}, gpu, gpu)
        for p in sorted(mig[gpu], key=lambda p: p.fields.get("mig_index", 0)):
            f = p.fields
            row.children.append(
                Row(
                    key=f"{gpu}/{p.tags['mig_uuid']}",
                    kind="mig",
                    model=model[gpu],
                    label=f"MIG{f.get('mig_index', '?')} {p.tags.get('mig_profile', '')}".rstrip(),
                    util_pct=f.get("graphics_util_pct"),
                    mem_used=f.get("fb_used_bytes"),
                    mem_total=f.get("fb_total_bytes"),
                )
            )
        for p in sorted(vgpus[gpu], key=lambda p: p.tags["vgpu_instance"]):
            f = p.fields
            row.children.append(
                Row(
                    key=f"{gpu}/{p.tags['vgpu_instance']}",
                    kind="vgpu",
                    model=model[gpu],
                    label="vGPU "
                    + short_model(p.tags.get("vgpu_type") or str(f.get("vgpu_type_name") or p.tags["vgpu_instance"])),
                    util_pct=f.get("sm_util_pct"),
                    mem_used=f.get("fb_used_bytes"),
                    mem_total=f.get("fb_total_bytes"),
                )
            )
        rows.append(row)
    for g in unavailable:  # NVML lists it but it could not be opened: shown, with the reason
        rows.append(Row(key=str(g.index), label=str(g.index), model=g.name, verdict="unavailable", reason=g.reason))
    rows.sort(key=lambda r: int(r.key))
    return Frame(title="", rows=rows, procs=procs)


def process_of(p) -> Proc:
    t, f = p.tags, p.fields
    return Proc(
        gpu=t["gpu"] + (f"/gi{t['gi_id']}" if "gi_id" in t else ""),
        pid=t.get("pid", ""),
        user=str(f.get("user") or t.get("slurm_user") or ""),
        name=str(f.get("name") or ""),
        job=job_of(t),
        mem_bytes=f.get("used_memory_bytes"),
        sm_pct=f.get("sm_util_pct"),
    )


def job_of(tags: dict) -> str:
    """The workload a process belongs to, as a user names it: a Slurm job, a pod, a unit."""
    if tags.get("slurm_job_id"):
        return f"slurm {tags['slurm_job_id']}"
    if tags.get("k8s_pod"):
        return f"pod {tags.get('k8s_namespace', '')}/{tags['k8s_pod']}".replace(" /", " ")
    if tags.get("k8s_pod_uid"):
        return f"pod {tags['k8s_pod_uid'][:8]}"
    if tags.get("container_id"):
        return f"ctr {tags['container_id'][:12]}"
    return tags.get("systemd_unit", "")
