"""config/prometheus/alerts.yml: `promtool check rules` passes with at least 5 rules, its unit tests
(`promtool test rules`) pass, and every gpuagent metric it names is one the exposition produces."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from gpuagent.plugins.prometheus.naming import influx_to_prometheus, metric_for
from gpuagent.schema import catalog

pytestmark = pytest.mark.servers

RULES = Path(__file__).resolve().parents[3] / "config" / "prometheus"


def _promtool():
    from gpuagent_test_servers import PROMTOOL, find_binary

    return find_binary(PROMTOOL, "prometheus")


def test_promtool_check_rules_passes_with_at_least_5_rules():
    done = subprocess.run(
        [_promtool(), "check", "rules", "alerts.yml"], cwd=RULES, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = int(re.search(r"SUCCESS: (\d+) rules found", done.stdout).group(1))
    assert found >= 5


def test_promtool_unit_tests_of_the_rules_pass():
    done = subprocess.run(
        [_promtool(), "test", "rules", "alerts_test.yml"], cwd=RULES, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    # Every alert has at least one firing expectation in the unit tests.
    alerts = set(re.findall(r"- alert: (\w+)", (RULES / "alerts.yml").read_text()))
    tested = set(
        re.findall(r"alertname: (\w+)\n\s+exp_alerts:\n\s+- exp_labels", (RULES / "alerts_test.yml").read_text())
    )
    assert alerts == tested, alerts ^ tested


def test_the_rules_name_metrics_the_agent_exposes():
    exposed = {spec.name for spec in influx_to_prometheus().values()}
    # The health verdict (issue 17) is a string field: exposed as an _info gauge by the same rule.
    exposed |= {metric_for("gpuagent", "gpu_health", f, True).name for f in ("verdict", "verdict_reason", "last_error")}
    exposed.add(metric_for("gpuagent", "gpuagent", "last_error", True).name)
    # Every documented string field is an _info gauge (gpu_action.last_action, ...).
    exposed |= {metric_for("gpuagent", m, f, True).name for (m, f), doc in catalog.builtin().items() if doc.type is str}
    named = set(re.findall(r"\bgpuagent_\w+", (RULES / "alerts.yml").read_text()))
    assert named and named <= exposed, named - exposed
