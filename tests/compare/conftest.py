"""Fixtures shared by the compare tests."""

import pytest
from click.testing import CliRunner


@pytest.fixture(scope="module")
def cli(gpuagent_cli):
    """The gpuagent CLI in-process: cli("compare", ...) -> click's Result."""

    def run(*args):
        return CliRunner().invoke(gpuagent_cli, list(args), catch_exceptions=False)

    return run
