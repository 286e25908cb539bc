"""`gpuagent health`: the node-health-check contract (exit 0 ok, 1 problem, 2 unknown, one line
starting with the worst GPU), on its own read of a simulated fleet and on a running agent's
state file; and the node-problem-detector plugin config shipped in deploy/."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuagent.plugins.health.check import evaluate, shorten
from gpuagent.service.state_file import STATE_FILE, read_fresh

REPO = Path(__file__).resolve().parents[3]
NPD_CONFIG = REPO / "deploy" / "node-problem-detector" / "gpu-health-monitor.json"


def env_without_config(**extra) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("GPUAGENT_CONFIG", None)
    return {**env, **extra}


def health(*args: str, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuagent", "health", *args], capture_output=True, text=True,
        timeout=timeout, env=env or env_without_config(),
    )  # fmt: skip


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.slow
def test_an_xid_48_fails_the_node_naming_gpu_1_and_reset_required():
    done = health("--simulate", "h100-sxm:4@xid=1:48:1s")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("GPU 1 reset_required: XID 48 "), lines[0]


@pytest.mark.slow
def test_an_ok_fleet_passes_and_a_degraded_gpu_alone_does_not_fail_the_node():
    done = health("--simulate", "h100-sxm:4")
    assert (done.returncode, done.stdout) == (0, "GPU 0 ok: No fault evidence.\n"), done.stderr
    # XID 13 (an application's fault) is degraded at worst: below the default fail_on = "drain".
    done = health("--simulate", "h100-sxm:2@xid=1:13:1s", "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 0 and doc["status"] == "ok"
    assert {g["gpu"]: g["verdict"] for g in doc["gpus"]} == {0: "ok", 1: "degraded"}
    assert doc["message"].startswith("GPU 1 degraded: XID 13 ")


@pytest.mark.slow
def test_fail_on_degraded_fails_on_a_degraded_gpu(tmp_path):
    cfg = write_config(
        tmp_path / "c.toml", f'[agent]\nstate_dir = "{tmp_path}"\n[collectors.health]\nfail_on = "degraded"\n'
    )
    done = health("--simulate", "h100-sxm:2@xid=1:13:1s", "--config", str(cfg))
    assert done.returncode == 1 and done.stdout.startswith("GPU 1 degraded: "), done.stdout + done.stderr


@pytest.mark.slow
def test_a_lost_gpu_fails_the_node():
    done = health("--simulate", "h100-sxm:4@lost=2:0s")
    assert done.returncode == 1 and done.stdout.startswith("GPU 2 lost: "), done.stdout + done.stderr


@pytest.mark.slow
def test_seven_gpus_where_eight_are_expected_fail_the_node(tmp_path):
    cfg = write_config(
        tmp_path / "c.toml", f'[agent]\nstate_dir = "{tmp_path}"\n[collectors.health]\nexpected_gpus = 8\n'
    )
    done = health("--simulate", "h100-sxm:7", "--config", str(cfg), "--json")
    doc = json.loads(done.stdout)
    assert done.returncode == 1 and doc["gpus_missing"] == 1, done.stdout + done.stderr
    assert doc["message"] == "GPU 7 lost: 1 of 8 expected GPUs missing: NVML lists 7 (expected_gpus = 8)"
    assert all(g["verdict"] == "ok" for g in doc["gpus"])


@pytest.mark.slow
def test_as_many_as_at_first_start_is_remembered_across_starts(tmp_path):
    cfg = write_config(
        tmp_path / "c.toml",
        f'[agent]\nstate_dir = "{tmp_path}"\n[collectors.health]\nexpected_gpus = "at_first_start"\n',
    )
    first = health("--simulate", "h100-sxm:8", "--config", str(cfg))
    assert first.returncode == 0, first.stdout + first.stderr
    assert json.loads((tmp_path / "expected_gpus.json").read_text())["gpus"] == 8
    after_reboot = health("--simulate", "h100-sxm:7", "--config", str(cfg))
    assert after_reboot.returncode == 1 and after_reboot.stdout.startswith("GPU 7 lost: 1 of 8 expected"), (
        after_reboot.stdout
    )


@pytest.mark.slow
def test_unknown_is_exit_2_with_one_line_and_no_traceback(tmp_path):
    done = health("--simulate", "nosuchcard:2")
    assert done.returncode == 2 and done.stdout.startswith("unknown: bad simulator SPEC"), done.stdout
    assert len(done.stdout.splitlines()) == 1 and "Traceback" not in done.stderr
    # No driver here and no running agent: unknown, not ok.
    cfg = write_config(tmp_path / "c.toml", f'[agent]\nstate_dir = "{tmp_path}"\n')
    done = health("--config", str(cfg))
    assert done.returncode == 2 and "no running agent" in done.stdout and "no NVIDIA driver" in done.stdout, done.stdout
    cfg.write_text('[collectors.health]\nfail_on = "sometimes"\n')
    done = health("--config", str(cfg), "--simulate", "l40s:1")
    assert done.returncode == 2 and "fail_on" in done.stdout, done.stdout


def test_the_line_is_cut_to_max_length():
    state = {"gpus": {"0": {"tags": {}, "gpu_health": {"verdict": "drain", "verdict_reason": "x " * 400}}}}
    result = evaluate(state, "drain", limit=80)
    assert result.code == 1 and len(result.line) == 80 and result.line.endswith("…")
    assert shorten("a\nb") == "a b"


@pytest.fixture
def running_agent(tmp_path):
    """start(spec, extra_toml) -> (config path, process): `gpuagent run` writing its state file."""
    procs = []

    def start(spec: str, extra: str = "") -> tuple[Path, subprocess.Popen]:
        cfg = write_config(
            tmp_path / "agent.toml",
            f'[agent]\ninterval = "500ms"\nstate_dir = "{tmp_path}"\nsimulate = "{spec}"\n'
            f'[sinks.file]\npath = "{tmp_path / "points.lp"}"\n{extra}',
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpuagent", "run", "--config", str(cfg)],
            env=env_without_config(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        procs.append(proc)
        return cfg, proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def wait_for_state(state_dir: Path, check, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc, _ = read_fresh(state_dir)
        if doc is not None and check(doc):
            return doc
        time.sleep(0.2)
    raise AssertionError(f"no state in {state_dir} that passes the check within {timeout:g}s")


def test_health_reads_the_running_agents_state_file(tmp_path, running_agent):
    cfg, agent = running_agent("h100-sxm:4@xid=3:79:1s")

    def gpu3_lost(doc):
        return doc["gpus"].get("3", {}).get("gpu_health", {}).get("verdict") == "lost"

    doc = wait_for_state(tmp_path, gpu3_lost)
    assert doc["pid"] == agent.pid and set(doc["gpus"]) == {"0", "1", "2", "3"}
    assert doc["gpus"]["0"]["gpu_power"]["power_w"] > 0  # the latest readings, not only the verdict
    assert doc["cost"]["health"]["runs"] >= 1  # and the agent's own cost per collector
    done = health("--config", str(cfg), "--json")
    out = json.loads(done.stdout)
    assert done.returncode == 1 and out["source"] == f"agent pid {agent.pid}", done.stdout + done.stderr
    assert out["message"].startswith("GPU 3 lost: XID 79 (GPU has fallen off the bus) at ")
    # Under --simulate the state file is never read: that fleet has no XID.
    done = health("--config", str(cfg), "--simulate", "h100-sxm:4")
    assert done.returncode == 0, done.stdout


@contextlib.contextmanager
def fake_agent(user: int | None = None):
    """A running process whose command line is `gpuagent` (sleep under that name), as user ``user``."""
    proc = subprocess.Popen(["gpuagent", "600"], executable="/bin/sleep", user=user)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def nobody() -> int:
    import pwd

    if os.geteuid() != 0:
        pytest.skip("needs root to make files of another user (os.chown)")
    return pwd.getpwnam("nobody").pw_uid


def forged_state(state_dir: Path, verdict: str = "ok", reason: str = "No fault evidence.", **doc) -> Path:
    """Issue 46: what another user wrote into a 0777 state dir: pid 1 and a time 100 years ahead."""
    state_dir.chmod(0o777)
    doc = {
        "pid": 1, "written": time.time() + 100 * 365 * 86400, "interval": 10.0, "hostname": "n1", "node": {},
        "gpus": {str(i): {"tags": {}, "gpu_health": {"verdict": verdict, "verdict_reason": reason}} for i in (0, 1)},
        **doc,
    }  # fmt: skip
    path = state_dir / STATE_FILE
    path.write_text(json.dumps(doc))
    os.chown(path, nobody(), nobody())
    return path


def test_a_state_file_is_trusted_only_from_the_agents_user_its_running_pid_and_now(tmp_path):
    """Another user's file, pid 1, a process that is no gpuagent, a time ahead of now, a writer
    of another uid: each refused in one line."""
    path = forged_state(tmp_path)
    state, why = read_fresh(tmp_path)
    assert state is None and "is owned by another user than root" in why and "\n" not in why
    os.chown(path, 0, 0)
    doc = json.loads(path.read_text())
    with fake_agent() as agent:
        path.write_text(json.dumps(dict(doc, pid=agent.pid)))
        assert "in the future: not trusted" in read_fresh(tmp_path)[1]
        doc["written"] = time.time()
        path.write_text(json.dumps(doc))
        assert "pid 1, which is not an agent" in read_fresh(tmp_path)[1]
        path.write_text(json.dumps(dict(doc, pid=os.getpid())))  # alive, but pytest is no gpuagent
        assert "which is not a gpuagent" in read_fresh(tmp_path)[1]
        path.write_text(json.dumps(dict(doc, pid=agent.pid)))
        assert read_fresh(tmp_path) == (json.loads(path.read_text()), "")
    with fake_agent(user=nobody()) as theirs:  # a gpuagent of theirs does not vouch for root's file
        path.write_text(json.dumps(dict(doc, pid=theirs.pid)))
        assert f"a process of uid {nobody()}, not of the file's owner (uid 0)" in read_fresh(tmp_path)[1]


def test_reads_of_the_state_and_expected_gpus_files_are_bounded(tmp_path, caplog):
    """/dev/zero ran health out of memory, a FIFO hung it, 1 GiB cost 2.1 GB: each is refused now."""
    from gpuagent.errors import AgentError
    from gpuagent.plugins.health.inventory import REMEMBERED, expected_count

    state = tmp_path / STATE_FILE
    state.symlink_to("/dev/zero")
    assert "is a symlink (not followed)" in read_fresh(tmp_path)[1]
    state.unlink()
    os.mkfifo(state)  # no writer: an open without O_NONBLOCK waits for one forever
    assert "is a FIFO, not a regular file" in read_fresh(tmp_path)[1]
    state.unlink()
    with open(state, "wb") as fh:
        fh.truncate(1 << 30)  # sparse: 1 GiB that costs no disk
    assert "is over 67108864 bytes" in read_fresh(tmp_path)[1]
    remembered = tmp_path / REMEMBERED
    os.mkfifo(remembered)  # not trusted: counted again and replaced (refusing to start would stop the agent)
    with caplog.at_level(logging.WARNING, logger="gpuagent.collector.health"):
        assert expected_count("at_first_start", tmp_path, 8) == 8
    assert "is a FIFO, not a regular file: not trusted; counting the GPUs again" in caplog.text
    assert json.loads(remembered.read_text())["gpus"] == 8
    remembered.write_text("{")  # the agent's own file, damaged: said as before
    with pytest.raises(AgentError, match="is unreadable"):
        expected_count("at_first_start", tmp_path, 8)


def test_a_dangling_expected_gpus_symlink_does_not_make_root_create_its_target(tmp_path):
    from gpuagent.plugins.health.inventory import REMEMBERED, expected_count

    tmp_path.chmod(0o777)
    target = tmp_path / "elsewhere" / "created-by-root"
    target.parent.mkdir()
    (tmp_path / REMEMBERED).symlink_to(target)
    os.lchown(tmp_path / REMEMBERED, nobody(), nobody())
    assert expected_count("at_first_start", tmp_path, 8) == 8
    assert not target.exists()  # the link was replaced, not followed
    assert not (tmp_path / REMEMBERED).is_symlink() and json.loads((tmp_path / REMEMBERED).read_text())["gpus"] == 8


@pytest.mark.slow
def test_a_state_file_of_another_user_does_not_hide_a_real_xid_48(tmp_path):
    """Issue 46: another user's state.json (pid 1, 100 years ahead) read `GPU 0 ok` (exit 0) over a
    real XID 48; now the check reads NVML itself and says on stderr why, in one line."""
    forged_state(tmp_path)
    cfg = write_config(tmp_path / "c.toml", f'[agent]\nstate_dir = "{tmp_path}"\nsimulate = "h100-sxm:2@xid=0:48:1s"\n')
    done = health("--config", str(cfg))
    assert done.returncode == 1 and done.stdout.startswith("GPU 0 reset_required: XID 48 "), done.stdout + done.stderr
    why = [line for line in done.stderr.splitlines() if "not trusted" in line]
    assert len(why) == 1 and why[0].endswith("; reading NVML itself"), done.stderr


def test_a_state_file_whose_writer_is_gone_or_stale_is_not_trusted(tmp_path):
    doc = {
        "pid": 2**22 + 12345,
        "written": time.time(),
        "interval": 10.0,
        "hostname": "n1",
        "gpus": {"0": {"tags": {}, "gpu_health": {"verdict": "ok", "verdict_reason": "No fault evidence."}}},
        "node": {},
    }
    (tmp_path / STATE_FILE).write_text(json.dumps(doc))
    state, why = read_fresh(tmp_path)
    assert state is None and "not running" in why
    with fake_agent() as agent:
        doc.update(pid=agent.pid, written=time.time() - 31)
        (tmp_path / STATE_FILE).write_text(json.dumps(doc))
        state, why = read_fresh(tmp_path)
        assert state is None and "more than 3 intervals" in why
        doc["written"] = time.time() - 29
        (tmp_path / STATE_FILE).write_text(json.dumps(doc))
        assert read_fresh(tmp_path)[0] is not None
    # A dead writer: the check reads NVML itself (none here: unknown), it does not trust the file.
    doc.update(pid=2**22 + 12345, written=time.time())
    (tmp_path / STATE_FILE).write_text(json.dumps(doc))
    cfg = write_config(tmp_path / "c.toml", f'[agent]\nstate_dir = "{tmp_path}"\n')
    done = health("--config", str(cfg))
    assert done.returncode == 2 and "not running" in done.stdout, done.stdout


@pytest.mark.slow
def test_node_problem_detector_runs_the_shipped_rule_within_its_contract(tmp_path):
    """The rule as NPD runs it: its path's command and args unchanged, killed at its timeout,
    exit 0/1/2 (OK/NonOK/Unknown), stdout at most max_output_length. The simulated fleet comes
    from the config NPD's environment would point at (GPUAGENT_CONFIG)."""
    npd = json.loads(NPD_CONFIG.read_text())
    [rule] = npd["rules"]
    assert npd["plugin"] == "custom" and rule["type"] == "permanent"
    assert rule["condition"] in {c["type"] for c in npd["conditions"]}
    assert Path(rule["path"]).name == "gpuagent" and rule["args"][0] == "health"
    limit = npd["pluginConfig"]["max_output_length"]
    timeout = float(rule["timeout"].rstrip("s"))
    results = {}
    for name, spec in (("ok", "h100-sxm:2"), ("problem", "h100-sxm:4@xid=1:48:1s"), ("unknown", "nosuchcard:1")):
        cfg = write_config(
            tmp_path / f"{name}.toml", f'[agent]\nstate_dir = "{tmp_path / name}"\nsimulate = "{spec}"\n'
        )
        done = subprocess.run(
            [sys.executable, "-m", "gpuagent", *rule["args"]], capture_output=True, text=True,
            timeout=timeout, env=env_without_config(GPUAGENT_CONFIG=str(cfg)),
        )  # fmt: skip
        assert len(done.stdout.rstrip("\n")) <= limit and done.stdout.count("\n") == 1, done.stdout
        results[name] = (done.returncode, done.stdout)
    assert results["ok"][0] == 0
    assert results["problem"][0] == 1 and results["problem"][1].startswith("GPU 1 reset_required: ")
    assert results["unknown"][0] == 2 and results["unknown"][1].startswith("unknown: ")  # NPD: Unknown
