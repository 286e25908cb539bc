"""A bad `--where` is told against the user's own text, not the query compare built."""

from __future__ import annotations

import pytest

from conftest import run_cli

pytestmark = pytest.mark.servers


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("host == 'a'", """--where "host == 'a'": at character 7 ("= 'a'"): found =, expected identifier"""),
        ("model = ", "--where 'model =': it ends where InfluxQL expects identifier, string, number, bool"),
        # An unbalanced parenthesis is refused here, before anything is sent (gpuagent.compare.where).
        (
            "model = 'x' AND (host = 'y'",
            """--where "model = 'x' AND (host = 'y'": a '(' that is not closed at character 17""",
        ),
    ],
)
def test_a_bad_where_points_into_the_users_text(influxdb_v1, where, said):
    proc = run_cli(
        "compare", "--url", influxdb_v1.url, "--database", influxdb_v1.database, "--since", "1h", "--where", where
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpuagent: error: {said}"), proc.stderr
    assert "GROUP" not in lines[0] and "LIMIT" not in lines[0] and "char 1" not in lines[0]
