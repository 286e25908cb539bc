import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from influxdb_client import Point as ClientPoint
from influxdb_client.domain.write_precision import WritePrecision
from lineprotocol_parser import parse_line

from gpuagent import Accumulator
from gpuagent.pipeline.metric import Point, format_field, serialize, to_lines
from gpuagent.pipeline.names import RESERVED_KEYS

# Names may hold any printable character, delimiters and backslashes included.
# Left to the examples below: a backslash before a delimiter, a double quote or at the end
# (the agent refuses such a measurement: influxd misreads it) and CR/LF/TAB, which InfluxDB
# itself cannot store unchanged.
_AWKWARD = re.compile(r'\\([,= "]|$)')
names = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\x00")
    | st.sampled_from([",", "=", " ", "\\", '"']),
    min_size=1,
    max_size=20,
).filter(lambda s: not s.startswith("#") and not _AWKWARD.search(s) and s not in RESERVED_KEYS)
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
@pytest.mark.slow
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
    fields=st.dictionaries(
        names,
        st.one_of(
            st.integers(-(2**63), 2**63 - 1),
            st.booleans(),
            st.text(max_size=20).filter(lambda s: "\n" not in s and "\r" not in s),
        ),
        min_size=1,
        max_size=4,
    ),
    ts=st.integers(min_value=0, max_value=2**62),
)
@pytest.mark.slow
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
        # A line break or a trailing backslash cannot be stored in a tag: the tag is left out.
        ("m", {"t": "line\nbreak", "u": "x"}, {"f": False}, r"m,u=x f=false 5"),
        ("a\\b", {"path": "C:\\dir\\", "p": "C:\\dir"}, {"k\\": 1, "k": 2}, r"a\b,p=C:\dir k=2i 5"),
        # A backslash before a delimiter stays one backslash: influxd stores a\,b as it was sent.
        ("m", {"t": "a\\,b"}, {"v": 1}, r"m,t=a\\,b v=1i 5"),
        ("m", {"time": "x", "t\tab": "a\x00"}, {"time": 1, "v": 1}, "m v=1i 5"),
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


def test_integers_outside_int64_are_dropped_and_counted():
    import enum

    class Big(enum.IntEnum):
        HUGE = 2**64 - 1  # an unsigned 64-bit counter's all-ones

    acc = Accumulator({"host": "h"}, time_ns=7)
    acc.add_fields("m", {"max": 2**63 - 1, "min": -(2**63), "over": 2**63, "under": -(2**63) - 1, "e": Big.HUGE})
    assert acc.out_of_range_dropped == 3 and acc.nonfinite_dropped == 0
    assert to_lines(acc.points) == f"m,host=h max={2**63 - 1}i,min={-(2**63)}i 7\n"


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


# -- against the real influxd 1.6: what is written is what is stored ------------------------------

_AWKWARD_ALPHABET = '\\,= "ab#\t\x00é_'


