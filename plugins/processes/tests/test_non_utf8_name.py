"""A GPU process whose name is not UTF-8 (issue 28, item 3).

Linux lets a process name hold any byte; psutil decodes it with surrogateescape, so
b"train\\xffjob" reaches the collector as "train\\udcffjob", which no UTF-8 encoder
takes. A real process renames itself with prctl(PR_SET_NAME), the simulator shows it
on GPU 0 (``@proc=0:PID``), and a real `gpuagent run` delivers to the file sink,
influxd and /metrics: every gpu_process point is kept, the byte reads \\xff.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

pytestmark = [pytest.mark.servers, pytest.mark.slow]

RENAME = (
    "import ctypes, time; ctypes.CDLL(None).prctl(15, b'train\\xffjob', 0, 0, 0); "  # 15: PR_SET_NAME
    "print('ready', flush=True); time.sleep(120)"
)


@pytest.fixture
def oddly_named_process():
    child = subprocess.Popen([sys.executable, "-c", RENAME], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\n"
    yield child
    child.kill()
    child.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_process_name_that_is_not_utf8_keeps_every_point(tmp_path, oddly_named_process, influxdb_v1):
    pid = oddly_named_process.pid
    assert psutil.Process(pid).name() == "train\udcffjob"  # what the collector is handed
    database = f"nonutf8_{pid}"
    influxdb_v1.create_database(database)
    port, record = free_port(), tmp_path / "record.lp"
    config = tmp_path / "gpuagent.toml"
    config.write_text(
        f'[agent]\ninterval = "300ms"\nhostname = "odd-node"\nstate_dir = "{tmp_path / "state"}"\n'
        f'[sinks.file]\npath = "{record}"\n'
        f'[sinks.prometheus]\nlisten = "127.0.0.1:{port}"\n'
        f'[sinks.influxdb]\napi = "v1"\nurl = "{influxdb_v1.url}"\ndatabase = "{database}"\nflush_interval = "200ms"\n'
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuagent", "run", "--config", str(config), "--simulate", f"l40s:2@proc=0:{pid}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    status, text = None, ""
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    status, text = resp.status, resp.read().decode("utf-8")
                if "train" in text and influxdb_v1.query("SELECT count(used_memory_bytes) FROM gpu_process", database):
                    break
            except OSError:
                pass
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert status == 200
    assert 'name="train\\\\xffjob"' in text  # the label value \xff, its backslash escaped as the format asks
    lines = [line for line in record.read_text(encoding="utf-8").splitlines() if line.startswith("gpu_process,")]
    ours = [line for line in lines if f",pid={pid}," in line]
    cycles = sum(
        1
        for line in record.read_text(encoding="utf-8").splitlines()
        if line.startswith("gpu_power,") and ",gpu=0," in line
    )
    assert cycles >= 2 and len(ours) == cycles  # one point per cycle for this process: none lost
    assert all('name="train\\\\xffjob"' in line for line in ours)
    stored = influxdb_v1.query(f"SELECT \"name\" FROM gpu_process WHERE pid = '{pid}'", database)
    assert stored and {row[1] for row in stored[0]["values"]} == {"train\\xffjob"}
