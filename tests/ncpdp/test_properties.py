"""Property-based tests: round trips, and no exception but NcpdpError on any input."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ncpdp
from ncpdp import RequestHeader, ResponseHeader, Segment, TransactionGroup, Transmission
from ncpdp._fields import F6_FIELD_IDS

from .samples import SAMPLES

PROFILE = settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SEPARATORS = "\x1c\x1d\x1e"

# Values are printable ASCII: strict mode refuses anything else inside a field, and a
# field id "AM" after a segment's first field (a missing segment separator).
text_char = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
field_id = st.text(text_char, min_size=2, max_size=2).filter(lambda i: i != "AM")
# D.0 and 5.1 have no F6-only field (strict mode refuses one in a standard segment).
d0_field_id = field_id.filter(lambda i: i not in F6_FIELD_IDS)
value = st.text(text_char, max_size=12)
segment = st.builds(
    Segment,
    field_id,
    st.lists(st.tuples(d0_field_id, value), max_size=6),
)
F6 = ncpdp.VERSIONS["F6"]
# F6 carries one transaction: one Claim (AM07) or Response Status (AM21) segment at most.
f6_segment = st.builds(
    Segment,
    field_id.filter(lambda i: i not in ("07", "21")),
    st.lists(st.tuples(field_id, value), max_size=6),
)
top_segment = st.builds(
    Segment,
    field_id.filter(lambda i: i not in F6.transaction_segments),
    st.lists(st.tuples(field_id, value), max_size=6),
)
tx_segment = st.builds(
    Segment,
    st.sampled_from(sorted(F6.transaction_segments)),
    st.lists(st.tuples(field_id, value), max_size=6),
)


def _fixed(width: int) -> st.SearchStrategy[str]:
    return st.text(text_char, min_size=width, max_size=width)


def _digits(width: int) -> st.SearchStrategy[str]:
    return st.text(st.sampled_from("0123456789"), min_size=width, max_size=width)


dates = st.dates().map(lambda d: f"{d.year:04d}{d.month:02d}{d.day:02d}")


@st.composite
def transmissions(draw: st.DrawFn) -> Transmission:
    version = draw(st.sampled_from(sorted(ncpdp.VERSIONS)))
    f6 = version == "F6"
    if f6:  # one transaction, no group separator: it starts at a transaction segment
        groups = [[draw(tx_segment), *draw(st.lists(f6_segment, max_size=3))]]
        top = draw(st.lists(top_segment, max_size=3))
    else:
        groups = draw(st.lists(st.lists(segment, min_size=1, max_size=4), min_size=1, max_size=4))
        top = draw(st.lists(segment, max_size=3))
    if draw(st.booleans()):
        code = draw(_fixed(2).filter(lambda c: c != "E1"))
        rest = (
            draw(_fixed(10)) + str(len(groups)) + draw(_fixed(2)) + draw(_fixed(15))
            + draw(dates) + draw(_fixed(10))
        )  # fmt: skip
        if f6:
            raw = version + code + draw(_digits(8)) + rest
        else:
            raw = draw(_digits(6)) + version + code + rest
        header: RequestHeader | ResponseHeader = RequestHeader(raw)
    else:
        raw = (
            version + draw(_fixed(2)) + str(len(groups)) + draw(_fixed(1)) + draw(_fixed(2))
            + draw(_fixed(15)) + draw(dates)
        )  # fmt: skip
        header = ResponseHeader(raw)
    return Transmission(header, top, [TransactionGroup(g) for g in groups])


@PROFILE
@given(transmissions())
def test_every_model_claim_round_trips(t: Transmission) -> None:
    data = ncpdp.serialize(t)
    back = ncpdp.parse(data)
    assert back == t
    assert back.segments == t.segments and back.groups == t.groups
    assert ncpdp.serialize(back) == data
    doc = json.loads(json.dumps(ncpdp.to_jsonable(back)))
    assert ncpdp.serialize(ncpdp.from_jsonable(doc)) == data


@PROFILE
@given(transmissions(), st.data())
def test_only_transaction_round_trips(t: Transmission, data: st.DataObject) -> None:
    """Any transaction of any transmission, alone: the same header but for 109-A9 = 1,
    the same transmission-level segments, that group; it parses back to itself."""
    i = data.draw(st.integers(0, len(t.groups) - 1))
    one = ncpdp.only_transaction(t, i)
    assert one.header.transaction_count == "1"
    assert len(one.header.raw) == len(t.header.raw)
    assert one.header.with_slot("A9", t.header.transaction_count) == t.header
    assert one.segments == t.segments and one.groups == (t.groups[i],)
    back = ncpdp.parse(ncpdp.serialize(one))
    assert back == one and back.groups == one.groups
    assert ncpdp.only_transaction(one, 0) == one


def _check_any(data: bytes, strict: bool) -> None:
    try:
        t = ncpdp.parse(data, strict=strict)
    except ncpdp.ParseError as e:
        assert 0 <= e.offset <= len(data)
        assert "malformed transmission" not in e.reason  # diagnostics found the place
        return
    assert ncpdp.serialize(t) == data
    # What the fast path accepted must pass the validating constructors too.
    header_cls = RequestHeader if t.is_request else ResponseHeader
    rebuilt = Transmission(
        header_cls(t.header.raw),
        [Segment(s.id, s.fields) for s in t.segments],
        [TransactionGroup(Segment(s.id, s.fields) for s in g) for g in t.groups],
        leading=t.leading,
        trailing=t.trailing,
        group_separators=t.group_separators,
    )
    assert ncpdp.serialize(rebuilt) == data
    ncpdp.to_jsonable(t)
    try:
        view = t.as_request() if t.is_request else t.as_response()
    except ncpdp.NcpdpError:
        raise AssertionError("a view raised on a parsed transmission") from None
    # a response's status segment sent without its group still makes a transaction
    status_without_group = t.is_response and not t.groups and t.segment("21") is not None
    assert len(view.transactions) == (1 if status_without_group else len(t.groups))


# Bytes biased towards the structure: separators, 'AM', digits and framing bytes.
structured = st.lists(
    st.sampled_from(
        [
            b"\x1c",
            b"\x1d",
            b"\x1e",
            b"AM",
            b"07",
            b"D2",
            b"1",
            b" ",
            b"\x02",
            b"\x03",
            b"\r\n",
            b"\xff",
        ]
    )
    | st.binary(max_size=4),
    max_size=60,
).map(b"".join)
headers = st.sampled_from(sorted({s.raw[: s.header_length] for s in SAMPLES}))


@PROFILE
@given(st.binary(max_size=400), st.booleans())
def test_any_bytes_parse_or_raise_ncpdp_error(data: bytes, strict: bool) -> None:
    _check_any(data, strict)


@PROFILE
@given(headers, structured, st.booleans())
def test_structured_noise_after_a_header(header: bytes, body: bytes, strict: bool) -> None:
    _check_any(header + body, strict)


@PROFILE
@given(st.text(max_size=200))
def test_any_str_parses_or_raises_ncpdp_error(text: str) -> None:
    try:
        ncpdp.parse(text)
    except ncpdp.NcpdpError:
        pass


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from([s.raw for s in SAMPLES])))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "insert", "flip", "delete"]))
        at = draw(st.integers(0, len(data)))
        if kind == "truncate":
            del data[at:]
        elif kind == "insert":
            data[at:at] = draw(st.sampled_from([b"\x1c", b"\x1d", b"\x1e", b"\x1c\x1c", b"X"]))
        elif kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "delete" and at < len(data):
            del data[at]
    return bytes(data)


@PROFILE
@given(mutated(), st.booleans())
def test_mutated_claims_parse_or_raise_ncpdp_error(data: bytes, strict: bool) -> None:
    _check_any(data, strict)


def test_no_hang_on_large_pathological_input() -> None:
    """Linear time: possessive grammar, no backtracking blow-up."""
    import time

    head = SAMPLES[0].raw[:56]
    bad = head + (b"\x1e\x1cAM07" + b"\x1cD2" * 20000) + b"\x1c"
    start = time.perf_counter()
    try:
        ncpdp.parse(bad)
    except ncpdp.ParseError as e:
        assert e.offset == len(bad) - 1
    assert time.perf_counter() - start < 5


@PROFILE
@given(
    st.sampled_from([s.raw for s in SAMPLES if s.strict]),
    st.data(),
    st.sampled_from([b"\x00", b"\x7f", b"\xff", b"\n", b"\t", b"\x03"]),
)
def test_a_non_printable_byte_is_refused_strictly_and_kept_leniently(
    raw: bytes, data: st.DataObject, byte: bytes
) -> None:
    """Issue 17: inside a field, strict names the byte's offset; lenient keeps it."""
    hlen = 31 if raw[31:32] in (b"\x1e", b"\x1d", b"") else (58 if raw[:1] == b"F" else 56)
    # a place inside a field value: after a field separator's 2-character id
    places = [
        i + 3
        for i in range(hlen, len(raw))
        if raw[i : i + 1] == b"\x1c" and raw[i + 1 : i + 3] != b"AM"
    ]
    at = data.draw(st.sampled_from(places))
    bad = raw[:at] + byte + raw[at:]
    try:
        ncpdp.parse(bad)
    except ncpdp.ParseError as e:
        assert e.offset == at and e.field_id is not None
    else:
        raise AssertionError("strict mode accepted a byte outside printable ASCII")
    t = ncpdp.parse(bad, strict=False)
    assert ncpdp.serialize(t) == bad
    assert any(f"0x{byte[0]:02X} outside printable ASCII" in x for x in t.tolerated)


