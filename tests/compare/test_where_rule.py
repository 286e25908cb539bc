"""gpuagent.compare.where: a --where is one condition, told in one line before anything is sent."""

from __future__ import annotations

import pytest

from gpuagent.compare import where
from gpuagent.errors import AgentError


@pytest.mark.parametrize(
    "cond",
    [
        "",
        "host =~ /^rack-3-/",
        "model = 'NVIDIA L40S'",
        "(host = 'a' OR host = 'b') AND model = 'x;y (z'",
        "host =~ /^(a|b);$/",
        "\"limit\" = 'x'",
        "host = 'it\\'s'",
    ],
)
def test_one_influxql_condition_passes_as_written(cond):
    assert where.influxql(f"  {cond} ") == cond


@pytest.mark.parametrize(
    ("cond", "said"),
    [
        ("host = 'x'; DROP DATABASE victim", "';' (it ends a statement) at character 11"),
        (
            "host = 'x'); DROP DATABASE victim; SELECT * FROM m WHERE ('1' = '1",
            "a ')' that closes no '(' at character 11",
        ),
        ("model = 'x' AND (host = 'y'", "a '(' that is not closed at character 17"),
        ("host = 'x", "a string opened with ' is not closed at character 8"),
        ("\"host = 'x'", 'a quoted name opened with " is not closed at character 1'),
        ("host =~ /x", "a regex opened with / is not closed at character 9"),
        ("host = 'x' -- rest", "'--' (a comment) at character 12"),
        ("host = 'x'\nOR 1 = 1", "a line break at character 11"),
        ("host = 'x' GROUP BY gpu", "'GROUP' (a clause or statement, not a condition) at character 12"),
        ("1 = 1 INTO other", "'INTO' (a clause or statement, not a condition) at character 7"),
    ],
)
def test_what_is_not_one_influxql_condition_is_refused_in_one_line(cond, said):
    with pytest.raises(AgentError) as refused:
        where.influxql(cond)
    text = str(refused.value)
    assert text == f"--where {cond!r}: {said}: --where is one condition" and "\n" not in text.replace(cond, "")


@pytest.mark.parametrize("cond", ['host="a", model=~"L.*"', 'host="a;b}"', "host=`a'\"`", ""])
def test_promql_label_matchers_pass(cond):
    assert where.promql(cond) == cond


@pytest.mark.parametrize(
    ("cond", "said"),
    [
        ('host="a"} or vector(1) #', "'}' outside a string (label matchers only) at character 9"),
        ('host="a"; x', "';' (it ends a statement) outside a string (label matchers only) at character 9"),
        ('host="a', 'a string opened with " is not closed at character 6'),
        ('host="a" # c', "a comment outside a string (label matchers only) at character 10"),
    ],
)
def test_what_is_not_promql_matchers_is_refused_in_one_line(cond, said):
    with pytest.raises(AgentError) as refused:
        where.promql(cond)
    assert str(refused.value) == f"--where {cond!r}: {said}: --where is one condition"
