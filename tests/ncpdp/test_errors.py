"""Every error path: type, offset, segment_id, field_id, and the lenient decisions."""

from __future__ import annotations

import pytest

import ncpdp
from ncpdp import ParseError
from tests import builders as b

from .samples import LITERAL_51_REJECT, LITERAL_D0_B1, LITERAL_F6_B1

REQ = LITERAL_D0_B1
RESP = LITERAL_51_REJECT
CLAIM_AT = REQ.index(b"\x1e\x1cAM07")
D2_AT = REQ.index(b"\x1cD2")


def _err(data: bytes | str, strict: bool = True) -> ParseError:
    with pytest.raises(ParseError) as info:
        ncpdp.parse(data, strict=strict)
    return info.value


# (name, input, reason fragment, offset, segment_id, field_id)
CASES: list[tuple[str, bytes, str, int, str | None, str | None]] = [
    ("empty", b"", "empty input", 0, None, None),
    ("too short", b"610014D0B1", "too short", 10, None, None),
    ("header only, odd length", REQ[:40], "no segment", 40, None, None),
    (
        "no separator after a header",
        REQ[:56] + b"X" * 30,
        "no segment or group separator",
        56,
        None,
        None,
    ),
    ("separator too early", REQ[:20] + b"\x1e\x1cAM04", "found 20", 20, None, None),
    (
        "field separator inside the header",
        REQ[:10] + b"\x1c" + REQ[11:],
        "inside the fixed-width header",
        10,
        None,
        None,
    ),
    ("unknown version", REQ[:6] + b"E9" + REQ[8:], "unknown version/release 'E9'", 6, None, "A2"),
    (
        "F6 in a 56-character header",
        REQ[:6] + b"F6" + REQ[8:],
        "version F6 has a 58-character request header, this one has 56",
        6,
        None,
        "A2",
    ),
    ("count not a digit", REQ[:20] + b"X" + REQ[21:], "must be 1 to 4, got 'X'", 20, None, "A9"),
    ("count disagrees", REQ[:20] + b"2" + REQ[21:], "says 2 but 1", 20, None, "A9"),
    ("count zero", REQ[:20] + b"0" + REQ[21:], "must be 1 to 4", 20, None, "A9"),
    (
        "five groups",
        REQ[:20] + b"5" + REQ[21:] + (REQ[REQ.index(b"\x1d") :]) * 4,
        "must be 1 to 4",
        20,
        None,
        "A9",
    ),
    (
        "empty field",
        REQ[:D2_AT] + b"\x1c" + REQ[D2_AT:],
        "empty field after field EM",
        D2_AT,
        "07",
        "EM",
    ),
    (
        "one-character field",
        REQ[:D2_AT] + b"\x1cX" + REQ[D2_AT:],
        "'X' after field EM is shorter than its 2-character id",
        D2_AT,
        "07",
        "EM",
    ),
    (
        "trailing field separator",
        REQ + b"\x1c",
        "lenient mode accepts a trailing one",
        len(REQ),
        "11",
        "DN",
    ),
    (
        "bad segment id field",
        REQ.replace(b"AM07", b"AM7", 1),
        "found 'AM7'",
        CLAIM_AT + 2,
        "7",
        "AM",
    ),
    (
        "segment without AM",
        REQ.replace(b"\x1cAM07", b"\x1cXX07", 1),
        "found 'XX07'",
        CLAIM_AT + 2,
        None,
        "AM",
    ),
    (
        "segment separator without field separator",
        REQ.replace(b"\x1e\x1cAM07", b"\x1eAM07", 1),
        "expected a field separator",
        CLAIM_AT + 1,
        None,
        None,
    ),
    (
        "empty segment",
        REQ.replace(b"\x1e\x1cAM07", b"\x1e\x1e\x1cAM07", 1),
        "empty segment",
        CLAIM_AT,
        None,
        None,
    ),
    (
        "text after the group separator",
        REQ.replace(b"\x1d\x1e", b"\x1dX\x1e", 1),
        "after the group separator",
        CLAIM_AT,
        None,
        None,
    ),
    ("empty transaction group", REQ + b"\x1d", "empty transaction group", len(REQ), None, None),
    ("trailing CR/LF", REQ + b"\r\n", "trailing framing", len(REQ), None, None),
    ("ETX", REQ + b"\x03", "trailing framing", len(REQ), None, None),
    ("STX", b"\x02" + REQ, "STX framing", 0, None, None),
]


