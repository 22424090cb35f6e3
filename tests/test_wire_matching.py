"""Which answer is whose (decision 0040): a response answers a request when its header
(version, transaction code, provider, date of service) and the prescription numbers it
echoes agree; another claim's answer never does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pa_bridge.sandbox.switch import SwitchPayer
from pa_bridge.tap.matching import Waiting, answers, read
from pa_bridge.tap.peers import peer_allowed
from tests import builders as b


def _pair(req_kw: dict[str, object], resp_kw: dict[str, object] | None = None) -> bool:
    request = read(b.request_bytes(**req_kw))
    answer = SwitchPayer().answer(b.request_bytes(**(resp_kw or req_kw)))
    response = read(answer)
    assert request is not None and response is not None
    return answers(request, response)


def test_the_switchs_answer_answers_its_request() -> None:
    assert _pair({})
    assert _pair({"pcn": "REJ75"})
    assert _pair({"code": "B2"})
    two = {"rxs": (b.Rx(), b.Rx(rx_number="000001234568"))}
    assert _pair(two)


@pytest.mark.parametrize(
    "other",
    [
        {"provider_id": "1999999968"},  # another store's answer
        {"date_of_service": "20261124"},
        {"rxs": (b.Rx(rx_number="000009999999"),)},  # another prescription
        {"code": "B2"},
        {"version": "51"},
        {"rxs": (b.Rx(), b.Rx(rx_number="000001234568"))},  # two answers for one
    ],
)
def test_another_claims_answer_does_not(other: dict[str, object]) -> None:
    assert not _pair({}, other)


def test_a_header_level_reject_and_blank_fields_match_by_what_they_carry() -> None:
    request = read(b.request_bytes())
    assert request is not None
    reject = read(
        b.response_bytes(
            [b.Outcome(status="R")], provider_id="", date_of_service="20261123"
        ).replace(b"\x1d\x1e\x1cAM21\x1cANR", b"")  # no group at all
    )
    assert reject is not None and reject.rx_numbers == ()
    assert answers(request, reject)


def test_leading_zeros_and_padding_of_the_rx_number_do_not_matter() -> None:
    request = read(b.request_bytes())
    response = read(
        SwitchPayer().answer(b.request_bytes()).replace(b"D2000001234567", b"D21234567 ")
    )
    assert request is not None and response is not None
    assert answers(request, response)


def test_two_requests_never_answer_each_other_and_garbage_is_not_read() -> None:
    request = read(b.request_bytes())
    assert request is not None
    assert not answers(request, request)
    assert read(b"not a claim") is None


@pytest.mark.parametrize(
    ("peer", "allow", "ok"),
    [
        (("127.0.0.1", 5), (), True),
        (("::1", 5, 0, 0), (), True),
        (("10.1.2.3", 5), (), False),
        (("10.1.2.3", 5), ("10.1.0.0/16",), True),
        (("::ffff:10.1.2.3", 5, 0, 0), ("10.1.0.0/16",), True),
        (("10.2.0.1", 5), ("10.1.0.0/16",), False),
        (None, (), False),
    ],
)
def test_who_may_connect(peer: object, allow: tuple[str, ...], ok: bool) -> None:
    import ipaddress

    nets = tuple(ipaddress.ip_network(a) for a in allow)
    assert peer_allowed(peer, nets) is ok


# ---- pairing copies: any interleaving of exchanges pairs each response with its request

_STORES = ("1999999976", "1999999968")
_RXS = ("000000000011", "000000000022", "000000000033")


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(_STORES), st.sampled_from(_RXS), st.sampled_from(["", "REJ75"])),
        min_size=1,
        max_size=6,
        unique_by=lambda c: (c[0], c[1]),  # what a response can tell apart (see below)
    ).flatmap(
        lambda claims: st.tuples(
            st.just(claims),
            st.permutations([(i, part) for i in range(len(claims)) for part in (0, 1)]),
        )
    )
)
def test_any_interleaving_of_copies_pairs_each_response_with_its_own_request(
    case: tuple[list[tuple[str, str, str]], list[tuple[int, int]]],
) -> None:
    claims, order = case
    payer = SwitchPayer()
    requests = [
        b.request_bytes(provider_id=store, pcn=pcn or "SYNPCN", rxs=(b.Rx(rx_number=rx),))
        for store, rx, pcn in claims
    ]
    answers_ = [payer.answer(r) for r in requests]
    # a response is copied after its request (what the copier promises); the rest is any order
    seen: set[int] = set()
    stream = []
    for i, part in order:
        if part == 1 and i not in seen:
            continue
        seen.add(i)
        stream.append((i, part))
    stream += [(i, 1) for i, part in order if part == 1 and (i, 1) not in stream]
    waiting: Waiting[int] = Waiting()
    paired: dict[int, int] = {}
    for i, part in stream:
        message = read(requests[i] if part == 0 else answers_[i])
        assert message is not None
        if part == 0:
            waiting.add(0.0, message, i)
        else:
            got = waiting.pair(message)
            assert got is not None
            paired[i] = got[1]
    assert paired == {i: i for i in range(len(claims))}
    assert len(waiting) == 0


def test_requests_an_answer_cannot_tell_apart_pair_in_the_order_they_happened() -> None:
    """A primary and a secondary payer's claim for the same prescription, store and day:
    the response names neither BIN nor PCN. The secondary is billed after the primary's
    answer (it carries what the primary paid), so copies in the order they happened
    pair right: oldest first."""
    payer = SwitchPayer()
    primary = b.request_bytes(bin="610014", pcn="SYNPCN")
    secondary = b.request_bytes(bin="610015", pcn="REJ75")
    waiting: Waiting[str] = Waiting()
    for name, req in (("primary", primary), ("secondary", secondary)):
        message = read(req)
        assert message is not None
        waiting.add(0.0, message, name)
        answer = read(payer.answer(req))
        assert answer is not None
        got = waiting.pair(answer)
        assert got is not None and got[1] == name
