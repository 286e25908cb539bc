"""Fixtures of the `gpuagent top` tests: the compare tests' in-process CLI (the one-node Slurm
cluster, `slurm_cluster`, is the session fixture of the root conftest.py)."""

from compare.conftest import cli  # noqa: F401
