"""Issue 25: what a pharmacy's real traffic showed, one test per defect.

Each of these failed before its fix: a framed claim of a BIN that starts with 00 or 99
read as a batch file, continued 526-FQ pieces joined with spaces, identifiers decoded
as numbers, F6 fields typed as text, AM27 unknown, F6-only fields passing in a D.0
message, a second AM07 in F6 unseen, about 120 D.0 field ids without a name, a leading
line break refused, an unbounded ``tolerated`` list, and batch offsets counted from two
different places.
"""

from __future__ import annotations

import json

import pytest

import ncpdp
from ncpdp import ParseError, Segment
from tests import builders as b

STX, ETX = b"\x02", b"\x03"

# BINs of the largest PBMs (public: printed on member cards and payer sheets), the
# NCPDP test BIN, and one of ours. The first three start with 00 or 99.
REAL_BINS = ["004336", "003858", "999999", "004740", "610014"]


# --- batch detection by the Batch 1.x header's layout ---------------------------------


@pytest.mark.parametrize("bin_", REAL_BINS)
@pytest.mark.parametrize("code", ["B1", "B2"])
def test_a_framed_claim_is_not_a_batch_file_whatever_its_bin(bin_: str, code: str) -> None:
    framed = STX + b.request_bytes(bin=bin_, code=code) + ETX
    assert not ncpdp.is_batch(framed)
    assert not ncpdp.is_batch(b"\r\n" + framed)
    t = ncpdp.parse(framed, strict=False)
    assert t.as_request().bin == bin_ and t.transaction_code == code
    assert bytes(t) == framed
    assert t.tolerated == ("STX framing before the header", "ETX framing after the message")
    # strict mode names the framing, not a batch file
    with pytest.raises(ParseError) as info:
        ncpdp.parse(framed)
    assert "STX framing before the header" in info.value.reason and info.value.offset == 0


@pytest.mark.parametrize("bin_", ["999999", "990000"])
def test_a_framed_response_or_f6_claim_is_not_a_batch_file(bin_: str) -> None:
    for raw in (
        b.response_bytes([b.REJECT_75]),
        b.request_bytes(version="F6", bin=bin_ + "01"),
        b.request_bytes(version="51", bin=bin_),
    ):
        framed = STX + raw + ETX
        assert not ncpdp.is_batch(framed)
        assert bytes(ncpdp.parse(framed, strict=False)) == framed


def test_a_real_batch_file_is_still_recognized_by_its_header_layout() -> None:
    data = b.batch_bytes([b.request_bytes(bin="004336")], between=b"\r\n")
    assert ncpdp.is_batch(data) and ncpdp.is_batch(b"\r\n" + data)
    assert ncpdp.is_batch(data.decode("latin-1"))
    for strict in (True, False):
        with pytest.raises(ParseError, match="NCPDP batch file") as info:
            ncpdp.parse(data, strict=strict)
        assert info.value.offset == 0
    # every transmission type of Batch 1.x: T transaction, R response, E error
    for kind in "TRE":
        assert ncpdp.is_batch(b.batch_bytes([], transmission_type=kind))
    # a trailer record alone is named as such too, a claim of BIN 99xxxx is not
    trailer = b.batch_trailer(2)
    with pytest.raises(ParseError, match="NCPDP batch file"):
        ncpdp.parse(trailer, strict=False)


# --- 526-FQ continued by 131-UG, with the 132-UH qualifiers --------------------------

#: A switch's reject (public samples of switch software show this shape): the payer
#: cuts its message every 40 characters, mid-word, and marks each cut with UG "+".
SWITCH_TEXT = (
    "NCPDP REJECT: TRANSACTION CODE (103-A3) IS INVALID. SUBMIT CLAIM AND REVERSAL SEPARATELY"
)


def test_continued_messages_are_joined_as_the_standard_says() -> None:
    pieces = b.continued(SWITCH_TEXT)
    # one cut falls after a space, one mid-word ("SE" + "PARATELY")
    assert len(pieces) == 3 and pieces[0].endswith(" ") and pieces[1].endswith(" SE")
    o = b.Outcome(status="R", reject_codes=("1S",), messages=(pieces, "CALL 8005550100"))
    tx = ncpdp.parse(b.response_bytes([o])).as_response().transactions[0]
    assert tx.additional_messages == (SWITCH_TEXT, "CALL 8005550100")
    assert tx.additional_message == SWITCH_TEXT + " CALL 8005550100"
    info = tx.additional_message_info
    assert [(m.qualifier, m.text) for m in info] == [("01", SWITCH_TEXT), ("04", "CALL 8005550100")]
    assert [m.pieces for m in info] == [3, 1]


