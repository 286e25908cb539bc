"""The L2 working-set probe: bandwidth against working-set size, and the knee where a cache stops helping.

`gpuagent probe l2` (or `python -m gpuagent.probe`) runs it; docs/probe.md
describes the method, the output and the gpu_l2_probe points.
"""

from gpuagent.probe.knee import Knee, find_knees
from gpuagent.probe.result import MEASUREMENT, ProbeResult, run_probe
from gpuagent.probe.sweep import SweepResult, run_sweep, working_set_sizes

__all__ = [
    "MEASUREMENT",
    "Knee",
    "ProbeResult",
    "SweepResult",
    "find_knees",
    "run_probe",
    "run_sweep",
    "working_set_sizes",
]
