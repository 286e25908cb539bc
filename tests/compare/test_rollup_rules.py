"""The shipped recording rules (deploy/rollups/) are what gpuagent.compare.rollup_rules generates,
pass `promtool check rules`, and compute the rollups when promtool evaluates them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpuagent.compare.rollup_rules import rules_yaml
from gpuagent.compare.rollups import LEVELS, ROLLUPS

RULES = Path(__file__).resolve().parents[2] / "deploy" / "rollups"


def _promtool() -> str:
    import shutil

    found = shutil.which("promtool")
    if not found:
        pytest.skip("promtool not installed (Debian package prometheus)")
    return found


@pytest.mark.parametrize("scheme", ["prometheus", "influx"])
def test_shipped_rules_are_generated_and_valid(scheme):
    path = RULES / f"gpuagent-rollups-{scheme}.rules.yml"
    assert path.read_text() == rules_yaml(scheme), f"regenerate: python -m gpuagent.compare.rollup_rules {scheme}"
    out = subprocess.run([_promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    # The verdict is a string field, which line protocol in VictoriaMetrics drops.
    fields = sum(len(r.fields) for r in ROLLUPS if scheme == "prometheus" or r.source != "gpu_health")
    assert f"SUCCESS: {fields * len(LEVELS)} rules found" in out.stdout


@pytest.mark.parametrize("scheme", ["prometheus", "influx"])
def test_vmalert_loads_the_shipped_rules(scheme):
    import shutil

    vmalert = shutil.which("vmalert")
    if not vmalert:
        pytest.skip("vmalert not installed (Debian package victoria-metrics)")
    path = RULES / f"gpuagent-rollups-{scheme}.rules.yml"
    out = subprocess.run([vmalert, "-dryRun", f"-rule={path}"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]


def test_promtool_evaluates_the_power_and_energy_rollups(tmp_path):
    # Samples every 25 s, none on a minute's edge: the 1m bucket stamped 2m holds those at 75 s and 100 s.
    # Samples every 20 s, on the edges: the bucket stamped 2m is [1m, 2m), the samples at 60, 80, 100 s (130 + 140 + 150), not the one at 2m.
    test = tmp_path / "rollups_test.yml"
    test.write_text(f"""rule_files: [{RULES / "gpuagent-rollups-prometheus.rules.yml"}]
evaluation_interval: 1m
tests:
  - interval: 25s
    input_series:
      - series: 'gpuagent_gpu_power_power_watts{{uuid="GPU-a"}}'
        values: '100+10x5'
      - series: 'gpuagent_gpu_power_energy_joules_total{{uuid="GPU-a"}}'
        values: '1000+2500x5'
    promql_expr_test:
      - expr: gpuagent:gpu_power_power_sum:1m
        eval_time: 2m
        exp_samples: [{{labels: 'gpuagent:gpu_power_power_sum:1m{{uuid="GPU-a"}}', value: 270}}]
      - expr: gpuagent:gpu_power_power_count:1m
        eval_time: 2m
        exp_samples: [{{labels: 'gpuagent:gpu_power_power_count:1m{{uuid="GPU-a"}}', value: 2}}]
      - expr: gpuagent:gpu_power_energy_last:1m - gpuagent:gpu_power_energy_first:1m
        eval_time: 2m
        exp_samples: [{{labels: '{{uuid="GPU-a"}}', value: 2500}}]
  - interval: 20s
    input_series:
      - series: 'gpuagent_gpu_power_power_watts{{uuid="GPU-b"}}'
        values: '100+10x9'
    promql_expr_test:
      - expr: gpuagent:gpu_power_power_sum:1m
        eval_time: 2m
        exp_samples: [{{labels: 'gpuagent:gpu_power_power_sum:1m{{uuid="GPU-b"}}', value: 420}}]
""")
    out = subprocess.run([_promtool(), "test", "rules", str(test)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
