"""The opt-in Slurm drain action against a real local slurmctld/slurmd (the repository's
conftest.py `slurm_cluster`): a simulated XID 79 drains the node with the reason in `sinfo -R`,
a second episode does not drain twice, a node an admin drained is left as it was; each decision
counted in gpu_action."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lineprotocol_parser import parse

from gpuagent.plugins.health.slurm_drain import node_state


def run_agent(cluster, tmp_path: Path, spec: str, until, timeout: float = 40.0) -> tuple[list, str]:
    """`gpuagent run` on ``spec`` with the drain action on, until ``until(points)`` holds; its points."""
    out = tmp_path / "points.lp"
    cfg = tmp_path / "agent.toml"
    cfg.write_text(
        f'[agent]\ninterval = "500ms"\nstate_dir = "{tmp_path}"\nsimulate = "{spec}"\n'
        f'[sinks.file]\npath = "{out}"\n'
        f'[collectors.health]\nslurm_drain = true\nslurm_node = "{cluster.host}"\nscontrol = "{cluster.scontrol}"\n'
    )
    env = {**cluster.env, "PYTHONUNBUFFERED": "1"}
    env.pop("GPUAGENT_CONFIG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "run", "--config", str(cfg)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    points: list = []
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.3)
            points = list(parse(out.read_text())) if out.exists() else []
            if until(points):
                break
        else:
            raise AssertionError(f"the agent did not get there in {timeout:g}s; rc={proc.poll()}")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    return [(m, t, f) for m, t, f, _ in parse(out.read_text())], err


def actions(points) -> list[dict]:
    return [f for m, _t, f in points if m == "gpu_action"]


@pytest.fixture
def node(slurm_cluster):
    slurm_cluster.resume()
    yield slurm_cluster
    slurm_cluster.resume()  # the attribution tests need a node that takes jobs


def test_node_state_reads_one_line_of_scontrol_show_node():
    line = (
        "NodeName=n1 Arch=x86_64 CoresPerSocket=1 State=IDLE+DRAIN ThreadsPerCore=1 "
        "Partitions=gpuq Reason=gpuagent: GPU 3 lost: XID 79 at 12:00:00 UTC. [root@2026-12-01T12:00:01]"
    )
    assert node_state(line) == ("IDLE+DRAIN", "gpuagent: GPU 3 lost: XID 79 at 12:00:00 UTC.")
    assert node_state("NodeName=n1 State=IDLE ThreadsPerCore=1") == ("IDLE", "")


def test_xid_79_drains_the_node_once_across_two_episodes(node, tmp_path):
    # GPU 3: XID 79 at 1 s (lost), a reset at 4 s (back: the episode ends); GPU 2: XID 79 at 6 s.
    spec = "h100-sxm:4@xid=3:79:1s@reset=3:4s@xid=2:79:6s"

    def second_episode_seen(points):
        acts = [f for m, _t, f, _ts in points if m == "gpu_action"]
        return any(a.get("left_alone_total", 0) >= 1 for a in acts)

    points, err = run_agent(node, tmp_path, spec, second_episode_seen)
    acts = actions(points)
    assert max(a["drains_total"] for a in acts) == 1, err[-2000:]
    assert acts[-1]["left_alone_total"] == 1 and acts[-1]["failures_total"] == 0
    assert any(a["in_episode"] is False for a in acts[acts.index(next(a for a in acts if a["drains_total"])) :])
    assert "already drained by this agent earlier" in acts[-1]["last_action"]
    reasons = node.sinfo_reasons()
    assert f"{node.host}|drained|gpuagent: GPU 3 lost: XID 79 (GPU has fallen off the bus) at " in reasons, reasons
    assert err.count("drained: gpuagent: GPU 3 lost") == 1, err[-2000:]  # said in the log, once


def test_a_node_drained_by_an_admin_is_left_as_it_was(node, tmp_path):
    node.drain("memory test, ticket 4711")
    points, err = run_agent(
        node,
        tmp_path,
        "h100-sxm:4@xid=1:48:1s",
        lambda pts: any(m == "gpu_action" and f.get("left_alone_total") for m, _t, f, _ in pts),
    )
    acts = actions(points)
    assert acts[-1]["drains_total"] == 0 and acts[-1]["left_alone_total"] == 1
    assert "already drained by someone else" in acts[-1]["last_action"]
    reasons = node.sinfo_reasons()
    assert "memory test, ticket 4711" in reasons and "gpuagent" not in reasons, reasons


def test_an_ok_fleet_never_touches_the_node(node, tmp_path):
    points, _ = run_agent(node, tmp_path, "h100-sxm:2", lambda pts: len([1 for m, *_ in pts if m == "gpu_action"]) >= 3)
    assert all(a["drains_total"] == 0 and a["in_episode"] is False for a in actions(points))
    assert node.sinfo_reasons().strip() == ""
    assert os.environ.get("SLURM_CONF") is None  # the test's own environment is not the cluster's


def test_the_health_check_drains_the_node_itself_as_slurms_health_check_program(node, tmp_path):
    """Slurm's HealthCheckProgram acts on nothing the program returns: `gpuagent health
    --slurm-drain` drains on a problem, and leaves an ok node alone."""
    env = {**node.env, "PYTHONUNBUFFERED": "1"}
    env.pop("GPUAGENT_CONFIG", None)
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[agent]\nstate_dir = "{tmp_path}"\n[collectors.health]\nslurm_node = "{node.host}"\n')

    def check(spec):
        return subprocess.run(
            [sys.executable, "-m", "gpuagent", "health", "--slurm-drain", "--config", str(cfg), "--simulate", spec],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    ok = check("h100-sxm:2")
    assert ok.returncode == 0 and node.sinfo_reasons().strip() == "", ok.stdout + ok.stderr
    bad = check("h100-sxm:4@xid=1:48:1s")
    assert bad.returncode == 1 and bad.stdout.startswith("GPU 1 reset_required: "), bad.stdout + bad.stderr
    assert f"{node.host}|drained|gpuagent: GPU 1 reset_required: XID 48 " in node.sinfo_reasons()


def test_a_failing_scontrol_is_counted_and_tried_again_next_run(tmp_path):
    from gpuagent.plugins.health.slurm_drain import SlurmDrain

    drainer = SlurmDrain("n1", scontrol=str(tmp_path / "no-scontrol"))
    drainer.update("GPU 3 lost: XID 79")
    drainer.update("GPU 3 lost: XID 79")
    fields = drainer.fields()
    assert fields["failures_total"] == 2 and fields["drains_total"] == 0 and fields["in_episode"] is False
    assert fields["last_action"].startswith("failed: ")
    drainer.update(None)  # the GPU is back: nothing to do, nothing counted
    assert drainer.fields()["failures_total"] == 2


def test_a_forged_state_file_does_not_choose_the_drain_reason(node, tmp_path):
    """Issue 46: another user's state.json (pid 1, 100 years ahead, GPU 0 at drain) drained the node
    with their reason; now it is not trusted: the check reads NVML itself (an ok fleet here)."""
    import json
    import pwd

    if os.geteuid() != 0:
        pytest.skip("needs root to make files of another user (os.chown)")
    nobody = pwd.getpwnam("nobody").pw_uid
    tmp_path.chmod(0o777)
    forged = {
        "pid": 1, "written": time.time() + 100 * 365 * 86400, "interval": 10.0, "hostname": node.host, "node": {},
        "gpus": {"0": {"tags": {}, "gpu_health": {"verdict": "drain", "verdict_reason": "forged by nobody"}}},
    }  # fmt: skip
    (tmp_path / "state.json").write_text(json.dumps(forged))
    os.chown(tmp_path / "state.json", nobody, nobody)
    env = {**node.env, "PYTHONUNBUFFERED": "1"}
    env.pop("GPUAGENT_CONFIG", None)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[agent]\nstate_dir = "{tmp_path}"\nsimulate = "h100-sxm:2"\n'
        f'[collectors.health]\nslurm_node = "{node.host}"\nscontrol = "{node.scontrol}"\n'
    )
    done = subprocess.run(
        [sys.executable, "-m", "gpuagent", "health", "--slurm-drain", "--config", str(cfg)],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("GPU 0 ok"), done.stdout + done.stderr
    assert "forged" not in node.sinfo_reasons() and node.sinfo_reasons().strip() == ""
