"""Which answer is whose (decision 0031): a response answers a request when its header
(version, transaction code, provider, date of service) and the prescription numbers it
echoes agree; another claim's answer never does."""

from __future__ import annotations

import pytest

from pa_bridge.sandbox.switch import SwitchPayer
from pa_bridge.tap.matching import answers, read
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
