"""gpuagent benchmarks: `python -m bench [--quick] [--json]`."""