def test_continuation_keeps_spaces_at_the_cut_and_trims_the_message() -> None:
    raw = (
        b"D0B11R011999999976     20261123\x1d\x1e\x1cAM21\x1cANR\x1cFA01\x1cFB75"
        b"\x1cUF03\x1cUH01\x1cFQPRIOR AUTH \x1cUG+\x1cUH02\x1cFQREQUIRED \x1cUG+"
        b"\x1cUH03\x1cFQFOR THIS DRUG   "
    )
    tx = ncpdp.parse(raw).as_response().transactions[0]
    assert tx.additional_messages == ("PRIOR AUTH REQUIRED FOR THIS DRUG",)
    # a trailing "+" with nothing after it ends the message
    tail = raw.replace(b"\x1cUH03\x1cFQFOR THIS DRUG   ", b"")
    tx = ncpdp.parse(tail).as_response().transactions[0]
    assert tx.additional_messages == ("PRIOR AUTH REQUIRED",)


# --- identifiers are strings ---------------------------------------------------------


def _values(doc: dict[str, object]) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for h in doc["header"]:  # type: ignore[attr-defined]
        out[h["id"]] = h
    for part in [doc["segments"], *(t["segments"] for t in doc["transactions"])]:  # type: ignore[attr-defined]
        for s in part:
            for f in s["fields"]:
                out.setdefault(f["id"], f)
    return out


def test_identifiers_keep_their_leading_zeros_in_json() -> None:
    d0 = ncpdp.parse(b.request_bytes(bin="004740", rxs=(b.Rx(rx_number="000005073519"),)))
    f6 = ncpdp.parse(b.request_bytes(version="F6", bin="00880151"))
    for t, ids in ((d0, {"A1": "004740", "D2": "000005073519"}), (f6, {"A1": "00880151"})):
        doc = json.loads(json.dumps(ncpdp.to_jsonable(t)))
        got = _values(doc)
        for fid, raw in ids.items():
            assert got[fid]["value"] == raw
            assert got[fid].get("decoded", raw) == raw, fid
    for fid, raw in {"A1": "004740", "D2": "000005073519", "PM": "0005550100", "DK": "08"}.items():
        assert ncpdp.decode_value(fid, raw) is None  # the value is the string itself
    # counts and quantities still decode to numbers
    assert ncpdp.decode_value("D5", "030") == 30 and ncpdp.decode_value("NX", "2") == 2


# --- F6 content ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field_id", "raw", "decoded"),
    [
        ("KX", "1234{", "123.40"),
        ("KN", "500}", "-50.00"),
        ("RS", "12E", "1.25"),
        ("6G", "100{", "10.00"),
        ("M1", "2500{", "250.00"),
        ("GB", "99999I", "9999.99"),
        ("M6", "1{", "0.10"),
        ("KW", "90000", "90.000"),
        ("YO", "2500", "2.500"),
        ("YJ", "125", "0.125"),
        ("GA", "065", 65),
        ("GR", "18", 18),
        ("GJ", "30", 30),
        ("KK", "7", 7),
        ("KM", "04", 4),
    ],
)
def test_f6_numeric_fields_are_typed(field_id: str, raw: str, decoded: object) -> None:
    assert ncpdp.FIELDS[field_id].since == "F6"
    assert ncpdp.decode_value(field_id, raw) == decoded


def test_am27_is_known_to_every_version() -> None:
    for version in ncpdp.VERSIONS:
        assert ncpdp.segment_name("27", version) == "Response Insurance Additional Information"
    raw = (
        b"D0B11A011999999976     20261123\x1e\x1cAM25\x1cC1SYNGRP01"
        b"\x1e\x1cAM27\x1cURX\x1cU1S9999\x1cFFSYNFORM1\x1cU6SYNBENEFIT"
        b"\x1d\x1e\x1cAM21\x1cANP"
    )
    t = ncpdp.parse(raw)
    assert [s.id for s in t.segments] == ["25", "27"]
    doc = ncpdp.to_jsonable(t)
    am27 = doc["segments"][1]
    assert am27["name"] == "Response Insurance Additional Information"
    assert [f["name"] for f in am27["fields"]] == [
        "Medicare Part D Coverage Code",
        "Contract Number",
        "Formulary ID",
        "Benefit ID",
    ]


