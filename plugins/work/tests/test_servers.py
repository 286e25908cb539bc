"""The work collector end to end: `gpuagent run` on a simulated l40s:2,h100-sxm:2 with two real
server processes that speak vLLM's and Triton's /metrics (tests/inference_server.py), each
listening in a parent whose children the simulator lists on GPUs: Triton on GPU 0, vLLM
tensor-parallel over the two H100s (GPUs 2 and 3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lineprotocol_parser import parse

ONLY = ("processes", "work")  # the rest of the agent has its own tests; two cores are shared


def agent_config(tmp_path: Path, out: Path) -> Path:
    from gpuagent.plugin_host import PluginHost

    text = (
        f'[agent]\ninterval = 1\nstate_dir = "{tmp_path}"\n'
        f'[sinks.file]\npath = "{out}"\n'
        f'[collectors.work]\njobs_dir = ""\nrequest_timeout = 1\n'
    )
    for name in PluginHost(load_entry_points=False).load().collectors:
        if name not in ONLY:
            text += f"\n[collectors.{name}]\nenabled = false\n"
    path = tmp_path / "gpuagent.toml"
    path.write_text(text)
    return path


class Agent:
    def __init__(self, tmp_path: Path, spec: str):
        self.out = tmp_path / "points.lp"
        env = {k: v for k, v in os.environ.items() if k != "GPUAGENT_CONFIG"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuagent", "run", "--config", str(agent_config(tmp_path, self.out)),
             "--simulate", spec],
            env=env, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def work_points(self) -> list[tuple[dict, dict, int]]:
        if not self.out.exists():
            return []
        text = self.out.read_text()
        text = text[: text.rfind("\n") + 1]  # a line being written is left for the next read
        return [(t, f, ts) for m, t, f, ts in parse(text) if m == "gpu_work"]

    def wait_for(self, check, what: str, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the agent exited: {self.proc.stderr and self.proc.stderr.read()[-3000:]}"
            points = self.work_points()
            got = check(points)
            if got:
                return got
            time.sleep(0.3)
        raise AssertionError(f"{what} within {timeout}s; last points: {self.work_points()[-12:]}")

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err


def latest(points, **match) -> dict[tuple[str, str], tuple[dict, dict]]:
    """(gpu, unit) -> the newest point's (tags, fields) among those whose tags match."""
    out = {}
    for tags, fields, _ts in points:
        if all(tags.get(k) == v for k, v in match.items()):
            out[(tags["gpu"], tags["unit"])] = (tags, fields)
    return out


def increase(values: list[float]) -> float:
    """Prometheus increase() over a counter's samples: a decrease is a reset to zero."""
    total = 0.0
    for before, after in zip(values, values[1:], strict=False):
        total += after - before if after >= before else after
    return total


@pytest.mark.slow
def test_servers_work_on_their_gpus_through_restart_and_stop(tmp_path, servers, call):
    vllm, v = servers("vllm", "--workers", "2", "--other-port")
    triton, t = servers("triton", "--workers", "1")
    spec = (
        f"l40s:2@proc=0:{t['workers'][0]}:4096,h100-sxm:2@proc=0:{v['workers'][0]}:30000@proc=1:{v['workers'][1]}:30000"
    )
    call(v["port"], "/work?n=10", "POST")
    call(t["port"], "/work?n=5", "POST")
    agent = Agent(tmp_path, spec)
    try:
        # Counters equal the servers', on the right GPUs, with workload, unit and source.
        want_v = call(v["port"], "/state")
        want_t = call(t["port"], "/state")

        def both(points):
            got = latest(points)
            return got if {("2", "tokens_out"), ("3", "tokens_out"), ("0", "inferences")} <= set(got) else None

        got = agent.wait_for(both, "work points of both servers")
        for gpu in ("2", "3"):
            for unit in ("tokens_out", "tokens_in", "requests"):
                tags, fields = got[(gpu, unit)]
                assert tags["source"] == "vllm" and tags["workload"] == "meta-llama/Llama-3.1-8B-Instruct"
                assert tags["work_id"] == f"{v['pid']}:{v['port']}" and tags["model"].startswith("NVIDIA H100")
                assert fields["units_total"] == want_v[unit] and fields["gpus"] == 2
        for unit in ("requests", "inferences", "executions"):
            tags, fields = got[("0", unit)]
            assert tags["source"] == "triton" and tags["workload"] == "resnet50"
            assert tags["work_id"] == f"{t['pid']}:{t['port']}" and "L40S" in tags["model"]
            assert fields["units_total"] == want_t[unit] and fields["gpus"] == 1
        assert {tags["gpu"] for tags, _, _ in agent.work_points()} == {"0", "2", "3"}
        assert not any("slurm_job_id" in tags for tags, _, _ in agent.work_points())

        # More work, then a restart (same pid and port, counters from zero), then a little more.
        call(v["port"], "/work?n=20", "POST")
        before = call(v["port"], "/state")["tokens_out"]
        agent.wait_for(
            lambda p: (
                latest(p, gpu="2", unit="tokens_out").get(("2", "tokens_out"), ({}, {}))[1].get("units_total") == before
            ),
            "the new count",
        )
        vllm.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while True:
            try:
                if call(v["port"], "/state")["restarts"] == 1:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the vLLM stand-in did not restart"
            time.sleep(0.1)
        call(v["port"], "/work?n=3", "POST")
        after = call(v["port"], "/state")["tokens_out"]
        assert after < before
        agent.wait_for(
            lambda p: (
                latest(p, gpu="3", unit="tokens_out").get(("3", "tokens_out"), ({}, {}))[1].get("units_total") == after
            ),
            "the count after the restart",
        )
        series = [
            f["units_total"] for tg, f, _ in agent.work_points() if tg["gpu"] == "3" and tg["unit"] == "tokens_out"
        ]
        # The raw counter shows the reset; read as a counter, the restart costs no negative work.
        assert min(b - a for a, b in zip(series, series[1:], strict=False)) < 0
        assert increase(series) == before - series[0] + after
        assert all(x >= 0 for x in series)

        # A server that stops costs only its own points: every run after its stop (those that
        # read vLLM's count of after the stop, and the two cycles after them) has vLLM's alone.
        triton.terminate()
        triton.wait(10)
        call(v["port"], "/work?n=1", "POST")
        last = call(v["port"], "/state")["tokens_out"]

        def since_stop(points):
            at = [i for i, (tg, f, _) in enumerate(points) if tg["unit"] == "tokens_out" and f["units_total"] == last]
            ticks = sorted({ts for _, _, ts in points[at[0] :]}) if at else []
            return points[at[0] :] if len(ticks) >= 3 else None

        tail = agent.wait_for(since_stop, "three cycles of vLLM's points after Triton stopped")
        assert {tags["gpu"] for tags, _, _ in tail} == {"2", "3"}
        assert {tags["source"] for tags, _, _ in tail} == {"vllm"}
        assert all(f["units_total"] == last for tg, f, _ in tail if tg["unit"] == "tokens_out")

        # The port that answers something else was asked once in all those cycles, never again.
        assert call(v["port"], "/asked")["asked"] == 1
    finally:
        err = agent.stop()
    assert "Traceback" not in err, err[-3000:]
