"""Tap mode end to end: copies of the claim traffic (each request, then its response,
framed) arrive on ``tap.listen`` and each exchange is taken in exactly as ``POST
/v1/claims`` takes it: decisions, the outcomes call and report, the console's Submit
PA button, reversals from copied B2s."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ncpdp.framing import Framing
from pa_bridge.sandbox.app import REPLACEMENTS
from pa_bridge.sandbox.switch import SwitchPayer
from tests import builders as b
from tests.support import wait_until


def tap_daemon(make_daemon: Any, framing: str = "stx_etx", **tap: Any) -> Any:
    return make_daemon(tap={"listen": "127.0.0.1:0", "framing": framing, **tap})


class Copier:
    """What a store router (or the dispensing system) does in tap mode: sends a copy of
    each request and of its response to pa-bridge, framed, on one connection."""

    def __init__(self, address: tuple[str, int], framing: Framing | None = None) -> None:
        self.framing = framing or Framing()
        self.sock = socket.create_connection(address, timeout=10)

    def send(self, *payloads: bytes) -> None:
        self.sock.sendall(b"".join(self.framing.frame(p) for p in payloads))

    def nothing_came_back(self) -> bool:
        self.sock.setblocking(False)
        try:
            return self.sock.recv(1) == b""  # closed by pa-bridge without a byte: also fine
        except BlockingIOError:
            return True
        finally:
            self.sock.setblocking(True)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def payer() -> SwitchPayer:
    """The payers' answers, as the sandbox switch gives them."""
    return SwitchPayer()


@pytest.fixture
def copier_of(make_daemon: Any) -> Iterator[Any]:
    made: list[Copier] = []

    def make(d: Any, framing: Framing | None = None) -> Copier:
        c = Copier(d.wire.tap_address, framing)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def _claims(d: Any) -> list[dict[str, Any]]:
    d.store.flush()
    return d.store.query(
        "SELECT id, kind, transaction_status, reject_codes, actor, answer_json FROM exchanges"
        " ORDER BY received_at"
    )


def test_each_copied_exchange_is_taken_in_as_the_api_takes_it(
    make_daemon: Any, copier_of: Any, payer: SwitchPayer
) -> None:
    d = tap_daemon(make_daemon)
    copier = copier_of(d)
    for pcn in ("SYNPCN", "REJ75", "REJMR"):
        req = b.request_bytes(pcn=pcn)
        copier.send(req, payer.answer(req))
    wait_until(lambda: len(_claims(d)) == 3 and all(c["answer_json"] for c in _claims(d)))
    rows = {c["reject_codes"]: c for c in _claims(d)}
    assert {c["actor"] for c in rows.values()} == {"tap:127.0.0.1"}
    assert '"message_source":"outcomes"' in rows["75"]["answer_json"]  # called before answering
    assert '"pa_eligible":true' in rows["MR"]["answer_json"]
    assert '"message_source":"payer"' in rows[""]["answer_json"]

    # the 75 called the outcomes interface first; the paid and MR claims are reported
    # to it through the queue
    def outcomes_calls() -> int:
        calls = httpx.get(f"{d.sandbox.url}/sandbox/calls", timeout=10).json()["calls"]
        return sum(1 for c in calls if c["interface"] == "outcomes")

    wait_until(lambda: outcomes_calls() == 3, what="three outcomes calls")
    assert copier.nothing_came_back()  # the claim path is untouched: nothing is answered

    url = d.intake_server.url
    worklist = httpx.get(f"{url}/v1/console/worklist", timeout=10).json()["claims"]
    assert sorted(r["reject_codes"][0] for r in worklist) == ["75", "MR"]
    row75 = next(r for r in worklist if r["reject_codes"] == ["75"])
    assert row75["button_label"] == "Submit PA" and row75["message"] == REPLACEMENTS["75"]
    pa = httpx.post(f"{url}/v1/claims/{row75['claim_id']}/pa", timeout=10)
    assert pa.status_code == 201 and pa.json()["url"]


@pytest.mark.parametrize("framing", ["etx", "length_prefix"])
def test_copies_in_the_other_framing_profiles(
    make_daemon: Any, copier_of: Any, payer: SwitchPayer, framing: str
) -> None:
    d = tap_daemon(make_daemon, framing)
    copier = copier_of(d, Framing(kind=framing))
    req = b.request_bytes(pcn="REJ75")
    copier.send(req, payer.answer(req))
    wait_until(lambda: len(_claims(d)) == 1, what="the claim taken in")
    assert _claims(d)[0]["reject_codes"] == "75"


