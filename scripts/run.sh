#!/usr/bin/env bash
# The main job: set up, then run the agent in the foreground (Ctrl-C stops it).
# With an NVIDIA driver it reads the real GPUs; without one it runs on a simulated
# mixed fleet. Extra arguments go to `gpuagent run` (e.g. --config FILE, --once).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
args=("$@")
if ! .venv/bin/python -c 'import pynvml; pynvml.nvmlInit()' 2>/dev/null; then
  echo "gpuagent: no NVIDIA driver here; running on the simulated fleet l40s:2,h100-sxm:2,rtx4090:1" >&2
  args=(--simulate "${GPUAGENT_SIMULATE:-l40s:2,h100-sxm:2,rtx4090:1}" "${args[@]}")
fi
exec .venv/bin/gpuagent run "${args[@]}"