@pytest.mark.parametrize(
    ("data", "reason", "offset", "segment_id", "field_id"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_error_paths(
    data: bytes, reason: str, offset: int, segment_id: str | None, field_id: str | None
) -> None:
    e = _err(data)
    assert isinstance(e, ncpdp.NcpdpError)
    assert reason in e.reason
    assert (e.offset, e.segment_id, e.field_id) == (offset, segment_id, field_id)
    assert f"byte offset {offset}" in str(e)
    assert "malformed transmission" not in str(e)  # the diagnostic path named the place


def test_message_names_offset_segment_and_field() -> None:
    e = _err(REQ[:D2_AT] + b"\x1c" + REQ[D2_AT:])
    assert str(e).endswith(f"(at byte offset {D2_AT}, segment AM07, field EM)")


def test_offsets_count_the_stx_in_lenient_mode() -> None:
    e = _err(b"\x02" + REQ[:D2_AT] + b"\x1c" + REQ[D2_AT:], strict=False)
    assert e.offset == D2_AT + 1


def test_non_latin1_str_is_refused_with_its_offset() -> None:
    e = _err(REQ.decode("latin-1")[:70] + "\u20ac")
    assert e.offset == 70


def test_parse_refuses_other_types() -> None:
    with pytest.raises(TypeError):
        ncpdp.parse(123)  # type: ignore[arg-type]


# --- lenient mode: what it accepts and says it accepted --------------------------


@pytest.mark.parametrize(
    ("data", "note"),
    [
        (b"\x02" + REQ + b"\x03", "ETX framing after the message"),
        (REQ + b"\r\n", "trailing CR/LF"),
        (REQ + b"\x1c", "trailing separator"),
        (RESP + b"\x1e", "trailing separator"),
        (REQ[:20] + b"2" + REQ[21:], "109-A9 says 2 but 1"),
        ((REQ[:20] + b"2" + REQ[21:]).replace(b"\x1d", b"\x1d\x1d"), "empty transaction group"),
    ],
)
def test_lenient_accepts_and_reports(data: bytes, note: str) -> None:
    with pytest.raises(ParseError):
        ncpdp.parse(data)
    t = ncpdp.parse(data, strict=False)
    assert any(note in x for x in t.tolerated), t.tolerated
    assert ncpdp.serialize(t) == data


def test_lenient_still_refuses_structural_errors() -> None:
    e = _err(REQ[:D2_AT] + b"\x1c" + REQ[D2_AT:], strict=False)
    assert (e.segment_id, e.field_id) == ("07", "EM")


def test_a_response_rejected_at_header_level_may_have_no_group() -> None:
    header_only = RESP[:31]
    t = ncpdp.parse(header_only)
    assert t.groups == () and ncpdp.serialize(t) == header_only


def test_model_refuses_separators_and_bad_widths() -> None:
    with pytest.raises(ncpdp.ModelError):
        ncpdp.Segment("07", [("D2", "12\x1c34")])
    with pytest.raises(ncpdp.ModelError):
        ncpdp.Segment("7", [])
    with pytest.raises(ncpdp.ModelError):
        ncpdp.Segment("07", [("D", "1")])
    with pytest.raises(ncpdp.ModelError):
        ncpdp.RequestHeader("too short")
    with pytest.raises(ncpdp.ModelError):
        ncpdp.Segment("07", [("D2", "\u20ac")])
    with pytest.raises(ncpdp.SerializeError):
        ncpdp.serialize("not a transmission")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"kind": "other"},
        {"kind": "request", "header": 3},
        {"kind": "request", "header": [{"id": ["A1"], "value": "x"}]},
        {"kind": "response", "header": []},
        {"kind": "response", "header": [{"id": "A2", "value": "D0"}]},
    ],
)
def test_from_jsonable_raises_only_model_error(doc: object) -> None:
    with pytest.raises(ncpdp.ModelError):
        ncpdp.from_jsonable(doc)


