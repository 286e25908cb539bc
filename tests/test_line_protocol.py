import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from influxdb_client import Point as ClientPoint
from influxdb_client.domain.write_precision import WritePrecision
from lineprotocol_parser import parse_line

from gpuagent import Accumulator
from gpuagent.metric import Point, format_field, serialize, to_lines

# Names may hold any printable character, delimiters and backslashes included.
# Left to the examples below: a backslash before a delimiter or at the end and
# CR/LF/TAB, which InfluxDB itself cannot store unchanged.
_AWKWARD = re.compile(r"\\([,= ]|$)")
names = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\x00")
    | st.sampled_from([",", "=", " ", "\\", '"']),
    min_size=1,
    max_size=20,
).filter(lambda s: not s.startswith("#") and not _AWKWARD.search(s))
values = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.text(max_size=30).filter(lambda s: "\x00" not in s),
)


@settings(max_examples=400, deadline=None)
@given(
    measurement=names,
    tags=st.dictionaries(names, names, max_size=4),
    fields=st.dictionaries(names, values, min_size=1, max_size=5),
    ts=st.integers(min_value=0, max_value=2**62),
)
def test_round_trip_through_independent_parser(measurement, tags, fields, ts):
    line = serialize(measurement, tags, fields, ts)
    m, t, f, when = parse_line(line)
    assert m == measurement
    assert t == tags
    assert when == ts
    assert f.keys() == fields.keys()
    for key, value in fields.items():
        got = f[key]
        assert type(got) is type(value), (key, value, got)
        if isinstance(value, float):
            assert got == value or (math.isclose(got, value) and value != 0)
        elif isinstance(value, str):
            # Documented: CR/LF in string fields are written (and stored) as \r, \n.
            assert got == value.replace("\n", "\\n").replace("\r", "\\r")
        else:
            assert got == value


@settings(max_examples=300, deadline=None)
@given(
    measurement=names,
    tags=st.dictionaries(names, names, max_size=4),
    fields=st.dictionaries(names, st.one_of(st.integers(-(2**63), 2**63 - 1), st.booleans(), st.text(max_size=20).filter(lambda s: "\n" not in s and "\r" not in s)), min_size=1, max_size=4),
    ts=st.integers(min_value=0, max_value=2**62),
)
def test_same_bytes_as_influxdb_client(measurement, tags, fields, ts):
    """influxdb-client's Point is the reference serialiser the v2 path is judged by."""
    ref = ClientPoint(measurement)
    for k, v in tags.items():
        ref.tag(k, v)
    for k, v in fields.items():
        ref.field(k, v)
    ref.time(ts, WritePrecision.NS)
    expected = ref.to_line_protocol()
    # influxdb-client sorts tags (as we do) and fields (we keep the collector's order).
    assert serialize(measurement, tags, dict(sorted(fields.items())), ts) == expected


@pytest.mark.parametrize(
    "measurement,tags,fields,expected",
    [
        ("cpu", {}, {"value": 1}, "cpu value=1i 5"),
        ("cpu load", {"host": "a b"}, {"v": 1.5}, r"cpu\ load,host=a\ b v=1.5 5"),
        ("m,x", {"k=y": "v,z"}, {"f=1": True}, r"m\,x,k\=y=v\,z f\=1=true 5"),
        ("m", {"b": "2", "a": "1"}, {"s": 'say "hi" \\ bye'}, 'm,a=1,b=2 s="say \\"hi\\" \\\\ bye" 5'),
        ("m", {"t": "line\nbreak"}, {"f": False}, r"m,t=line\nbreak f=false 5"),
        ("a\\b", {"path": "C:\\dir\\"}, {"k\\": 1}, r"a\b,path=C:\dir\\ k\\=1i 5"),
        ("m", {}, {"s": "two\nlines"}, r'm s="two\nlines" 5'),
        ("m", {"empty": ""}, {"f": -3}, "m f=-3i 5"),
    ],
)
def test_escaping_examples(measurement, tags, fields, expected):
    assert serialize(measurement, tags, fields, 5) == expected


def test_bool_is_not_serialised_as_int():
    assert format_field(True) == "true"
    assert format_field(1) == "1i"


def test_nonfinite_floats_are_dropped_and_counted():
    acc = Accumulator({"host": "h"}, time_ns=7)
    acc.add_fields("m", {"a": float("nan"), "b": float("inf"), "c": float("-inf"), "d": 1.0})
    assert acc.nonfinite_dropped == 3
    assert to_lines(acc.points) == "m,host=h d=1.0 7\n"


def test_point_with_only_missing_fields_is_not_emitted():
    acc = Accumulator()
    assert acc.add_fields("m", {"a": None, "b": float("nan")}) is None
    assert acc.points == [] and acc.empty_dropped == 1 and acc.nonfinite_dropped == 1


def test_serialiser_refuses_nonfinite_even_without_accumulator():
    with pytest.raises(ValueError):
        Point("m", {}, {"x": float("nan")}, 1).to_line()


def test_accumulator_refuses_unsupported_types_naming_the_field():
    acc = Accumulator()
    with pytest.raises(TypeError, match=r"m\.x"):
        acc.add_fields("m", {"x": [1, 2]})


def test_accumulator_tags_and_time():
    acc = Accumulator({"host": "h", "dc": "a"}, time_ns=10)
    p = acc.add_fields("m", {"v": 1}, tags={"gpu": 0, "dc": "b", "none": None})
    assert p.tags == {"host": "h", "dc": "b", "gpu": "0"}
    assert p.time_ns == 10
    q = acc.add_fields("m", {"v": 1}, time_ns=99)
    assert q.time_ns == 99