def test_f6_only_fields_in_a_d0_message_are_refused_in_strict_and_listed_in_lenient() -> None:
    raw = b.request_bytes(rxs=(b.Rx(extra_claim_fields=(("KW", "90000"),)),))
    at = raw.index(b"\x1cKW")
    with pytest.raises(ParseError) as info:
        ncpdp.parse(raw)
    e = info.value
    assert (e.offset, e.segment_id, e.field_id) == (at, "07", "KW")
    assert "F6" in e.reason and "Total Prescribed Quantity Remaining" in e.reason
    t = ncpdp.parse(raw, strict=False)
    assert bytes(t) == raw
    assert [x for x in t.tolerated if "KW" in x] == [
        f"field KW (Total Prescribed Quantity Remaining) is an F6 field, not a field of "
        f"D.0, in segment AM07 (at byte offset {at})"
    ]
    # 5.1 likewise; F6 itself, and a private segment of a switch, are left alone
    ncpdp.parse(
        b.request_bytes(
            version="F6", bin="61001400", rxs=(b.Rx(extra_claim_fields=(("KW", "90000"),)),)
        )
    )
    private = b.request_bytes(extra_segments=(Segment("99", [("KW", "SWITCHDATA")]),))
    assert ncpdp.parse(private).groups[0].segments[-1].get("KW") == "SWITCHDATA"
    with pytest.raises(ParseError, match="is an F6 field"):
        ncpdp.parse(b.request_bytes(version="51", rxs=(b.Rx(extra_claim_fields=(("KW", "1"),)),)))


def _two_claims_f6() -> tuple[bytes, int]:
    one = b.request_bytes(version="F6", bin="61001400")
    claim = one[one.index(b"\x1e\x1cAM07") :]
    second = claim.replace(b"000001234567", b"000007654321")
    return one + second, len(one)


def test_an_f6_transmission_with_two_claims_is_refused_in_strict_and_listed_in_lenient() -> None:
    raw, at = _two_claims_f6()
    with pytest.raises(ParseError) as info:
        ncpdp.parse(raw)
    e = info.value
    assert (e.offset, e.segment_id) == (at, "07")
    assert "one transaction" in e.reason
    t = ncpdp.parse(raw, strict=False)
    assert bytes(t) == raw
    assert [x for x in t.tolerated if "one transaction" in x] == [
        "an F6 transmission carries one transaction; segment AM07 starts a second one, "
        f"read as transaction 2 (at byte offset {at})"
    ]
    rxs = [tx.rx_number for tx in t.as_request().transactions]
    assert rxs == ["000001234567", "000007654321"]  # the second claim is seen
    # its JSON gives the same bytes back
    assert bytes(ncpdp.from_jsonable(json.loads(json.dumps(ncpdp.to_jsonable(t))))) == raw


def test_an_f6_response_with_two_status_segments_is_refused_in_strict() -> None:
    one = b.response_bytes([b.REJECT_75], version="F6")
    status = one[one.index(b"\x1e\x1cAM21") :]
    raw = one + status
    with pytest.raises(ParseError, match="one transaction") as info:
        ncpdp.parse(raw)
    assert info.value.offset == len(one)
    t = ncpdp.parse(raw, strict=False)
    assert len(t.as_response().transactions) == 2 and bytes(t) == raw


# --- names for the D.0 field ids -------------------------------------------------------


@pytest.mark.parametrize(
    ("field_id", "number", "name"),
    [
        ("EQ", 575, "Patient Sales Tax Amount"),
        ("MW", 394, "Benefit Stage Amount"),
        ("CW", 330, "Alternate ID"),
        ("2D", 361, "Provider Accept Assignment Indicator"),
        ("G2", 997, "CMS Part D Defined Qualified Facility"),
        ("NT", 355, "Other Payer ID Count"),
        ("MH", 991, "Other Payer Processor Control Number"),
        ("NU", 356, "Other Payer Cardholder ID"),
        ("UR", 139, "Medicare Part D Coverage Code"),
    ],
)
def test_d0_field_ids_seen_in_public_samples_are_named(
    field_id: str, number: int, name: str
) -> None:
    fd = ncpdp.FIELDS[field_id]
    assert (fd.number, fd.name, fd.since) == (number, name, None)


