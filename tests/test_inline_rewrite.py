"""The outcomes message written into the payer's response (decision 0041): only the
526-FQ message fields of the transaction change, written by ncpdp, byte for byte
everywhere else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ncpdp
from pa_bridge.tap.rewrite import RewriteError, message_lines, replace_messages
from tests import builders as b

MESSAGE = (
    "Prior authorization required. Submit an electronic PA now; the prescriber completes it online."
)
_MESSAGE_IDS = {"UF", "UH", "FQ", "UG"}


def _others(seg: ncpdp.Segment) -> list[ncpdp.Field]:
    return [f for f in seg if f.id not in _MESSAGE_IDS]


def test_d0_message_becomes_40_character_lines_with_count_qualifiers_and_continuity() -> None:
    resp = b.response([b.REJECT_75])
    new = replace_messages(resp, {0: MESSAGE})
    st21 = new.groups[0].segment("21")
    assert st21 is not None
    assert st21.get("UF") == "03"
    assert st21.get_all("UH") == ("01", "02", "03")
    lines = st21.get_all("FQ")
    assert all(len(line) <= 40 for line in lines)
    # continued lines join as they are (131-UG "+": nothing between them, issue 25)
    assert "".join(lines) == MESSAGE
    assert st21.get_all("UG") == ("+", "+")
    # the new fields sit where the payer's were: after the reject codes, before 7F/8F
    ids = [f.id for f in st21]
    assert ids[:5] == ["AN", "FA", "FB", "4F", "UF"] and ids[-2:] == ["7F", "8F"]
    assert new.as_response().transactions[0].additional_message == MESSAGE
    # every other byte is the payer's
    old = resp.groups[0].segment("21")
    assert old is not None and _others(st21) == _others(old)
    assert new.header.raw == resp.header.raw
    assert new.segments == resp.segments
    assert new.groups[0].segments[1:] == resp.groups[0].segments[1:]
    assert ncpdp.serialize(ncpdp.parse(ncpdp.serialize(new))) == ncpdp.serialize(new)


def test_51_message_is_one_field_of_at_most_200() -> None:
    resp = b.response([b.Outcome(status="R", reject_codes=("75",), messages=("PA REQ",))])
    resp51 = ncpdp.Transmission(
        resp.header.with_slot("A2", "51"), resp.segments, resp.groups, group_separators=True
    )
    long = "Submit a PA. " * 30
    new = replace_messages(resp51, {0: long})
    st21 = new.groups[0].segment("21")
    assert st21 is not None
    (fq,) = st21.get_all("FQ")
    assert len(fq) <= 200 and long.strip().startswith(fq)
    assert "UF" not in st21 and "UH" not in st21


def test_a_response_without_a_message_gets_one_before_the_help_desk() -> None:
    resp = b.response(
        [b.Outcome(status="R", reject_codes=("75",), help_phone="8005550100", pricing=False)]
    )
    new = replace_messages(resp, {0: "Submit PA"})
    st21 = new.groups[0].segment("21")
    assert st21 is not None
    assert [f.id for f in st21] == ["AN", "FA", "FB", "UF", "UH", "FQ", "7F", "8F"]


def test_only_the_named_transaction_changes() -> None:
    resp = b.response([b.PAID, b.REJECT_75, b.REJECT_MR])
    new = replace_messages(resp, {1: MESSAGE})
    assert new.groups[0] == resp.groups[0] and new.groups[2] == resp.groups[2]
    assert new.groups[1] != resp.groups[1]


def test_framing_kept_by_lenient_parsing_is_kept() -> None:
    raw = b"\x02" + b.response_bytes([b.REJECT_75]) + b"\x03\r\n"
    resp = ncpdp.parse(raw, strict=False)
    new = ncpdp.serialize(replace_messages(resp, {0: "Submit PA"}))
    assert new.startswith(b"\x02") and new.endswith(b"\x03\r\n")


@pytest.mark.parametrize(
    ("message", "why"),
    [("Prior authorization \u2013 submit now", "cannot carry"), ("  \r\n ", "empty")],
)
def test_a_message_ncpdp_cannot_carry_is_refused(message: str, why: str) -> None:
    with pytest.raises(RewriteError, match=why):
        replace_messages(b.response([b.REJECT_75]), {0: message})


def test_refused_when_there_is_nothing_to_write_into() -> None:
    with pytest.raises(RewriteError):
        replace_messages(b.response([b.REJECT_75]), {3: "x"})
    with pytest.raises(RewriteError):
        replace_messages(b.request(), {0: "x"})


def test_a_long_word_is_cut_and_long_messages_stop_at_nine_lines() -> None:
    url = "https://pa.example.invalid/" + "x" * 60
    assert message_lines(f"Open {url} now", 40, 9) == [
        "Open ",
        url[:40],
        url[40:80],
        url[80:] + " now",
    ]
    assert len(message_lines("word " * 200, 40, 9)) == 9
    assert "".join(message_lines(f"Open {url} now", 40, 9)) == f"Open {url} now"
    new = replace_messages(b.response([b.REJECT_75]), {0: f"Open {url} now"})
    assert ncpdp.parse(ncpdp.serialize(new)).groups[0].segment("21") is not None


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1))
def test_any_printable_message_reads_back_strictly(message: str) -> None:
    if not message.strip():
        return
    new = replace_messages(b.response([b.REJECT_75]), {0: message})
    again = ncpdp.parse(ncpdp.serialize(new))  # strict
    shown = again.as_response().transactions[0].additional_message or ""
    wanted = " ".join(message.split())
    assert wanted.replace(" ", "").startswith(shown.replace(" ", ""))
    if len(wanted) <= 300 and max(len(w) for w in wanted.split(" ")) <= 40:
        assert shown == wanted