def test_from_jsonable_checks_every_part() -> None:
    good = ncpdp.to_jsonable(ncpdp.parse(RESP))
    for key, bad in [
        ("segments", 5),
        ("transactions", "x"),
        ("framing", 3),
        ("tolerated", 2),
        ("transactions", [3]),
        ("segments", [{"id": "20", "fields": [{"id": "F4"}]}]),
        ("segments", [{"id": "20", "fields": 7}]),
        ("segments", [{"id": 20}]),
        ("framing", {"leading": 1}),
    ]:
        with pytest.raises(ncpdp.ModelError):
            ncpdp.from_jsonable({**good, key: bad})


# --- issue 17 ----------------------------------------------------------------------

F6_REQ = LITERAL_F6_B1
F6_CLAIM_AT = F6_REQ.index(b"\x1e\x1cAM07")


def test_f6_refuses_a_group_separator_in_strict_mode_and_reports_it_in_lenient() -> None:
    data = F6_REQ[:F6_CLAIM_AT] + b"\x1d" + F6_REQ[F6_CLAIM_AT:]
    e = _err(data)
    assert "F6 transmissions have none" in e.reason and e.offset == F6_CLAIM_AT
    t = ncpdp.parse(data, strict=False)
    assert t.group_separators and len(t.groups) == 1
    assert any("F6 transmissions have none" in x for x in t.tolerated)
    assert ncpdp.serialize(t) == data
    assert ncpdp.serialize(ncpdp.from_jsonable(ncpdp.to_jsonable(t))) == data


def test_f6_carries_one_transaction() -> None:
    e = _err(F6_REQ[:22] + b"2" + F6_REQ[23:])
    assert "must be 1 to 1" in e.reason and (e.offset, e.field_id) == (22, "A9")


def test_f6_header_slots_are_checked_at_their_f6_places() -> None:
    e = _err(F6_REQ[:4] + b"6100140X" + F6_REQ[12:])
    assert "A1 (IIN) must be 8 digits" in e.reason and (e.offset, e.field_id) == (4, "A1")
    e = _err(F6_REQ[:40] + b"20260229" + F6_REQ[48:])
    assert (e.offset, e.field_id) == (40, "D1")


def test_a_58_character_header_must_say_f6() -> None:
    e = _err(b"D0" + F6_REQ[2:])
    assert "version D0 has a 56-character request header" in e.reason and e.offset == 0


@pytest.mark.parametrize("strict", [True, False])
def test_a_batch_detail_record_is_named_as_such(strict: bool) -> None:
    record = b"\x02G1SYNREF0001" + REQ + b"\x03"
    e = _err(record, strict=strict)
    assert "batch detail record" in e.reason and "parse_batch" in e.reason
    assert e.offset == 0
    e = _err(b.batch_header() + record, strict=strict)  # by the header record's layout
    assert "batch file" in e.reason and e.offset == 0


def test_strict_mode_raises_at_the_first_problem_lenient_lists_every_one() -> None:
    data = b"61OO14" + REQ[6 : D2_AT + 5] + b"\x00" + REQ[D2_AT + 6 :]
    e = _err(data)
    assert e.field_id == "A1"  # the first problem only
    t = ncpdp.parse(data, strict=False)
    assert len(t.tolerated) == 2
    assert "A1 (BIN Number)" in t.tolerated[0] and "0x00" in t.tolerated[1]
    assert ncpdp.serialize(t) == data


def test_a_non_printable_byte_in_the_header_names_its_slot() -> None:
    e = _err(REQ[:12] + b"\x7f" + REQ[13:])
    assert "0x7F outside printable ASCII in header field A4" in e.reason
    assert (e.offset, e.field_id) == (12, "A4")


def test_a_non_printable_segment_id_is_refused() -> None:
    e = _err(REQ.replace(b"AM07", b"AM0\xe9", 1))
    assert "0xE9" in e.reason and e.segment_id == "0\xe9" and e.field_id == "AM"


def test_a_response_without_group_and_a_bad_count_says_so() -> None:
    assert ncpdp.parse(RESP[:31]).groups == ()
    e = _err(b"D0B11A011999999976     20261123")
    assert "must be rejected at header level" in e.reason and e.field_id == "F1"
