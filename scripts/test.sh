#!/usr/bin/env bash
# The test job: installs what the suite needs on a fresh Debian machine (the InfluxDB 1.x,
# Prometheus (with promtool) and VictoriaMetrics servers the fixtures start, Chromium for the
# HTML report test, systemd-analyze for the unit checks, Slurm and munge for the attribution
# and health-action tests, vmalert and Alertmanager for the alerting tests), the package with
# its test extras and the example plugin (scripts/setup.sh), then runs pytest.
# Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for pair in influxd:influxdb victoria-metrics:victoria-metrics prometheus:prometheus promtool:prometheus \
    vmalert:victoria-metrics prometheus-alertmanager:prometheus-alertmanager \
    chromium:chromium systemd-analyze:systemd slurmctld:slurmctld slurmd:slurmd scontrol:slurm-client sinfo:slurm-client munged:munge tmux:tmux; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
if [ "${#need[@]}" -gt 0 ]; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "installing Debian packages: ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
./scripts/setup.sh "test,testing,probe,bench"   # and examples/gpuagent-infiniband (scripts/setup.sh)
exec .venv/bin/python -m pytest "$@"
