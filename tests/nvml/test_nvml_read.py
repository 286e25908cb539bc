"""gpuagent.nvml_read: sentinels and field-value decoding (shared by the core collectors)."""

from __future__ import annotations

import pynvml
import pytest

from gpuagent.nvml_read import field_value, valid


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
    assert (
        field_value(make_field(pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 123456789012))
        == 123456789012
    )
    assert field_value(make_field(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 71)) == 71
    assert field_value(make_field(pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 1.5)) == 1.5
    assert field_value(make_field(pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 0xFFFFFFFF)) is None
    assert (
        field_value(make_field(pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**64 - 1))
        is None
    )
    assert field_value(make_field(pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sllVal", -1)) is None
    refused = make_field(
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 5, ret=pynvml.NVML_ERROR_NOT_SUPPORTED
    )
    assert field_value(refused) is None
