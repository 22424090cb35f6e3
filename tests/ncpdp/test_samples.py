"""One table (samples.py) drives parse, serialize and round-trip tests."""

from __future__ import annotations

import json

import pytest

import ncpdp
from ncpdp import RequestHeader, ResponseHeader, Segment, TransactionGroup, Transmission
from tests import builders as b

from .samples import LITERAL_D0_B1, LITERAL_F6_B1, LITERAL_SWITCH, SAMPLE_IDS, SAMPLES, Sample


def _segment(t: Transmission, group: int | None, seg_id: str) -> Segment:
    seg = t.segment(seg_id) if group is None else t.groups[group].segment(seg_id)
    assert seg is not None, f"no segment AM{seg_id} in group {group}"
    return seg


def _parse(sample: Sample, data: bytes | str | None = None) -> Transmission:
    """Strict for well-formed samples; lenient for the defects strict mode refuses."""
    return ncpdp.parse(sample.raw if data is None else data, strict=sample.strict)


@pytest.mark.parametrize("sample", SAMPLES, ids=SAMPLE_IDS)
def test_parse_reads_the_sample(sample: Sample) -> None:
    t = _parse(sample)
    assert t.kind == sample.kind
    assert t.version == sample.version
    assert t.transaction_code == sample.code
    assert len(t.groups) == sample.groups
    assert len(t.header.raw) == sample.header_length
    if sample.strict:
        assert t.tolerated == ()
    else:
        assert sample.lenient_note is not None
        assert any(sample.lenient_note in x for x in t.tolerated), t.tolerated
    for group, seg_id, field_id, value in sample.expect:
        assert _segment(t, group, seg_id).get(field_id) == value


@pytest.mark.parametrize("sample", [s for s in SAMPLES if not s.strict], ids=lambda s: s.name)
def test_strict_mode_refuses_the_defect_with_its_place(sample: Sample) -> None:
    assert sample.strict_error is not None
    reason, offset, segment_id, field_id = sample.strict_error
    with pytest.raises(ncpdp.ParseError) as info:
        ncpdp.parse(sample.raw)
    e = info.value
    assert reason in e.reason
    assert (e.offset, e.segment_id, e.field_id) == (offset, segment_id, field_id)
    assert f"byte offset {offset}" in str(e)


@pytest.mark.parametrize("sample", SAMPLES, ids=SAMPLE_IDS)
def test_serialize_is_the_exact_inverse(sample: Sample) -> None:
    assert ncpdp.serialize(_parse(sample)) == sample.raw
    assert bytes(_parse(sample)) == sample.raw


@pytest.mark.parametrize("sample", SAMPLES, ids=SAMPLE_IDS)
def test_str_input_and_rebuilt_objects_round_trip(sample: Sample) -> None:
    t = _parse(sample, sample.raw.decode("latin-1"))
    assert ncpdp.serialize(t) == sample.raw
    # Rebuild through the validating public constructors: the writer, not the cached
    # text, must give the same bytes.
    header_cls = RequestHeader if t.is_request else ResponseHeader
    rebuilt = Transmission(
        header_cls(t.header.raw),
        [Segment(s.id, s.fields) for s in t.segments],
        [TransactionGroup(Segment(s.id, s.fields) for s in g) for g in t.groups],
        group_separators=t.group_separators,
    )
    assert ncpdp.serialize(rebuilt) == sample.raw
    assert rebuilt == t


@pytest.mark.parametrize("sample", SAMPLES, ids=SAMPLE_IDS)
def test_json_round_trip(sample: Sample) -> None:
    t = _parse(sample)
    doc = json.loads(json.dumps(ncpdp.to_jsonable(t)))
    assert ncpdp.serialize(ncpdp.from_jsonable(doc)) == sample.raw


@pytest.mark.parametrize("sample", SAMPLES, ids=SAMPLE_IDS)
def test_lenient_framing_round_trips(sample: Sample) -> None:
    framed = b"\x02" + sample.raw + b"\x03\r\n"
    t = ncpdp.parse(framed, strict=False)
    assert ncpdp.serialize(t) == framed
    assert ncpdp.serialize(t.canonical()) == sample.raw
    assert "STX framing before the header" in t.tolerated
    assert "trailing CR/LF" in t.tolerated
    doc = json.loads(json.dumps(ncpdp.to_jsonable(t)))
    assert ncpdp.serialize(ncpdp.from_jsonable(doc)) == framed


@pytest.mark.parametrize("sample", SAMPLES, ids=SAMPLE_IDS)
def test_views_read_every_sample(sample: Sample) -> None:
    t = _parse(sample)
    view = t.as_request() if t.is_request else t.as_response()
    want = sample.groups if sample.view_transactions is None else sample.view_transactions
    assert len(view.transactions) == want


