"""Idle allocations: a real Slurm job (the repository's conftest.py `slurm_cluster`) whose
process holds a simulated GPU with no kernel activity is flagged allocated_idle, with the job
and how long, once idle_after has passed; a job whose GPU computes is not."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from lineprotocol_parser import parse

IDLE_AFTER = 2.0


def test_a_slurm_job_holding_an_idle_gpu_is_flagged_after_idle_after(slurm_cluster, tmp_path):
    idle_job = slurm_cluster.submit("sleep 301", job_name="forgotten")
    busy_job = slurm_cluster.submit("sleep 302", job_name="training")
    try:
        idle_pid = slurm_cluster.wait_running(idle_job, "sleep 301")
        busy_pid = slurm_cluster.wait_running(busy_job, "sleep 302")
        # The mixed scenario, seed 0: GPU 0 trains, GPU 3 is idle (docs/simulator.md "Load model").
        out = tmp_path / "points.lp"
        cfg = tmp_path / "agent.toml"
        cfg.write_text(
            f'[agent]\ninterval = "500ms"\nstate_dir = "{tmp_path}"\n'
            f'simulate = "h100-sxm:4@proc=0:{busy_pid}:4096@proc=3:{idle_pid}:1024"\n'
            f'[sinks.file]\npath = "{out}"\n[collectors.processes]\nidle_after = "{IDLE_AFTER:g}s"\n'
        )
        env = {**slurm_cluster.env, "PYTHONUNBUFFERED": "1"}
        env.pop("GPUAGENT_CONFIG", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuagent", "run", "--config", str(cfg)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 40
            flagged = False
            while not flagged and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.3)
                text = out.read_text() if out.exists() else ""
                flagged = "allocated_idle=true" in text
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
    finally:
        slurm_cluster.cancel(idle_job)
        slurm_cluster.cancel(busy_job)
    assert flagged, err[-3000:]
    jobs = [(tags, fields) for m, tags, fields, _ in parse(out.read_text()) if m == "gpu_job"]
    idle = [f for t, f in jobs if t.get("slurm_job_id") == idle_job]
    busy = [f for t, f in jobs if t.get("slurm_job_id") == busy_job]
    assert idle and busy
    assert {t["gpu"] for t, _ in jobs if t.get("slurm_job_id") == idle_job} == {"3"}
    assert all(f["gpu_util_pct"] == 0 for f in idle)
    # Flagged exactly from idle_after on, with how long it has been idle.
    assert [f["allocated_idle"] for f in idle] == [f["idle_s"] >= IDLE_AFTER for f in idle]
    assert idle[0]["allocated_idle"] is False and idle[-1]["allocated_idle"] is True
    assert idle[-1]["idle_s"] >= IDLE_AFTER
    # The job whose GPU computes is never flagged.
    assert all(f["gpu_util_pct"] > 0 and f["idle_s"] == 0 and f["allocated_idle"] is False for f in busy)
