"""gpuagent.gpus.nvml_read: sentinels and field-value decoding (shared by the core collectors)."""

from __future__ import annotations

import pynvml
import pytest

from gpuagent.gpus.nvml_read import field_value, valid


@pytest.mark.parametrize(
    "value, zero, expected",
    [
        (0xFFFFFFFF, True, None),
        (0xFFFFFFFFFFFFFFFF, True, None),
        (-1, True, None),
        (0, True, 0),
        (0, False, None),
        (1410, False, 1410),
        (float("nan"), True, None),
        (0.0, False, None),
        (42.5, True, 42.5),
        (True, True, True),
        (None, True, None),
    ],
)
def test_valid(value, zero, expected):
    assert valid(value, zero=zero) == expected


def make_field(value_type, member, value, ret=pynvml.NVML_SUCCESS):
    fv = pynvml.c_nvmlFieldValue_t()
    fv.nvmlReturn = ret
    fv.valueType = value_type
    setattr(fv.value, member, value)
    return fv


def test_field_value_decodes_by_type_and_drops_sentinels():
    assert field_value(make_field(pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 123456789012)) == 123456789012
    assert field_value(make_field(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 71)) == 71
    assert field_value(make_field(pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 1.5)) == 1.5
    assert field_value(make_field(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 0xFFFFFFFF)) is None
    assert field_value(make_field(pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**64 - 1)) is None
    assert field_value(make_field(pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sllVal", -1)) is None
    refused = make_field(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 5, ret=pynvml.NVML_ERROR_NOT_SUPPORTED)
    assert field_value(refused) is None


# Every value type with its sentinels and edge values, and codes besides SUCCESS.
_DECODE_CASES = (
    [(pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", v) for v in (1.5, 0.0, -2.0, float("inf"), float("nan"))]
    + [(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", v) for v in (5, 0, 0xFFFFFFFF, 0xFFFFFFFE)]
    + [(pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG, "ulVal", v) for v in (5, 2**40, 2**64 - 1)]
    + [(pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", v) for v in (7, 2**32 - 1, 2**64 - 1, 2**63)]
    + [(pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sllVal", v) for v in (-5, 7, 2**62)]
    + [(pynvml.NVML_VALUE_TYPE_SIGNED_INT, "siVal", v) for v in (-5, 7)]
    + [(pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, "usVal", v) for v in (12, 0, 0xFFFF)]
    + [(99, "ullVal", 3)]
)  # a value type this agent does not know


def test_decode_batch_reads_every_entry_as_field_value_does():
    """The batch decoder (one struct pass over the array's bytes) and the per-entry reader agree
    on every type, sentinel and code: the faster path claims nothing the slower one would not."""
    import math

    from gpuagent.gpus.nvml_read import decode_batch

    codes = (pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_GPU_IS_LOST)
    cases = [(t, m, v, code) for t, m, v in _DECODE_CASES for code in codes]
    array = (pynvml.c_nvmlFieldValue_t * len(cases))()
    for entry, (value_type, member, value, code) in zip(array, cases, strict=True):
        entry.valueType, entry.nvmlReturn = value_type, code
        setattr(entry.value, member, value)
    decoded = decode_batch(array)
    assert len(decoded) == len(cases)
    for (value_type, _member, value, code), entry, (got_code, got) in zip(cases, array, decoded, strict=True):
        want = field_value(entry)
        assert got_code == code
        if isinstance(want, float) and math.isnan(want):
            assert isinstance(got, float) and math.isnan(got)
        else:
            assert got == want and type(got) is type(want), (value_type, value, code, got, want)
    # and the answers are not all None: the fast path reads real values
    assert (pynvml.NVML_SUCCESS, 5) in decoded and (pynvml.NVML_SUCCESS, 1.5) in decoded


def test_decode_batch_word_path_agrees_with_field_value():
    """The usual batch (all answered, unsigned values) is read as 8-byte words; it must give what
    the per-entry reader gives, and hand anything unusual (a sentinel, an error, an unsigned int
    whose union has a non-zero high half) to the per-entry path with the same result."""
    import itertools

    from gpuagent.gpus.nvml_read import _decode_words, decode_batch

    def batch(entries):
        array = (pynvml.c_nvmlFieldValue_t * len(entries))()
        for entry, (value_type, member, value, code) in zip(array, entries, strict=True):
            entry.valueType, entry.nvmlReturn = value_type, code
            setattr(entry.value, member, value)
        return array

    ui, ull = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    ok = pynvml.NVML_SUCCESS
    usual = [(ui, "uiVal", i * 7, ok) if i % 3 == 0 else (ull, "ullVal", i * 1_000_003, ok) for i in range(97)]
    array = batch(usual)
    assert _decode_words(array) is not None  # the fast path is taken ...
    assert decode_batch(array) == [(ok, field_value(fv)) for fv in array]  # ... and agrees
    assert decode_batch(array)[3] == (ok, 21) and decode_batch(array)[4] == (ok, 4_000_012)

    unusual = {
        "sentinel": usual[:5] + [(ull, "ullVal", 0xFFFFFFFFFFFFFFFF, ok)],
        "error": usual[:5] + [(ull, "ullVal", 5, pynvml.NVML_ERROR_NOT_SUPPORTED)],
        "double": usual[:5] + [(pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 2.5, ok)],
    }
    for name, entries in unusual.items():
        array = batch(entries)
        assert _decode_words(array) is None, name
        assert decode_batch(array) == [(fv.nvmlReturn, field_value(fv)) for fv in array], name
    # an unsigned int entry whose union's high half is not zero: only the low half is the value
    array = batch(usual[:4])
    array[0].value.ullVal = (5 << 32) | 9
    array[0].valueType = ui
    assert _decode_words(array) is None
    assert decode_batch(array)[0] == (ok, 9) == (ok, field_value(array[0]))
    assert list(itertools.islice(decode_batch(array), 1, None)) == [(ok, field_value(fv)) for fv in array[1:]]
