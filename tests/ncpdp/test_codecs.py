"""Codecs, both directions, exact Decimal."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ncpdp
from ncpdp import CodecError

OVERPUNCH = [
    ("{", 1, 0), ("A", 1, 1), ("B", 1, 2), ("C", 1, 3), ("D", 1, 4), ("E", 1, 5),
    ("F", 1, 6), ("G", 1, 7), ("H", 1, 8), ("I", 1, 9),
    ("}", -1, 0), ("J", -1, 1), ("K", -1, 2), ("L", -1, 3), ("M", -1, 4), ("N", -1, 5),
    ("O", -1, 6), ("P", -1, 7), ("Q", -1, 8), ("R", -1, 9),
]  # fmt: skip


@pytest.mark.parametrize(("char", "sign", "digit"), OVERPUNCH)
def test_overpunch_table(char: str, sign: int, digit: int) -> None:
    value = Decimal(sign * (120 + digit)).scaleb(-2)
    assert ncpdp.decode_overpunch("12" + char) == value
    if value != 0:
        assert ncpdp.encode_overpunch(value) == "12" + char


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("123{", Decimal("12.30")),
        ("123}", Decimal("-12.30")),
        ("1234{", Decimal("123.40")),
        ("0050J", Decimal("-5.01")),
        ("1299E", Decimal("129.95")),
        ("000000{", Decimal("0.00")),
        ("12345", Decimal("123.45")),  # unsigned, seen from some payers: positive
    ],
)
def test_overpunch_decode(raw: str, value: Decimal) -> None:
    got = ncpdp.decode_overpunch(raw)
    assert got == value and str(got) == str(value)  # exact, scale kept


def test_overpunch_encode_negative_and_width() -> None:
    assert ncpdp.encode_overpunch(Decimal("-12.30")) == "123}"
    assert ncpdp.encode_overpunch(Decimal("-0.01"), width=8) == "0000000J"
    assert ncpdp.encode_overpunch(Decimal("123.40"), width=8) == "0001234{"
    assert ncpdp.encode_overpunch(Decimal("0.5")) == "5{"


@pytest.mark.parametrize("bad", ["", "12X", "1 2{", "{{", "\uff112{", "²{"])
def test_overpunch_decode_errors(bad: str) -> None:
    with pytest.raises(CodecError) as info:
        ncpdp.decode_overpunch(bad)
    assert info.value.value == bad
    assert isinstance(info.value, ncpdp.NcpdpError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("value", "width"),
    [
        (Decimal("1.234"), None),
        (Decimal("123456.78"), 4),
        (Decimal("NaN"), None),
        (Decimal("Infinity"), None),
    ],
)
def test_overpunch_encode_errors(value: Decimal, width: int | None) -> None:
    with pytest.raises(CodecError):
        ncpdp.encode_overpunch(value, width=width)


@settings(max_examples=250, deadline=None, derandomize=True, database=None)
@given(st.decimals(min_value=-999999, max_value=999999, places=2, allow_nan=False))
def test_overpunch_round_trip(value: Decimal) -> None:
    assert ncpdp.decode_overpunch(ncpdp.encode_overpunch(value)) == value


def test_implied_decimals_442_e7_has_three() -> None:
    assert ncpdp.decode_implied("30000", 3) == Decimal("30.000")
    assert ncpdp.decode_implied("0000030000", 3) == Decimal("30.000")
    assert ncpdp.encode_implied(Decimal("30"), 3) == "30000"
    assert ncpdp.encode_implied(Decimal("1.5"), 3, width=10) == "0000001500"
    assert ncpdp.FIELDS["E7"].places == 3


@pytest.mark.parametrize(
    ("value", "places", "width"),
    [
        (Decimal("1.2345"), 3, None),
        (Decimal("-1"), 3, None),
        (Decimal("12345"), 3, 4),
        (Decimal("Infinity"), 3, None),
    ],
)
def test_implied_encode_errors(value: Decimal, places: int, width: int | None) -> None:
    with pytest.raises(CodecError):
        ncpdp.encode_implied(value, places, width)


@pytest.mark.parametrize("bad", ["", "   ", "3.0", "-30", "²0", "30 00"])
def test_implied_decode_errors(bad: str) -> None:
    with pytest.raises(CodecError):
        ncpdp.decode_implied(bad, 3)


@settings(max_examples=250, deadline=None, derandomize=True, database=None)
@given(st.decimals(min_value=0, max_value=9999999, places=3, allow_nan=False))
def test_implied_round_trip(value: Decimal) -> None:
    assert ncpdp.decode_implied(ncpdp.encode_implied(value, 3), 3) == value


def test_dates() -> None:
    assert ncpdp.decode_date("20261123") == dt.date(2026, 11, 23)
    assert ncpdp.encode_date(dt.date(1961, 4, 7)) == "19610407"
    assert ncpdp.encode_date(dt.date(5, 1, 2)) == "00050102"


@pytest.mark.parametrize("bad", ["2026112", "20261131", "2026-11-", "²0261123", "202611231"])
def test_date_errors(bad: str) -> None:
    with pytest.raises(CodecError):
        ncpdp.decode_date(bad)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.dates())
def test_date_round_trip(d: dt.date) -> None:
    assert ncpdp.decode_date(ncpdp.encode_date(d)) == d


def test_decode_value_uses_the_field_dictionary() -> None:
    assert ncpdp.decode_value("E7", "30000") == "30.000"
    assert ncpdp.decode_value("D9", "123}") == "-12.30"
    assert ncpdp.decode_value("C4", "19610407") == "1961-04-07"
    assert ncpdp.decode_value("D5", "030") == 30
    assert ncpdp.decode_value("D5", "²0") is None
    assert ncpdp.decode_value("F9", "250E*AD0") is None  # glued text: raw only
    assert ncpdp.decode_value("CA", "NAME") is None
    assert ncpdp.decode_value("&B", "X") is None


@pytest.mark.parametrize(
    ("raw", "value"),
    [(" 123{", Decimal("12.30")), ("123} ", Decimal("-12.30")), ("  0050J  ", Decimal("-5.01"))],
)
def test_overpunch_ignores_leading_and_trailing_blanks_like_implied(
    raw: str, value: Decimal
) -> None:
    """Issue 17: padded amounts in batch lines got no decoded value."""
    assert ncpdp.decode_overpunch(raw) == value
    assert ncpdp.decode_implied(" 30000 ", 3) == Decimal("30.000")
    assert ncpdp.decode_value("D9", " 1234{ ") == "123.40"


@pytest.mark.parametrize("bad", ["   ", " 1 2{ "])
def test_overpunch_blanks_inside_or_only_are_still_refused(bad: str) -> None:
    with pytest.raises(ncpdp.CodecError):
        ncpdp.decode_overpunch(bad)