def test_the_writer_builds_the_literal_from_objects() -> None:
    """The serializer checked against hand-written bytes, not against the parser."""
    header = RequestHeader.build(
        bin="610014",
        pcn="SYNPCN",
        service_provider_id="1999999976",
        date_of_service="20261123",
        software_vendor_id="SYNVEND001",
    )
    t = Transmission(
        header,
        [
            Segment("04", [("C2", "ZQX90817263"), ("C1", "SYNGRP01"), ("C3", "001"), ("C6", "1")]),
            Segment(
                "01",
                [("C4", "19610407"), ("C5", "2"), ("CA", "ZEBULONTEST"), ("CB", "QUIXOTESYNTH")],
            ),
        ],
        [
            TransactionGroup(
                [
                    Segment(
                        "07",
                        [
                            ("EM", "1"),
                            ("D2", "000001234567"),
                            ("E1", "03"),
                            ("D7", "00093505601"),
                            ("E7", "30000"),
                            ("D3", "00"),
                            ("D5", "030"),
                            ("NX", "2"),
                            ("DK", "08"),
                            ("DK", "01"),
                        ],
                    ),
                    Segment("03", [("EZ", "01"), ("DB", "1999999984"), ("DR", "DRSYNTH")]),
                    Segment("11", [("D9", "1234{"), ("DC", "050{"), ("DU", "1299E"), ("DN", "01")]),
                ]
            )
        ],
    )
    assert ncpdp.serialize(t) == LITERAL_D0_B1


def test_repeated_field_ids_keep_order_and_repetition() -> None:
    claim = ncpdp.parse(LITERAL_D0_B1).groups[0].segment("07")
    assert claim is not None
    assert claim.get_all("DK") == ("08", "01")
    assert [f.id for f in claim][-3:] == ["NX", "DK", "DK"]


def test_unknown_segments_and_punctuation_field_ids_are_kept() -> None:
    t = ncpdp.parse(LITERAL_SWITCH)
    xx = t.segment("XX")
    assert xx is not None and xx.name is None
    assert [f.id for f in xx] == ["&B", "#A", "!F"]
    am99 = t.groups[0].segment("99")
    assert am99 is not None and am99.get_all("&B") == ("PRIVATE", "2")
    assert t.header.service_provider_id == ""  # all spaces
    assert t.header.slot("B1") == " " * 15


def test_f6_transaction_starts_at_its_first_transaction_level_segment() -> None:
    """F6 has no group separator: an unknown segment before the first transaction-level
    segment stays at transmission level, one after it goes with the transaction, and a
    Pharmacy Provider segment before the Claim starts the transaction."""
    header = LITERAL_F6_B1[:58]
    raw = (
        header
        + b"\x1e\x1cAM04\x1cC2ZQX90817263"
        + b"\x1e\x1cAM98\x1c&BX"
        + b"\x1e\x1cAM02\x1cEY01\x1cE91999999976"
        + b"\x1e\x1cAM07\x1cD2000001234567"
        + b"\x1e\x1cAM99\x1c&BY"
    )
    t = ncpdp.parse(raw)
    assert [s.id for s in t.segments] == ["04", "98"]
    assert [s.id for s in t.groups[0]] == ["02", "07", "99"]
    assert ncpdp.serialize(t) == raw
    assert ncpdp.serialize(t.canonical()) == raw
    # no transaction-level segment at all: a B1 with 109-A9 = 1 is refused
    with pytest.raises(ncpdp.ParseError, match="109-A9 says 1 but 0"):
        ncpdp.parse(header + b"\x1e\x1cAM04\x1cC2ZQX90817263\x1e\x1cAM98\x1c&BX")


# --- only_transaction: one transaction of a transmission, on its own -------------


@pytest.mark.parametrize("sample", SAMPLES, ids=SAMPLE_IDS)
def test_only_transaction_of_each_sample(sample: Sample) -> None:
    t = _parse(sample)
    for i in range(len(t.groups)):
        one = ncpdp.only_transaction(t, i)
        assert one.header.transaction_count.strip() == "1"
        assert one.groups == (t.groups[i],) and one.segments == t.segments
        assert one.leading == one.trailing == "" and one.tolerated == ()
        # Written out, it parses back to itself.
        assert ncpdp.parse(bytes(one), strict=sample.strict) == one
    with pytest.raises(IndexError):
        ncpdp.only_transaction(t, len(t.groups))
    with pytest.raises(IndexError):
        ncpdp.only_transaction(t, -1)


def test_only_transaction_keeps_every_header_field_but_the_count() -> None:
    rxs = tuple(b.Rx(rx_number=f"00000000000{i}") for i in range(1, 4))
    t = ncpdp.parse(b.request_bytes(rxs=rxs))
    one = ncpdp.only_transaction(t, 2)
    changed = [
        s.field_id
        for (s, v), (_, w) in zip(t.header.items(), one.header.items(), strict=True)
        if v != w
    ]
    assert changed == ["A9"]
    assert one.as_request().transactions[0].rx_number == "000000000003"
    assert t.header.with_slot("A9", "3") == t.header
    with pytest.raises(ncpdp.ModelError):
        t.header.with_slot("A9", "12")
    with pytest.raises(KeyError):
        t.header.with_slot("ZZ", "1")