def test_interleaved_copies_on_two_connections_are_paired_by_their_headers(
    make_daemon: Any, copier_of: Any, payer: SwitchPayer
) -> None:
    d = tap_daemon(make_daemon)
    requests_, responses = copier_of(d), copier_of(d)
    a = b.request_bytes(pcn="REJ75", rxs=(b.Rx(rx_number="000000000011"),))
    c = b.request_bytes(pcn="REJMR", rxs=(b.Rx(rx_number="000000000022"),))
    other_store = b.request_bytes(provider_id="1999999968", pcn="REJ70")
    answers = {r: payer.answer(r) for r in (a, c, other_store)}
    requests_.send(a, c, other_store)
    wait_until(lambda: d.wire.tap.waiting == 3, what="the three requests")
    responses.send(answers[other_store], answers[c], answers[a])  # in another order
    wait_until(lambda: len(_claims(d)) == 3, what="three exchanges paired")
    got = sorted(c["reject_codes"] for c in _claims(d))
    assert got == ["70", "75", "MR"]


def test_a_response_copied_ahead_of_its_request_on_another_connection_is_paired(
    make_daemon: Any, copier_of: Any, payer: SwitchPayer
) -> None:
    """Two copy connections (one per direction, as a router copies them) are two
    streams: a response may get ahead of its request. It waits a moment for it."""
    d = tap_daemon(make_daemon)
    requests_, responses = copier_of(d), copier_of(d)
    req = b.request_bytes(pcn="REJ75", rxs=(b.Rx(rx_number="000000000033"),))
    counted = d.use_cases.metrics.tap_exchanges
    responses.send(payer.answer(req))
    wait_until(  # the response is in (waiting, or given up) before its request is sent
        lambda: (
            getattr(d.wire.tap, "early_responses", 0)
            + counted.labels("tap", "unmatched_response")._value.get()
        ),
        what="the response read",
    )
    requests_.send(req)
    wait_until(lambda: len(_claims(d)) == 1, what="the exchange paired")
    assert _claims(d)[0]["reject_codes"] == "75"
    assert counted.labels("tap", "unmatched_response")._value.get() == 0
    assert getattr(d.wire.tap, "early_responses", 0) == 0


def test_copied_reversals_reach_the_service_and_refused_ones_do_not(
    make_daemon: Any, copier_of: Any, payer: SwitchPayer
) -> None:
    d = tap_daemon(make_daemon)
    copier = copier_of(d)
    claim = b.request_bytes(pcn="REJ75")
    copier.send(claim, payer.answer(claim))
    wait_until(lambda: len(_claims(d)) == 1)
    pa = httpx.post(f"{d.intake_server.url}/v1/claims/{_claims(d)[0]['id']}/pa", timeout=10)
    assert pa.status_code == 201
    b2 = b.request_bytes(pcn="REJ75", code="B2")
    refused = b.response_bytes(
        [b.Outcome(status="R", reject_codes=("87",), pricing=False)], code="B2"
    )
    copier.send(b2, refused)  # the payer refused the reversal: the claim stands
    copier.send(b2, payer.answer(b2))
    wait_until(
        lambda: any(c["kind"] == "reversal" for c in _claims(d)), what="the reversal taken in"
    )
    assert [c["kind"] for c in _claims(d)].count("reversal") == 1
    wait_until(
        lambda: httpx.get(f"{d.intake_server.url}/v1/pa/{pa.json()['pa_id']}", timeout=10).json()[
            "deleted"
        ],
        what="the PA deleted by the service (its DELETE callback)",
    )
    skipped = d.use_cases.metrics.tap_exchanges.labels("tap", "skipped")._value.get()
    assert skipped == 1


def test_copies_that_do_not_pair_are_counted_not_taken_in(
    make_daemon: Any, copier_of: Any, payer: SwitchPayer
) -> None:
    d = tap_daemon(make_daemon, pair_timeout_seconds=0.2)
    copier = copier_of(d)
    lonely = b.request_bytes()
    copier.send(payer.answer(b.request_bytes(pcn="OTHER")))  # a response for no request
    copier.send(lonely)  # a request whose response never comes
    copier.send(b"NOT NCPDP")
    counted = d.use_cases.metrics.tap_exchanges
    wait_until(lambda: counted.labels("tap", "unpaired_request")._value.get() == 1)
    assert counted.labels("tap", "unmatched_response")._value.get() == 1
    assert counted.labels("tap", "unreadable")._value.get() == 1
    assert _claims(d) == []
    # the copier is still served: the next exchange is taken in
    req = b.request_bytes(pcn="REJ75")
    copier.send(req, payer.answer(req))
    wait_until(lambda: len(_claims(d)) == 1)


def test_a_copied_retransmission_is_taken_in_once(
    make_daemon: Any, copier_of: Any, payer: SwitchPayer
) -> None:
    d = tap_daemon(make_daemon)
    copier = copier_of(d)
    req = b.request_bytes(pcn="REJ75")
    answer = payer.answer(req)
    copier.send(req, answer)
    wait_until(lambda: len(_claims(d)) == 1)
    copier.send(req, answer)  # the dispensing system sent it again
    counted = d.use_cases.metrics.tap_exchanges
    wait_until(lambda: counted.labels("tap", "retransmit")._value.get() == 1)
    assert len(_claims(d)) == 1
