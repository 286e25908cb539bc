"""Fixtures of the `gpuagent top` tests: the compare tests' in-process CLI, the attribution
tests' one-node Slurm cluster."""

from attribution.conftest import slurm_cluster  # noqa: F401  (a real Slurm job's process for the node view)
from compare.conftest import cli  # noqa: F401
