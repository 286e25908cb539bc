"""A real Slurm job reporting its samples with the Python example of plugins/work/README.md:
counted on its GPUs under its Slurm job id, through `gpuagent run --once --test`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

from lineprotocol_parser import parse

from conftest import REPO


def run_once(spec: str, *extra: str) -> list[tuple[str, dict[str, str], dict]]:
    """`gpuagent run --once --test --simulate SPEC`: (measurement, tags, fields) per line."""
    env = {k: v for k, v in os.environ.items() if k != "GPUAGENT_CONFIG"}
    done = subprocess.run(
        [sys.executable, "-m", "gpuagent", "run", "--once", "--test", "--simulate", spec, *extra],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return [(m, tags, fields) for m, tags, fields, _ in parse(done.stdout)]


def readme_example() -> str:
    text = (REPO / "plugins" / "work" / "README.md").read_text()
    section = text[text.index("### A job's own count") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_a_slurm_job_reporting_its_samples_is_counted_on_its_gpus(slurm_cluster, tmp_path):
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    job_py = tmp_path / "train_job.py"
    # The README's example as the job runs it, then the job keeps running (holding its GPUs).
    job_py.write_text(readme_example() + "\nimport time\ntime.sleep(300)\n")
    job = slurm_cluster.submit(
        f"{sys.executable} {job_py}", job_name="train",
        export=f"ALL,GPUAGENT_WORK_DIR={work_dir}",
    )  # fmt: skip
    try:
        pid = slurm_cluster.wait_running(job, str(job_py))
        count = work_dir / f"{job}-samples.work"
        deadline = time.monotonic() + 30
        while not (count.exists() and "total=640" in count.read_text()):
            assert time.monotonic() < deadline, "the job wrote no count"
            time.sleep(0.1)
        config = tmp_path / "gpuagent.toml"
        config.write_text(f'[collectors.work]\njobs_dir = "{work_dir}"\n')
        # The job's process on GPUs 1 and 2; GPU 0 runs something else.
        lines = run_once(f"l40s:2@proc=1:{pid},h100-sxm:2@proc=0:{pid}", "--config", str(config))
    finally:
        slurm_cluster.cancel(job)
    work = [(t, f) for m, t, f in lines if m == "gpu_work"]
    assert sorted(t["gpu"] for t, _ in work) == ["1", "2"]
    for tags, fields in work:
        assert tags["slurm_job_id"] == job and tags["work_id"] == f"job:{job}"
        assert tags["source"] == "job" and tags["unit"] == "samples" and tags["workload"] == "train"
        # sm_util_pct: the job's processes' SM share of the GPU (the work README), for sharing a GPU
        assert {k: v for k, v in fields.items() if k != "sm_util_pct"} == {"units_total": 640.0, "gpus": 2}
        assert 0 <= fields.get("sm_util_pct", 0) <= 100


def test_a_server_run_as_a_slurm_job_carries_its_job_id(slurm_cluster, tmp_path):
    """The vLLM stand-in (plugins/work/tests/inference_server.py) as a batch job: its GPU
    workers inherit the job's environment, so its work points name the job."""
    server = REPO / "plugins" / "work" / "tests" / "inference_server.py"
    state = tmp_path / "vllm.json"
    job = slurm_cluster.submit(f"{sys.executable} {server} vllm {state} --workers 2", job_name="serve")
    try:
        deadline = time.monotonic() + 30
        while not state.exists():
            assert time.monotonic() < deadline, "the server job did not start"
            time.sleep(0.1)
        s = json.loads(state.read_text())
        lines = run_once(f"h100-sxm:2@proc=0:{s['workers'][0]}@proc=1:{s['workers'][1]}")
    finally:
        slurm_cluster.cancel(job)
    work = [(t, f) for m, t, f in lines if m == "gpu_work"]
    assert sorted({t["gpu"] for t, _ in work}) == ["0", "1"]
    for tags, fields in work:
        assert tags["slurm_job_id"] == job and tags["source"] == "vllm"
        assert tags["work_id"] == f"{s['pid']}:{s['port']}" and fields["gpus"] == 2
