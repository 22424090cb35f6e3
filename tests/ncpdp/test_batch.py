"""NCPDP batch files: parse_batch, iter_batch, counts, round trips, errors."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ncpdp
from ncpdp import ParseError
from tests import builders as b

from .samples import LITERAL_51_REJECT, LITERAL_D0_B1, LITERAL_F6_B1, SAMPLES
from .test_properties import PROFILE

CLAIMS = [LITERAL_D0_B1, b.request_bytes(code="B2"), LITERAL_F6_B1]
BATCH = b.batch_bytes(CLAIMS)


def test_parse_batch_reads_header_details_and_trailer() -> None:
    batch = ncpdp.parse_batch(BATCH)
    assert batch.header.batch_number == "0000042"
    assert batch.header.version == "12" and batch.header.sender_id == "SYNSENDER01"
    assert batch.header.creation_date == "20261123"
    assert [d.reference for d in batch.details] == ["SYNREF0001", "SYNREF0002", "SYNREF0003"]
    assert [d.index for d in batch.details] == [0, 1, 2]
    ts = batch.transmissions
    assert all(t is not None for t in ts)
    assert [t.version for t in ts if t is not None] == ["D0", "D0", "F6"]
    assert batch.trailer.record_count == 5 and batch.trailer.batch_number == "0000042"
    assert batch.tolerated == ()
    assert bytes(batch) == BATCH and ncpdp.serialize(batch) == BATCH
    # offsets point at each record's STX
    assert all(BATCH[d.offset : d.offset + 3] == b"\x02G1" for d in batch.details)


@pytest.mark.parametrize("between", [b"", b"\n", b"\r\n"])
def test_line_breaks_between_records_are_kept(between: bytes) -> None:
    data = b.batch_bytes(CLAIMS, between=between) + between
    batch = ncpdp.parse_batch(data)
    assert len(batch.details) == 3 and batch.tolerated == ()
    assert bytes(batch) == data


def test_iter_batch_reads_chunks_of_any_size_in_order() -> None:
    data = b.batch_bytes([s.raw for s in SAMPLES if s.strict], between=b"\r\n")
    whole = list(ncpdp.iter_batch(data))
    for size in (1, 7, 100, 4096):
        chunks = (data[i : i + size] for i in range(0, len(data), size))
        records = list(ncpdp.iter_batch(chunks))
        assert [r.to_text() for r in records] == [r.to_text() for r in whole]
    assert isinstance(whole[0], ncpdp.BatchHeader)
    assert isinstance(whole[-1], ncpdp.BatchTrailer)
    assert "".join(r.to_text() for r in whole).encode("latin-1") == data


def test_an_empty_batch_has_header_and_trailer_only() -> None:
    data = b.batch_bytes([])
    batch = ncpdp.parse_batch(data)
    assert batch.details == () and batch.trailer.record_count == 2
    assert bytes(batch) == data


def test_the_record_count_is_checked_against_the_trailer() -> None:
    data = b.batch_bytes(CLAIMS, count=4)
    with pytest.raises(ParseError) as info:
        ncpdp.parse_batch(data)
    assert "record count says '0000000004' but the file has 5 records" in info.value.reason
    trailer_at = data.rindex(b"\x0299")
    assert info.value.offset == trailer_at + 1 + 9
    batch = ncpdp.parse_batch(data, strict=False)
    assert any("record count" in x for x in batch.tolerated)
    assert bytes(batch) == data


def test_the_trailer_batch_number_must_match_the_header() -> None:
    data = b.batch_bytes(CLAIMS).replace(b"\x02990000042", b"\x02990000043")
    with pytest.raises(ParseError, match="differs from the header's"):
        ncpdp.parse_batch(data)
    assert bytes(ncpdp.parse_batch(data, strict=False)) == data


def test_a_bad_transmission_names_its_record_and_file_offset() -> None:
    bad = LITERAL_D0_B1.replace(b"\x1cD2", b"\x1c\x1cD2", 1)
    data = b.batch_bytes([LITERAL_D0_B1, bad])
    with pytest.raises(ParseError) as info:
        ncpdp.parse_batch(data)
    e = info.value
    assert "batch detail record 2 (reference 'SYNREF0002')" in e.reason
    assert "empty field after field EM" in e.reason
    second = data.index(b"\x02G1SYNREF0002")
    assert e.offset == second + 13 + LITERAL_D0_B1.index(b"\x1cD2")
    assert (e.segment_id, e.field_id) == ("07", "EM")
    # lenient: the record is kept raw with its error, the others parse
    batch = ncpdp.parse_batch(data, strict=False)
    d = batch.details[1]
    assert d.transmission is None and d.error is not None and d.raw == bad.decode("latin-1")
    assert batch.details[0].transmission is not None
    assert bytes(batch) == data


def test_lenient_batch_reports_what_each_transmission_tolerated() -> None:
    data = b.batch_bytes([LITERAL_D0_B1[:20] + b"2" + LITERAL_D0_B1[21:]])
    with pytest.raises(ParseError, match="109-A9 says 2"):
        ncpdp.parse_batch(data)
    batch = ncpdp.parse_batch(data, strict=False)
    assert batch.tolerated == ("batch detail record 1: transaction count 109-A9 says 2 "
                               "but 1 transaction group(s) follow",)  # fmt: skip


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "no batch header record"),
        (b.batch_detail(LITERAL_D0_B1, "X"), "starts with its '00' header record"),
        (b.batch_header(), "no batch trailer record"),
        (b.batch_bytes(CLAIMS)[:-1], "without its ETX"),
        (b.batch_bytes(CLAIMS) + b.batch_trailer(5), "a record after the batch trailer"),
        (b.batch_header() + b"\x02G1SHORT\x03" + b.batch_trailer(3), "this one has 7"),
        (b.batch_header() + b"\x02XX\x03" + b.batch_trailer(3), "batch record type 'XX'"),
        (b.batch_header()[:-1] + b.batch_trailer(2), "STX inside a batch record"),
        (b.batch_header() + b"\x03" + b.batch_trailer(2), "ETX between batch records"),
        (b.batch_bytes([]) + b"\r\n\x03", "ETX after the batch trailer"),
    ],
)
def test_structural_errors_are_refused_in_both_modes(data: bytes, reason: str) -> None:
    for strict in (True, False):
        with pytest.raises(ParseError, match=reason):
            ncpdp.parse_batch(data, strict=strict)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b.batch_bytes(CLAIMS, between=b" "), "text between batch records"),
        (b.batch_bytes(CLAIMS) + b"EOF", "text after the batch trailer"),
        (b.batch_bytes(CLAIMS, version="10"), "batch version/release '10'"),
        (b.batch_bytes(CLAIMS, date="20261340"), "creation date"),
        (b.batch_bytes(CLAIMS, batch_number="00000X2"), "batch number must be 7 digits"),
        (b.batch_header()[:-2] + b.batch_header()[-1:] + b.batch_trailer(2), "73 characters"),
    ],
)
def test_strict_refuses_lenient_keeps_and_reports(data: bytes, reason: str) -> None:
    with pytest.raises(ParseError, match=reason):
        ncpdp.parse_batch(data)
    batch = ncpdp.parse_batch(data, strict=False)
    assert any(reason in x for x in batch.tolerated), batch.tolerated
    assert bytes(batch) == data


def test_batch_15_is_read_with_the_12_layout() -> None:
    batch = ncpdp.parse_batch(b.batch_bytes(CLAIMS, version="15"))
    assert ncpdp.BATCH_VERSIONS[batch.header.version] == "Batch Standard 15"


def test_is_batch() -> None:
    assert ncpdp.is_batch(BATCH) and ncpdp.is_batch(b"\r\n" + BATCH)
    assert ncpdp.is_batch(BATCH.decode("latin-1"))
    assert not ncpdp.is_batch(LITERAL_D0_B1)
    assert not ncpdp.is_batch(b.batch_detail(LITERAL_D0_B1, "X"))


def test_record_to_jsonable() -> None:
    docs = [ncpdp.record_to_jsonable(r) for r in ncpdp.iter_batch(BATCH)]
    assert [d["record"] for d in docs] == ["header", "detail", "detail", "detail", "trailer"]
    assert {f["key"]: f["value"] for f in docs[0]["fields"]}["batch_number"] == "0000042"
    assert docs[0]["batch_version"] == "Batch Standard 1.2"
    assert docs[1]["transmission"]["version"] == "D0" and docs[1]["reference"] == "SYNREF0001"
    assert ncpdp.serialize(ncpdp.from_jsonable(docs[3]["transmission"])) == LITERAL_F6_B1


def test_iter_batch_refuses_chunks_that_are_not_bytes() -> None:
    with pytest.raises(TypeError):
        list(ncpdp.iter_batch(iter(["text"])))  # type: ignore[list-item]


claims = st.lists(st.sampled_from([s.raw for s in SAMPLES if s.strict]), max_size=6)


@PROFILE
@given(claims, st.sampled_from([b"", b"\n", b"\r\n"]), st.integers(1, 64))
def test_every_batch_round_trips_in_any_chunking(
    transmissions: list[bytes], between: bytes, size: int
) -> None:
    data = b.batch_bytes(transmissions, between=between)
    batch = ncpdp.parse_batch(data)
    assert len(batch.details) == len(transmissions)
    assert [ncpdp.serialize(t) for t in batch.transmissions if t is not None] == transmissions
    assert bytes(batch) == data
    chunks = [data[i : i + size] for i in range(0, len(data), size)]
    assert bytes(ncpdp.parse_batch(chunks)) == data


@PROFILE
@given(claims, st.binary(max_size=8), st.integers(0, 400), st.booleans())
def test_any_damage_parses_or_raises_parse_error(
    transmissions: list[bytes], junk: bytes, at: int, strict: bool
) -> None:
    data = b.batch_bytes(transmissions)
    at = min(at, len(data))
    damaged = data[:at] + junk + data[at:]
    try:
        batch = ncpdp.parse_batch(damaged, strict=strict)
    except ParseError as e:
        assert 0 <= e.offset <= len(damaged)
        return
    assert bytes(batch) == damaged
    # and every record through JSON and back, whatever lenient mode kept
    for record in ncpdp.iter_batch(damaged, strict=strict):
        doc = json.loads(json.dumps(ncpdp.record_to_jsonable(record)))
        assert ncpdp.record_from_jsonable(doc).to_text() == record.to_text()


def test_a_single_detail_record_where_a_transmission_is_expected() -> None:
    with pytest.raises(ParseError, match=r"batch detail record .* not a bare transmission"):
        ncpdp.parse(b.batch_detail(LITERAL_51_REJECT, "SYNREF0001"))


def test_records_round_trip_through_json() -> None:
    data = b.batch_bytes(CLAIMS, between=b"\r\n") + b"\r\n"
    for strict in (True, False):
        docs = [ncpdp.record_to_jsonable(r) for r in ncpdp.iter_batch(data, strict=strict)]
        back = [ncpdp.record_from_jsonable(d) for d in docs]
        assert "".join(r.to_text() for r in back).encode("latin-1") == data
    bad = LITERAL_D0_B1.replace(b"\x1cD2", b"\x1c\x1cD2", 1)
    raw_data = b.batch_bytes([bad])
    docs = [ncpdp.record_to_jsonable(r) for r in ncpdp.iter_batch(raw_data, strict=False)]
    assert "error" in docs[1] and docs[1]["raw"] == bad.decode("latin-1")
    back = [ncpdp.record_from_jsonable(d) for d in docs]
    assert "".join(r.to_text() for r in back).encode("latin-1") == raw_data


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"record": "other"},
        {"record": "detail", "reference": "short", "raw": ""},
        {"record": "detail", "reference": "0123456789", "raw": "\x03"},
        {"record": "detail", "reference": "0123456789", "raw": 5},
        {"record": "header", "fields": "x"},
        {"record": "header", "fields": [{"value": "\x02"}]},
        {"record": "trailer", "fields": [{"value": "99"}], "trailing": "\x02"},
        {"record": "trailer", "fields": [{"value": "99"}], "leading": "\u20ac"},
    ],
)
def test_record_from_jsonable_raises_model_error(doc: object) -> None:
    with pytest.raises(ncpdp.ModelError):
        ncpdp.record_from_jsonable(doc)


def test_batch_records_cannot_be_built_invalid() -> None:
    with pytest.raises(ncpdp.ModelError):
        ncpdp.BatchHeader("00\x03")
    with pytest.raises(ncpdp.ModelError):
        ncpdp.BatchTrailer("99", trailing="\x02")
    with pytest.raises(ncpdp.ModelError):
        ncpdp.BatchHeader("00", leading="\u20ac")
    with pytest.raises(ncpdp.ModelError):
        ncpdp.BatchDetail(index=0, offset=0, reference="SHORT", raw="", transmission=None)
    with pytest.raises(ncpdp.ModelError):
        ncpdp.BatchDetail(index=0, offset=0, reference="0123456789", raw="\x03", transmission=None)
