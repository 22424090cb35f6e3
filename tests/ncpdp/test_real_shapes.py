"""Property tests over claims of every real shape (tests/strategies.py, issue 25): any
payer's BIN, any PCN, any framing, D.0, 5.1 and F6, one to four transactions, reject
codes of every family, long and continued messages, and batch files of them."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ncpdp
from tests import builders as b
from tests.strategies import FRAMINGS, Exchange, exchanges, message_text

from .samples import BATCH_WITH_LINE_BREAKS, CLAIM_004336, F6_INTERMEDIARY, SWITCH_REJECT, WITH_AM27

REAL = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _parts(ex: Exchange) -> list[tuple[str, bytes, str]]:
    return [
        ("request", ex.request_core(), ex.framing),
        ("response", ex.response_core(), ex.response_framing),
    ]


def _tolerated(before: bytes, after: bytes) -> tuple[str, ...]:
    """What lenient parsing says of the framing around a claim."""
    notes = []
    if before.startswith((b"\r", b"\n")):
        notes.append("line break before the header")
    if b"\x02" in before:
        notes.append("STX framing before the header")
    if b"\x03" in after:
        notes.append("ETX framing after the message")
    if b"\r" in after or b"\n" in after:
        notes.append("trailing CR/LF")
    return tuple(notes)


@REAL
@given(exchanges())
def test_every_real_shape_parses_in_any_framing_and_round_trips(ex: Exchange) -> None:
    for kind, core, framing in _parts(ex):
        data = ex.framed(core, framing)
        before, after = FRAMINGS[framing]
        assert not ncpdp.is_batch(data), "a claim read as a batch file"
        t = ncpdp.parse(data, strict=False)
        assert t.kind == kind and t.version == ex.version
        assert bytes(t) == data and bytes(t.canonical()) == core
        assert (t.leading, t.trailing) == (before.decode(), after.decode())
        assert t.tolerated == _tolerated(before, after)
        doc = json.loads(json.dumps(ncpdp.to_jsonable(t)))
        assert bytes(ncpdp.from_jsonable(doc)) == data
        # strict mode takes the bare transmission and names the framing at its place
        assert ncpdp.parse(core) == t.canonical()
        if framing != "none":
            with pytest.raises(ncpdp.ParseError) as info:
                ncpdp.parse(data)
            assert info.value.offset == (0 if before else len(core))


@REAL
@given(exchanges())
def test_the_views_read_what_was_built(ex: Exchange) -> None:
    rv = ncpdp.parse(ex.request, strict=False).as_request()
    c = ex.claim
    assert rv.bin == c.bin and rv.pcn == c.pcn.strip() and rv.version == c.version
    assert rv.iin == (c.bin if c.version == "F6" else None)
    assert rv.service_provider_id == c.provider_id
    assert [t.rx_number for t in rv.transactions] == [r.rx_number for r in c.rxs]
    assert [t.product_id for t in rv.transactions] == [r.product_id for r in c.rxs]
    assert [t.days_supply for t in rv.transactions] == [int(r.days_supply) for r in c.rxs]
    sv = ncpdp.parse(ex.response, strict=False).as_response()
    assert len(sv.transactions) == len(ex.outcomes)
    for i, (tx, o) in enumerate(zip(sv.transactions, ex.outcomes, strict=True)):
        assert [r.code for r in tx.reject_codes] == list(o.reject_codes)
        assert tx.rejected == (o.status == "R")
        assert tx.additional_message == (ex.payer_message(i) or None)
        # every continued message is one message, with its first piece's qualifier
        assert len(tx.additional_message_info) == len([m for m in o.messages if message_text(m)])


@REAL
@given(exchanges())
def test_identifiers_stay_strings_in_json(ex: Exchange) -> None:
    for _, core, _ in _parts(ex):
        doc = ncpdp.to_jsonable(ncpdp.parse(core))
        fields = [*doc["header"]]
        for part in [doc["segments"], *(t["segments"] for t in doc["transactions"])]:
            fields += [f for s in part for f in s["fields"]]
        for f in fields:
            decoded = f.get("decoded")
            if isinstance(decoded, int):  # a count or a quantity, never an identifier
                assert ncpdp.FIELDS[f["id"]].integer, f
            if f["id"] in ("A1", "B1", "D2", "D7", "DB", "C2", "8F", "AR"):
                assert "decoded" not in f, f


@REAL
@given(st.lists(exchanges(), min_size=1, max_size=3), st.sampled_from([b"", b"\n", b"\r\n"]))
def test_a_batch_of_real_shapes(exs: list[Exchange], between: bytes) -> None:
    cores = [core for ex in exs for _, core, _ in _parts(ex)]
    data = between + b.batch_bytes(cores, between=between) + between
    assert ncpdp.is_batch(data)
    batch = ncpdp.parse_batch(data)
    assert bytes(batch) == data and batch.tolerated == ()
    assert [bytes(t) for t in batch.transmissions if t is not None] == cores
    for d in batch.details:
        assert data[d.offset : d.offset + 3] == b"\x02G1"


def test_the_named_public_shapes() -> None:
    """The shapes of public sample claims, rebuilt by our builders (samples.py)."""
    tx = ncpdp.parse(SWITCH_REJECT).as_response().transactions[0]
    assert tx.additional_messages == (b.SWITCH_REJECT_TEXT,)
    assert [r.code for r in tx.reject_codes] == ["1S"] and tx.help_desk_phone == "8005550100"
    f6 = ncpdp.parse(F6_INTERMEDIARY)
    assert f6.as_request().iin == "00880151"
    assert [s.id for s in f6.groups[0]] == ["07", "03", "11", "19"]
    assert ncpdp.to_jsonable(f6)["header"][2]["value"] == "00880151"
    am27 = ncpdp.parse(WITH_AM27).segment("27")
    assert am27 is not None and am27.name == "Response Insurance Additional Information"
    batch = ncpdp.parse_batch(BATCH_WITH_LINE_BREAKS)
    assert bytes(batch) == BATCH_WITH_LINE_BREAKS
    assert [d.leading for d in batch.details] == ["\r\n"] * 4
    assert [bytes(t) for t in batch.transmissions if t is not None] == [
        CLAIM_004336,
        SWITCH_REJECT,
        F6_INTERMEDIARY,
        WITH_AM27,
    ]
