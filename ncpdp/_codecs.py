"""Value codecs: CCYYMMDD dates, implied decimals and signed overpunch amounts.

Exact in both directions: :class:`decimal.Decimal`, never float.
"""

from __future__ import annotations

import datetime as _dt
from decimal import Decimal

from ._errors import CodecError

__all__ = [
    "decode_date",
    "encode_date",
    "decode_implied",
    "encode_implied",
    "decode_overpunch",
    "encode_overpunch",
]

# Last character of a signed overpunch amount -> (sign, digit).
_OVERPUNCH_DECODE: dict[str, tuple[int, str]] = {"{": (1, "0"), "}": (-1, "0")}
for _i, _c in enumerate("ABCDEFGHI", start=1):
    _OVERPUNCH_DECODE[_c] = (1, str(_i))
for _i, _c in enumerate("JKLMNOPQR", start=1):
    _OVERPUNCH_DECODE[_c] = (-1, str(_i))
_OVERPUNCH_POS = "{ABCDEFGHI"
_OVERPUNCH_NEG = "}JKLMNOPQR"


def decode_date(value: str) -> _dt.date:
    """``"20261123"`` -> ``date(2026, 11, 23)``."""
    if len(value) != 8 or not value.isdigit() or not value.isascii():
        raise CodecError("date must be 8 digits CCYYMMDD", value=value)
    try:
        return _dt.date(int(value[:4]), int(value[4:6]), int(value[6:]))
    except ValueError:
        raise CodecError("not a calendar date", value=value) from None


def encode_date(value: _dt.date) -> str:
    """``date(2026, 11, 23)`` -> ``"20261123"``."""
    return f"{value.year:04d}{value.month:02d}{value.day:02d}"


def decode_implied(value: str, places: int) -> Decimal:
    """Unsigned number with ``places`` implied decimals: ``("30000", 3)`` -> ``30.000``."""
    digits = value.strip()
    if not digits.isdigit() or not digits.isascii():
        raise CodecError("implied-decimal value must be digits", value=value)
    return Decimal(digits).scaleb(-places)


def encode_implied(value: Decimal, places: int, width: int | None = None) -> str:
    """``(Decimal("30"), 3)`` -> ``"30000"``; zero-filled to ``width`` when given."""
    if not isinstance(value, Decimal) or not value.is_finite():
        raise CodecError("not a finite Decimal", value=str(value))
    scaled = value.scaleb(places)
    if scaled != scaled.to_integral_value() or scaled < 0:
        raise CodecError(
            f"not a non-negative value with at most {places} decimals", value=str(value)
        )
    text = str(int(scaled))
    if width is not None:
        if len(text) > width:
            raise CodecError(f"does not fit in {width} digits", value=str(value))
        text = text.zfill(width)
    return text


def decode_overpunch(value: str, places: int = 2) -> Decimal:
    """Signed overpunch: ``"123{"`` -> ``12.30``, ``"123}"`` -> ``-12.30``.

    Leading and trailing blanks are ignored, as :func:`decode_implied` ignores them
    (padded amounts in batch lines: ``" 123{ "``).
    """
    text = value.strip(" ")
    if not text:
        raise CodecError("empty overpunch value", value=value)
    head, last = text[:-1], text[-1]
    if last.isdigit():  # unsigned, seen from some payers; positive
        sign, digit = 1, last
    else:
        try:
            sign, digit = _OVERPUNCH_DECODE[last]
        except KeyError:
            raise CodecError("last character is not an overpunch sign", value=value) from None
    digits = head + digit
    if not digits.isdigit() or not digits.isascii():
        raise CodecError("overpunch value must be digits before its sign", value=value)
    return (Decimal(digits) * sign).scaleb(-places)


def encode_overpunch(value: Decimal, places: int = 2, width: int | None = None) -> str:
    """``Decimal("12.30")`` -> ``"123{"``; ``Decimal("-12.30")`` -> ``"123}"``."""
    if not isinstance(value, Decimal) or not value.is_finite():
        raise CodecError("not a finite Decimal", value=str(value))
    scaled = value.scaleb(places)
    if scaled != scaled.to_integral_value():
        raise CodecError(f"more than {places} decimals", value=str(value))
    n = int(scaled)
    text = str(abs(n))
    if width is not None:
        if len(text) > width:
            raise CodecError(f"does not fit in {width} digits", value=str(value))
        text = text.zfill(width)
    table = _OVERPUNCH_NEG if n < 0 or value.is_signed() else _OVERPUNCH_POS
    return text[:-1] + table[int(text[-1])]
