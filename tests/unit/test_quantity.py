"""model.parse_quantity: Kubernetes Quantities as published in capacities and consumedCapacity."""

from __future__ import annotations

from decimal import Decimal

import pytest

from ascend_dra.model import parse_quantity

ALLOWED = "(Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E, m)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # BUG (model.py): the suffix class `[kMGTPE]i?` has a lower-case k only, so "1Ki" -- the
        # kibibyte every Kubernetes object uses -- is rejected as "invalid quantity".
        pytest.param("1Ki", Decimal(1024), id="Ki"),
        pytest.param("1Mi", Decimal(2**20), id="Mi"),
        pytest.param("16Gi", Decimal(17179869184), id="Gi"),
        pytest.param("2Ti", Decimal(2 * 2**40), id="Ti"),
        pytest.param("1Pi", Decimal(2**50), id="Pi"),
        # BUG (model.py): "Ei" starts with "E", so it takes the exponent branch and raises
        # "invalid literal for int() with base 10: 'i'".
        pytest.param("1Ei", Decimal(2**60), id="Ei"),
        pytest.param("1.5Gi", Decimal(1610612736), id="fractional-binary"),
        pytest.param("1k", Decimal(1000), id="k"),
        pytest.param("3M", Decimal(3 * 10**6), id="M"),
        pytest.param("32G", Decimal(32 * 10**9), id="G"),
        pytest.param("1T", Decimal(10**12), id="T"),
        pytest.param("1P", Decimal(10**15), id="P"),
        pytest.param("1E", Decimal(10**18), id="E-is-exa-not-exponent"),
        pytest.param("500m", Decimal("0.5"), id="milli"),
        pytest.param("250u", Decimal("0.00025"), id="micro"),
        pytest.param("7n", Decimal("7e-9"), id="nano"),
        pytest.param("1e3", Decimal(1000), id="exponent-lower"),
        pytest.param("1E3", Decimal(1000), id="exponent-upper"),
        pytest.param("12e-1", Decimal("1.2"), id="negative-exponent"),
        pytest.param("100", Decimal(100), id="plain"),
        pytest.param("0", Decimal(0), id="zero"),
        pytest.param("0.25", Decimal("0.25"), id="plain-fraction"),
        pytest.param("+5", Decimal(5), id="explicit-plus"),
        pytest.param("-2Mi", Decimal(-2 * 2**20), id="negative"),
        pytest.param(" 4Gi ", Decimal(4 * 2**30), id="surrounding-space"),
        pytest.param(64, Decimal(64), id="int"),
    ],
)
def test_parse_quantity_values(text, expected):
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("Gi", id="suffix-only"),
        pytest.param("1Gb", id="unknown-suffix"),
        pytest.param("1 Gi", id="space-before-suffix"),
        pytest.param("1GiB", id="trailing-letters"),
        pytest.param("one", id="word"),
        pytest.param("1e", id="exponent-without-digits"),
        pytest.param("0x10", id="hex"),
    ],
)
def test_parse_quantity_rejects_text_that_is_not_a_quantity(text):
    with pytest.raises(ValueError) as raised:
        parse_quantity(text)
    assert str(raised.value) == (f"invalid quantity {text!r}: expected a number with an optional suffix {ALLOWED}")


@pytest.mark.parametrize(
    "text",
    [
        # BUG (model.py): the suffix alternative `[kMGTPE]i?` admits "ki", which is not in _SUFFIX,
        # so parse_quantity raises KeyError('ki') instead of ValueError.
        pytest.param("1ki", id="lower-case-ki"),
        # BUG (model.py): the number part `[0-9.]+` admits "1.2.3" and ".", which Decimal() rejects
        # with decimal.InvalidOperation (an ArithmeticError, not a ValueError).
        pytest.param("1.2.3", id="two-dots"),
        pytest.param(".", id="dot-only"),
    ],
)
def test_parse_quantity_rejects_malformed_numbers_and_suffixes_with_value_error(text):
    with pytest.raises(ValueError) as raised:
        parse_quantity(text)
    assert str(raised.value) == (f"invalid quantity {text!r}: expected a number with an optional suffix {ALLOWED}")