def _same_reading(data: bytes) -> None:
    """Strict parse: the fast path (well-formed input only) and the full path (with the
    diagnostics) accept the same input and build the same transmission."""
    from ncpdp._parser import _fast, _parse_full

    fast = _fast(data.decode("latin-1"))
    try:
        full = _parse_full(data, True)
    except ncpdp.NcpdpError:
        assert fast is None, "the fast path accepted what strict parsing refuses"
        return
    if fast is None:  # passed on: the full path's exceptions (E1, header-level reject...)
        return
    assert bytes(fast) == bytes(full) == data
    assert fast.header == full.header
    assert fast.tolerated == full.tolerated == ()
    assert fast.group_separators == full.group_separators
    assert fast.segments == full.segments
    assert [g.segments for g in fast.groups] == [g.segments for g in full.groups]
    assert ncpdp.to_jsonable(fast) == ncpdp.to_jsonable(full)


@PROFILE
@given(mutated())
def test_the_fast_path_agrees_with_the_full_one_on_damaged_claims(data: bytes) -> None:
    _same_reading(data)


@PROFILE
@given(transmissions())
def test_the_fast_path_agrees_with_the_full_one_on_model_claims(t: Transmission) -> None:
    _same_reading(bytes(t))


def test_the_fast_path_takes_every_well_formed_sample() -> None:
    """Every strict sample is read by the fast path, apart from the two kinds that carry
    no transaction group (an eligibility request, a response rejected at header level)."""
    from ncpdp._parser import _fast

    taken = 0
    strict = [s for s in SAMPLES if s.strict]
    for s in strict:
        _same_reading(s.raw)
        taken += _fast(s.raw.decode("latin-1")) is not None
    assert taken >= len(strict) // 2