def test_the_d0_dictionary_covers_every_d0_segment() -> None:
    d0 = [f for f in ncpdp.FIELDS.values() if f.since is None]
    assert len(d0) >= 300
    # a field of each request and response segment the primer lists
    for fid in ["DY", "KE", "EF", "PG", "XE", "2Q", "8C", "BM", "PR", "UV", "NS", "U8"]:
        assert ncpdp.FIELDS[fid].number is not None, fid


# --- leading line breaks ---------------------------------------------------------------


@pytest.mark.parametrize("lead", [b"\n", b"\r\n", b"\r\n\r\n"])
def test_a_leading_line_break_is_tolerated_in_lenient_and_named_in_strict(lead: bytes) -> None:
    for raw in (b.request_bytes(), b.response_bytes([b.REJECT_75])):
        data = lead + raw
        t = ncpdp.parse(data, strict=False)
        assert bytes(t) == data and t.leading == lead.decode() and bytes(t.canonical()) == raw
        assert t.tolerated == ("line break before the header",)
        with pytest.raises(ParseError) as info:
            ncpdp.parse(data)
        assert info.value.offset == 0
        assert "line break" in info.value.reason and "header" in info.value.reason
    # with framing and a trailing line break too, as switches relay claims
    framed = b"\r\n" + STX + b.request_bytes(bin="004336") + ETX + b"\r\n"
    t = ncpdp.parse(framed, strict=False)
    assert t.as_request().bin == "004336" and bytes(t) == framed


# --- the tolerated list: bounded, linear ----------------------------------------------


def test_the_tolerated_list_is_capped_with_a_summary() -> None:
    raw = b.request_bytes()
    bad = bytearray(raw)
    start = raw.index(b"\x1cCA") + 3
    field = bytes(b if i % 10 else 0xFF for i, b in enumerate(b"X" * 100_000))
    data = bytes(bad[:start]) + field + bytes(bad[start:])
    t = ncpdp.parse(data, strict=False)
    assert bytes(t) == data
    limit = ncpdp.TOLERATED_LIMIT
    assert len(t.tolerated) == limit + 1
    assert t.tolerated[-1] == (
        f"... and {10_000 - limit} more problems of the same kinds, not listed "
        f"(the first {limit} are)"
    )
    assert all("0xFF" in x for x in t.tolerated[:limit])


# --- batch offsets from the start of the file -------------------------------------------


def test_every_offset_of_a_batch_counts_from_the_start_of_the_file() -> None:
    good = b.request_bytes()
    ca = good.index(b"\x1cCA") + 3
    nul = good[:ca] + b"\x00" + good[ca:]  # tolerated in lenient mode
    broken = good.replace(b"\x1cDU", b"\x1c\x1cDU")  # an empty field: refused in both
    data = b.batch_bytes([good, nul, broken], between=b"\r\n")
    nul_at = data.index(b"\x00")
    empty_at = data.index(b"\x1c\x1cDU")
    assert data[nul_at] == 0 and data[empty_at : empty_at + 2] == b"\x1c\x1c"

    with pytest.raises(ParseError) as info:
        ncpdp.parse_batch(data)
    assert info.value.offset == nul_at  # strict stops at the first problem

    batch = ncpdp.parse_batch(data, strict=False)
    d1, d2 = batch.details[1], batch.details[2]
    assert d1.transmission is not None
    notes = [x for x in d1.tolerated if "0x00" in x]
    assert notes and all(f"(at byte offset {nul_at})" in x for x in notes)
    assert all(f"(at byte offset {nul_at})" in x for x in d1.transmission.tolerated)
    assert d2.transmission is None and d2.error is not None
    assert d2.error.offset == empty_at
    assert next(x for x in d2.tolerated if "does not parse" in x).endswith(
        f"(at byte offset {empty_at})"
    )
    assert f"byte offset {empty_at}" in ncpdp.record_to_jsonable(d2)["error"]
    # strict mode names the same place for that record
    with pytest.raises(ParseError) as info:
        ncpdp.parse_batch(b.batch_bytes([good, good, broken], between=b"\r\n"))
    assert info.value.offset == empty_at - 1  # one byte less: the NUL is gone
