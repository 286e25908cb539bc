"""Rollup pieces read as points and aggregated here (gpuagent.compare.rollup_report): the evaluator of
the rollups' own definitions, and InfluxQL's queries on a server whose max-row-limit cuts answers short."""

from __future__ import annotations

import pytest

from gpuagent.compare.rollup_report import _reduce, raw_aggregate, raw_condition
from gpuagent.compare.rollups import BY_NAME, EVERY, Field


def test_every_rollup_is_evaluated_from_points():
    """A rollup this module cannot evaluate falls back to one aggregate query per group: slow at
    8,000 GPUs. Every shipped one must be evaluable."""
    for rollup in EVERY:
        assert raw_condition(rollup.where) is not None, rollup.name
        assert all(raw_aggregate(f) for f in rollup.fields), rollup.name


def test_conditions_as_influxql_reads_them():
    gpm = raw_condition(BY_NAME["gpu_memory_gpm"].where)
    assert gpm({"dram_bw_source": "gpm"}) and not gpm({"dram_bw_source": "nvml"}) and not gpm({})
    hot = raw_condition(BY_NAME["gpu_clocks_sw_power_cap"].where)
    assert hot({"sw_power_cap": True}) and not hot({"sw_power_cap": False}) and not hot({"sw_power_cap": None})
    band = raw_condition('"power_w" >= 20 AND "power_w" < 40')
    assert [band({"power_w": v}) for v in (19.99, 20, 39.9, 40)] == [False, True, True, False]
    assert not band({"power_w": "30"})  # a string is not a number
    assert raw_condition("") is not None and raw_condition("")({})
    for unknown in ('"a" != 1', '"a" = 1 OR "b" = 2', "a = 1"):
        assert raw_condition(unknown) is None, unknown


def test_aggregates_as_influxql_computes_them():
    assert raw_aggregate(Field("x", 'SUM("power_w")', "SUM")) == ("SUM", "power_w")
    assert raw_aggregate(Field("m", 'COUNT("verdict") / COUNT("verdict")', "SUM")) == ("ONE", "verdict")
    assert raw_aggregate(Field("m", 'MEAN("power_w")', "SUM")) is None
    assert raw_aggregate(Field("m", 'COUNT("a") / COUNT("b")', "SUM")) is None
    values = [3.0, 1.0, 2.5]
    got = {op: _reduce(op, values) for op in ("SUM", "COUNT", "MAX", "MIN", "FIRST", "LAST", "ONE")}
    assert got == {"SUM": 6.5, "COUNT": 3, "MAX": 3.0, "MIN": 1.0, "FIRST": 3.0, "LAST": 2.5, "ONE": 1}
    assert _reduce("COUNT", []) == 0 and _reduce("SUM", []) is None and _reduce("ONE", []) is None
    assert _reduce("SUM", [2, 3]) == 5 and isinstance(_reduce("SUM", [2, 3]), int)


@pytest.mark.servers
def test_points_come_whole_past_a_max_row_limit(influxdb_v1_factory):
    """A server that keeps max-row-limit (InfluxDB 1.6 then answers its first rows, the series marked
    partial): such an answer is asked again in chunks, which it does not cut, so every row comes, a
    series split across chunks whole; an answer under the limit is asked once."""
    from gpuagent.compare.query import InfluxQL, connection_from
    from gpuagent.errors import AgentError

    server = influxdb_v1_factory(max_row_limit=100)
    server.create_database("rows")
    t0 = 1_790_000_000 * 10**9
    lines = [f"m,host=h{i % 7},gpu={i % 3} v={i}.5 {t0 + i * 10**9}" for i in range(12_345)]
    server.write(lines, db="rows")
    client = InfluxQL(connection_from(None, server.url, "rows"))
    rows = client.rows("SELECT * FROM m")
    assert len(rows) == 12_345
    assert sum(r["v"] for r in rows) == sum(i + 0.5 for i in range(12_345))
    assert {r["host"] for r in rows} == {f"h{i}" for i in range(7)}
    series = client.query('SELECT "v" FROM m GROUP BY "host"')
    assert len(series) == 7 and sum(len(one["values"]) for one in series) == 12_345
    assert all("partial" not in one for one in series)
    before = client.requests
    assert client.rows("SELECT COUNT(v) FROM m GROUP BY host")[0]["count"] > 0
    assert client.requests == before + 1
    with pytest.raises(AgentError, match="refused a query"):
        client.query("SELECT nonsense FROM")
    assert client.rows("SELECT COUNT(v) FROM m")[0]["count"] == 12_345
