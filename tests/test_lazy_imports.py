"""Resident memory: an agent loads every built-in plugin, but the modules only a sink that
sends somewhere needs (http.client loads ssl: about 4 MB; sqlite3 for the spool: 1.3 MB) are
imported when such a sink is built, not when its plugin is loaded (bench `steady`: ≤ 45 MB)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("http.client", "ssl", "sqlite3")


def _imported_after(code: str) -> set[str]:
    script = f"import sys\n{code}\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return set(out.stdout.split())


@pytest.mark.slow
def test_loading_every_plugin_imports_no_network_or_spool_module():
    loaded = _imported_after(
        "from gpuagent.plugin_host import PluginHost\n"
        "host = PluginHost().load()\n"
        "assert 'influxdb' in host.sinks and 'health' in host.collectors, (host.sinks, host.collectors)"
    )
    assert loaded == set()


@pytest.mark.slow
def test_the_modules_come_when_a_sink_needs_them(tmp_path):
    # The same check would pass if nothing ever imported them: an InfluxDB v1 sink with a spool does.
    loaded = _imported_after(
        "from gpuagent.service.runtime import Options, build\n"
        "from pathlib import Path\n"
        f"p = Path({str(tmp_path)!r}) / 'g.toml'\n"
        f'p.write_text(\'[agent]\\nstate_dir = "{tmp_path}"\\n[sinks.influxdb]\\nurl = "http://127.0.0.1:9"\\napi = "v1"\\ndatabase = "gpus"\\n\')\n'
        "agent = build(Options(config_path=p, simulate='l40s:1'))\n"
        "agent.close(flush_timeout=0.1)"
    )
    assert {"http.client", "sqlite3"} <= loaded