def _awkward_names(count: int, seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    out = {
        "a\\,b",
        "a\\\\,b",
        "\\",
        "x\\",
        "a\\ b",
        "a\\=b",
        "C:\\dir\\",
        "\\,",
        ",",
        "=",
        " ",
        "a b",
        "#x",
        "time",
        "_field",
        "tab\there",
        'q"uote',
        "end\\\\",
    }
    while len(out) < count:
        out.add("".join(rng.choice(_AWKWARD_ALPHABET) for _ in range(rng.randint(1, 6))))
    return sorted(out)


@pytest.mark.servers
def test_every_tag_value_and_key_is_stored_unchanged_or_refused_by_our_rules(influxdb_v1):
    from gpuagent.pipeline import names as rules

    db = "lp_names"
    influxdb_v1.create_database(db)
    candidates = _awkward_names(300, seed=23)
    lines = [serialize("m", {"t": v, "k": "x"}, {"v": i}, i + 1) for i, v in enumerate(candidates)]
    lines += [serialize("keys", {k: "x"}, {"v": i}, i + 1) for i, k in enumerate(candidates)]
    lines += [serialize("fields", {}, {k: i}, 1) for i, k in enumerate(candidates)]
    influxdb_v1.write([line for line in lines if line], db)  # 204: nothing we wrote was refused
    stored_values = {
        v for s in influxdb_v1.query('SHOW TAG VALUES FROM "m" WITH KEY = "t"', db) for _, v in s["values"]
    }
    stored_keys = {k for s in influxdb_v1.query('SHOW TAG KEYS FROM "keys"', db) for (k,) in s["values"]}
    stored_fields = {k for s in influxdb_v1.query('SHOW FIELD KEYS FROM "fields"', db) for k, _ in s["values"]}
    ok_values = {v for v in candidates if rules.tag_value_problem(v) is None}
    ok_keys = {k for k in candidates if rules.tag_key_problem(k) is None}
    ok_fields = {k for k in candidates if rules.field_key_problem(k) is None}
    assert stored_values == ok_values
    assert stored_keys == ok_keys
    assert stored_fields == ok_fields
    assert "a\\,b" in stored_values and "a\\\\,b" in stored_values  # not doubled
    assert len(ok_values) > 150 and len(candidates) - len(ok_values) >= 4


@pytest.mark.servers
@pytest.mark.parametrize("value", ["\\\\fileserver\\gpu\\", "x\\"])
def test_a_trailing_backslash_is_refused_by_influxd_whatever_the_escaping(influxdb_v1, value):
    """Why names.py refuses it: neither one nor two backslashes at the end survive influxd's parser."""
    from gpuagent.pipeline import names as rules

    assert rules.tag_value_problem(value) and "backslash" in rules.tag_value_problem(value)
    for wire in (value, value + "\\"):
        with pytest.raises(RuntimeError, match="invalid tag format"):
            influxdb_v1.write(f"m,t={wire} v=1i 1")


@pytest.mark.servers
@pytest.mark.parametrize("measurement", ["m,n", "m n", "m=n", "m\\x", "cpu"])
def test_measurement_names_are_stored_unchanged(influxdb_v1, measurement):
    db = "lp_measurements"
    influxdb_v1.create_database(db)
    influxdb_v1.write(serialize(measurement, {}, {"v": 1}, 1), db)
    stored = {name for s in influxdb_v1.query("SHOW MEASUREMENTS", db) for (name,) in s["values"]}
    assert measurement in stored


def test_bad_names_cost_the_tag_or_field_not_the_point_and_warn_once(caplog):
    import logging

    with caplog.at_level(logging.WARNING, logger="gpuagent.pipeline.names"):
        for _ in range(3):
            line = Point("m", {"ok": "1", "bad": "once-23\\", "time": "t"}, {"v": 1, "time": 2}, 7).to_line()
            assert line == "m,ok=1 v=1i 7"
        assert Point("#comment", {}, {"v": 1}, 1).to_line() == ""
        assert Point("m", {}, {"time": 1}, 1).to_line() == ""  # no field left: not written
        assert to_lines([Point("#c", {}, {"v": 1}, 1), Point("m", {}, {"v": 1}, 1)]) == "m v=1i 1\n"
    warned = [r.getMessage() for r in caplog.records]
    assert sum("once-23" in m for m in warned) == 1, warned  # three points, one warning
    assert any("#comment" in m for m in warned)


@pytest.mark.servers
def test_text_that_is_not_utf8_is_written_as_escapes_not_lost(influxdb_v1):
    """A third-party collector's lone surrogates (issue 28, item 3): psutil's surrogateescape byte
    reads \\xNN, any other lone surrogate U+FFFD; the point, its tag and its field are all kept."""
    db = "lp_not_utf8"
    influxdb_v1.create_database(db)
    point = Point("m\udcfe", {"job": "train\udcffjob", "k\ud800": "v"}, {"name": "a\udc80\ud83d", "v": 1}, 5)
    line = point.to_line()
    line.encode("utf-8")  # what the delivery encoder, the spool and the file sink do
    influxdb_v1.write(line, db)
    (series,) = influxdb_v1.query("SELECT * FROM /.*/ GROUP BY *", db)
    assert series["name"] == "m\\xfe"
    assert series["tags"] == {"job": "train\\xffjob", "k\ufffd": "v"}
    row = dict(zip(series["columns"], series["values"][0], strict=True))
    assert row["name"] == "a\\x80\ufffd" and row["v"] == 1


@given(st.text())
def test_string_values_escape_as_the_table_does(text):
    # escape_text skips str.translate for values that need nothing (issue 42); same text always.
    from gpuagent.pipeline.metric import _STRING, escape_text

    assert escape_text(text) == text.translate(_STRING)
    for tricky in ('a"b', "a\\b", "a\nb", "a\rb", "caf\u00e9", "\udcff", "plain 00000000:CC:00.0"):
        assert escape_text(tricky) == tricky.translate(_STRING)


def test_accumulator_keeps_field_order_without_nones_and_leaves_the_callers_dict():
    # The usual point is copied whole and its Nones deleted (issue 42); the rest goes field by field.
    acc = Accumulator({"host": "h"}, time_ns=1)
    fields = {"a": 1.5, "b": None, "c": "x", "d": True, "e": None, "f": 2}
    point = acc.add_fields("m", fields, tags={"gpu": "0"})
    assert list(point.fields.items()) == [("a", 1.5), ("c", "x"), ("d", True), ("f", 2)]
    assert fields["b"] is None and len(fields) == 6
    nan = acc.add_fields("m", {"a": None, "b": math.nan, "c": 2**63, "d": 3})
    assert list(nan.fields.items()) == [("d", 3)]
    assert (acc.nonfinite_dropped, acc.out_of_range_dropped) == (1, 1)
    assert acc.add_fields("m", {"a": None}) is None and acc.empty_dropped == 1
