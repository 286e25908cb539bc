#!/usr/bin/env bash
# The main job: set up (once: scripts/setup.sh), then run the agent in the foreground (Ctrl-C
# stops it). With an NVIDIA driver it reads the real GPUs; without one it runs on a simulated
# mixed fleet ($GPUAGENT_SIMULATE, default below), unless you name a fleet yourself: --simulate
# SPEC, or `simulate` in the [agent] table of --config FILE. Extra arguments go to `gpuagent run`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
args=("$@")

# The fleet the user asked for, if any: --simulate on the command line, else the config's.
user_fleet=""
config="${GPUAGENT_CONFIG:-}"
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --simulate) user_fleet="${args[i + 1]:-}" ;;
    --simulate=*) user_fleet="${args[i]#--simulate=}" ;;
    -c | --config) config="${args[i + 1]:-}" ;;
    --config=*) config="${args[i]#--config=}" ;;
  esac
done
if [ -z "$user_fleet" ] && [ -n "$config" ] && [ -f "$config" ]; then
  user_fleet="$(.venv/bin/python -c 'import sys, tomllib
try:
    print(tomllib.load(open(sys.argv[1], "rb")).get("agent", {}).get("simulate", ""))
except Exception:
    pass  # gpuagent run reports a bad config in one line' "$config")"
fi

if [ -z "$user_fleet" ] && ! .venv/bin/python -c 'import pynvml; pynvml.nvmlInit()' 2>/dev/null; then
  fleet="${GPUAGENT_SIMULATE:-l40s:2,h100-sxm:2,rtx4090:1}"
  echo "gpuagent: no NVIDIA driver here; running on the simulated fleet $fleet" >&2
  args=(--simulate "$fleet" "${args[@]}")
fi
exec .venv/bin/gpuagent run "${args[@]}"
