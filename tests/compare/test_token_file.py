"""`compare` reads [sinks.influxdb]'s token_file with the sink's own reader (one rule for an empty file)."""

from __future__ import annotations

import pytest

from gpuagent.compare.query import connection_from
from gpuagent.errors import ConfigError


def config_with_token_file(tmp_path, text: str):
    token = tmp_path / "token"
    token.write_text(text)
    token.chmod(0o600)
    config = tmp_path / "gpuagent.toml"
    config.write_text(f'[sinks.influxdb]\nurl = "http://127.0.0.1:8086"\nbucket = "gpus"\ntoken_file = "{token}"\n')
    return config


def test_the_token_comes_from_the_file_stripped(tmp_path):
    assert connection_from(str(config_with_token_file(tmp_path, "  s3cret-token\n"))).token == "s3cret-token"


@pytest.mark.parametrize("text", ["", " \n\t\n"])
def test_an_empty_token_file_is_the_same_one_line_error_as_for_the_sink(tmp_path, text):
    # Read as "no token", compare would ask unauthenticated and report the server's 401 instead.
    with pytest.raises(ConfigError, match=r"^sinks\.influxdb\.token_file: .*token is empty$"):
        connection_from(str(config_with_token_file(tmp_path, text)))


def test_an_unreadable_token_file_is_a_one_line_error(tmp_path):
    config = tmp_path / "gpuagent.toml"
    config.write_text(
        f'[sinks.influxdb]\nurl = "http://127.0.0.1:8086"\nbucket = "gpus"\ntoken_file = "{tmp_path / "missing"}"\n'
    )
    with pytest.raises(ConfigError, match="token_file: cannot read .*missing"):
        connection_from(str(config))
