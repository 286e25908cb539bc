"""`python -m gpuagent.probe --json`: the L2 probe alone (what scripts/device-check.sh calls)."""

from gpuagent.probe.cli import main

main()
