"""The one duration grammar and the one byte-size grammar (gpuagent.units)."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuagent.units import format_duration, parse_bytes, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("10s", 10),
        ("1m30s", 90),
        ("2min", 120),
        ("1h", 3600),
        ("1d", 86400),
        ("250us", 250e-6),
        ("1.5s", 1.5),
        (" 2 s ", 2),
        (3, 3.0),
        (0.25, 0.25),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_unitless_text_is_seconds_only_where_allowed():
    assert parse_duration("20", unitless=True) == 20.0
    with pytest.raises(ValueError, match='with a unit such as "20s"'):
        parse_duration("20")


@pytest.mark.parametrize(
    "bad", ["fast", "10 parsecs", "-5s", "0s", "", True, None, [1], float("nan"), float("inf"), -1]
)
def test_bad_durations_are_one_line_errors(bad):
    with pytest.raises(ValueError) as err:
        parse_duration(bad)
    assert "\n" not in str(err.value) and "duration" in str(err.value)


@given(st.floats(min_value=1e-3, max_value=1e6))
def test_format_round_trips(seconds):
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds, rel=1e-5)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("512M", 512 << 20),
        ("512MiB", 512 << 20),
        ("512MB", 512_000_000),
        ("512mb", 512_000_000),
        ("96MB", 96_000_000),
        ("1G", 1 << 30),
        ("1GiB", 1 << 30),
        ("1GB", 10**9),
        ("4096", 4096),
        ("64K", 64 << 10),
        ("1.5KiB", 1536),
        ("2T", 2 << 40),
        ("7B", 7),
        (8192, 8192),
        (1024.0, 1024),
    ],
)
def test_sizes(text, size):
    assert parse_bytes(text) == size


@pytest.mark.parametrize("bad", ["lots", "5 parsecs", "-1M", "0", 0, True, 1.5, None, "1Mb/s"])
def test_bad_sizes_name_the_grammar(bad):
    with pytest.raises(ValueError) as err:
        parse_bytes(bad)
    assert "\n" not in str(err.value) and "size" in str(err.value)


@given(st.integers(min_value=1, max_value=1 << 50))
def test_integer_strings_are_bytes(n):
    assert parse_bytes(str(n)) == n and not math.isnan(n)


@pytest.mark.parametrize("bad", ["0", "-5", "0.0"])
def test_a_number_that_is_no_duration_is_not_told_to_add_a_unit(bad):
    """`--step 0` once suggested "0s", itself refused: the suggestion must be a valid value."""
    with pytest.raises(ValueError) as err:
        parse_duration(bad)
    assert str(err.value) == f'expected a positive duration such as "10s", got "{bad}"'
    assert parse_duration("10s") == 10
