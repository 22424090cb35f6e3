"""Inline mode end to end: a test dispensing system talks to pa-bridge exactly as to its
switch (tests/dispensing.py), pa-bridge forwards to the sandbox's switch, and the
answers are checked byte for byte against what the switch sent. The daemon runs in
process on its embedded sandbox PA service (outcomes, claims)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import ncpdp
from ncpdp.framing import Framing
from pa_bridge.sandbox.app import REPLACEMENTS
from pa_bridge.sandbox.switch import SandboxSwitch
from tests import builders as b
from tests.dispensing import DispensingClient, SwitchDown
from tests.support import wait_until

#: the framing profiles, each with its [framing.<name>] table (None: the built-in)
PROFILES: dict[str, tuple[Framing, dict[str, Any] | None]] = {
    "stx_etx": (Framing(kind="stx_etx"), None),
    "etx": (Framing(kind="etx"), None),
    "length_prefix": (Framing(kind="length_prefix"), None),
    # a partner's 10-byte transport header: 5 digits at offset 2, counting itself
    "partner_header": (
        Framing(
            kind="length_prefix",
            length_offset=2,
            length_width=5,
            length_header=10,
            length_counts_itself=True,
        ),
        {
            "kind": "length_prefix",
            "length_offset": 2,
            "length_width": 5,
            "length_header": 10,
            "length_counts_itself": True,
        },
    ),
}


@pytest.fixture
def switch() -> Iterator[SandboxSwitch]:
    with SandboxSwitch() as sw:
        yield sw


def inline_daemon(
    make_daemon: Any, switch: SandboxSwitch | str, profile: str = "stx_etx", **inline: Any
) -> Any:
    sections: dict[str, Any] = {}
    table = PROFILES[profile][1] if profile in PROFILES else None
    if table is not None:
        sections["framing"] = {profile: table}
    address = switch if isinstance(switch, str) else switch.address
    return make_daemon(
        inline={
            "listen": "127.0.0.1:0",
            "switch": address,
            "switch_tls": False,
            "framing": profile,
            **inline,
        },
        **sections,
    )


def client_for(d: Any, framing: Framing | None = None, **kw: Any) -> DispensingClient:
    return DispensingClient(d.wire.inline_address, framing or Framing(), **kw)


def _fq(payload: bytes, index: int = 0) -> str | None:
    return ncpdp.parse(payload).as_response().transactions[index].additional_message


def _exchanges(d: Any) -> list[dict[str, Any]]:
    d.store.flush()
    return d.store.query("SELECT id, transaction_status, reject_codes, kind, actor FROM exchanges")


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_paid_claims_come_back_byte_for_byte_in_every_profile(
    make_daemon: Any, profile: str
) -> None:
    framing = PROFILES[profile][0]
    with SandboxSwitch(framing) as sw:
        d = inline_daemon(make_daemon, sw, profile)
        with client_for(d, framing) as c:
            for rx in ("000001234567", "000001234568"):
                request = b.request_bytes(rxs=(b.Rx(rx_number=rx),))
                answer = c.exchange(request)
                assert sw.received[-1] == framing.frame(request)  # forwarded unchanged
                assert answer.raw == sw.sent[-1]  # the switch's bytes, every one
                assert (
                    ncpdp.parse(answer.payload).as_response().transactions[0].transaction_status
                    == "P"
                )
            # a 75 reject in the same profile: the outcomes message, framed alike
            replaced = c.exchange(b.request_bytes(pcn="REJ75"))
            assert _fq(replaced.payload) == REPLACEMENTS["75"]
            assert replaced.raw != sw.sent[-1]
        wait_until(lambda: len(_exchanges(d)) == 3, what="the three claims taken in")
        assert {e["actor"] for e in _exchanges(d)} == {"inline:127.0.0.1"}


def test_a_75_reject_gets_the_outcomes_message_and_the_console_its_button(
    make_daemon: Any, switch: SandboxSwitch
) -> None:
    d = inline_daemon(make_daemon, switch)
    with client_for(d) as c:
        answer = c.exchange(b.request_bytes(pcn="REJ75"))
    payer = ncpdp.parse(switch.sent[-1][1:-1])
    ours = ncpdp.parse(answer.payload)  # strict: well-formed
    assert _fq(answer.payload) == REPLACEMENTS["75"]
    # only 526-FQ and its line fields changed
    assert ours.header == payer.header and ours.segments == payer.segments
    assert ours.groups[0].segments[1:] == payer.groups[0].segments[1:]
    drop = {"UF", "UH", "FQ", "UG"}
    mine, theirs = ours.groups[0].segments[0], payer.groups[0].segments[0]
    assert [f for f in mine if f.id not in drop] == [f for f in theirs if f.id not in drop]

    url = d.intake_server.url
    wait_until(
        lambda: httpx.get(f"{url}/v1/console/worklist", timeout=10).json()["claims"],
        what="the claim on the worklist",
    )
    row = httpx.get(f"{url}/v1/console/worklist", timeout=10).json()["claims"][0]
    assert row["reject_codes"] == ["75"] and row["button_label"] == "Submit PA"
    assert row["message"] == REPLACEMENTS["75"] and row["pa"] is None
    pa = httpx.post(f"{url}/v1/claims/{row['claim_id']}/pa", timeout=10)
    assert pa.status_code == 201 and pa.json()["pa_id"]


def test_several_transactions_and_stores_on_one_connection(
    make_daemon: Any, switch: SandboxSwitch
) -> None:
    d = inline_daemon(make_daemon, switch)
    stores = ("1999999976", "1999999968", "1999999950")
    with client_for(d) as c:
        # one after the other
        for store in stores:
            answer = c.exchange(b.request_bytes(provider_id=store))
            assert ncpdp.parse(answer.payload).as_response().service_provider_id == store
        # several at once on the same connection: each answer names its own claim
        wanted = {}
        for i, store in enumerate(stores):
            rx = f"00000990000{i}"
            wanted[(store, rx)] = True
            c.send(b.request_bytes(provider_id=store, pcn="REJMR", rxs=(b.Rx(rx_number=rx),)))
        got = set()
        for _ in stores:
            resp = ncpdp.parse(c.receive().payload)
            got.add(
                (resp.as_response().service_provider_id, resp.groups[0].segment("22").get("D2"))
            )  # type: ignore[union-attr]
        assert got == set(wanted)
        # a claim with two transactions, both rejected 75: both messages replaced
        two = c.exchange(b.request_bytes(pcn="REJ75", rxs=(b.Rx(), b.Rx(rx_number="000001234599"))))
        assert _fq(two.payload, 0) == REPLACEMENTS["75"] == _fq(two.payload, 1)
        # 70 and 76 call the outcomes interface first too; MR does not: the payer's bytes
        for code in ("70", "76"):
            replaced = c.exchange(b.request_bytes(pcn=f"REJ{code}", provider_id="1999999935"))
            assert _fq(replaced.payload) == REPLACEMENTS[code]
        assert (
            c.exchange(b.request_bytes(pcn="REJMR", provider_id="1999999935")).raw
            == (switch.sent[-1])
        )
        # 5.1: the message in one 526-FQ
        v51 = c.exchange(b.request_bytes(version="51", pcn="REJ75", provider_id="1999999943"))
        st21 = ncpdp.parse(v51.payload).groups[0].segment("21")
        assert st21 is not None and st21.get_all("FQ") == (REPLACEMENTS["75"],)
    wait_until(lambda: len(_exchanges(d)) == 11, what="every claim taken in")


def test_fail_open_when_the_outcomes_interface_errs_or_stalls(
    make_daemon: Any, switch: SandboxSwitch
) -> None:
    d = inline_daemon(make_daemon, switch)
    with client_for(d) as c:
        for bin_ in ("999997", "999998"):  # answers 500; answers after 5 s
            started = time.monotonic()
            answer = c.exchange(b.request_bytes(bin=bin_))
            assert answer.raw == switch.sent[-1]  # the payer's own bytes
            assert time.monotonic() - started < 4.5  # not the drill's 5 s
    wait_until(lambda: len(_exchanges(d)) == 2, what="both claims taken in")

    def answers() -> list[str | None]:
        d.store.flush()
        return [a["answer_json"] for a in d.store.query("SELECT answer_json FROM exchanges")]

    # each answer's record follows its claim's row (the outcomes call comes between)
    wait_until(lambda: None not in answers(), what="both answers recorded")
    assert all('"message_source":"fallback"' in str(a) for a in answers())


def test_fail_open_when_pa_bridge_itself_is_stuck(make_daemon: Any, switch: SandboxSwitch) -> None:
    d = inline_daemon(make_daemon, switch)
    gate = threading.Event()
    blocker = threading.Thread(target=lambda: d.store.write(lambda db: gate.wait(20), timeout=30))
    blocker.start()
    try:
        with client_for(d) as c:
            started = time.monotonic()
            rejected = c.exchange(b.request_bytes(pcn="REJ75"))
            waited = time.monotonic() - started
            assert rejected.raw == switch.sent[-1]  # the budget ran out: the payer's bytes
            # within the budget, the switch's time and the writing included (the
            # relay keeps outcomes.safety_margin_ms back, as the local API does)
            assert waited <= d.use_cases.settings.outcomes.budget_ms / 1000, waited
            paid = c.exchange(b.request_bytes(pcn="PAYER2"))
            assert paid.raw == switch.sent[-1]
    finally:
        gate.set()
        blocker.join()
    # nothing was lost: both are taken in once the database moves again
    wait_until(lambda: len(_exchanges(d)) == 2, what="both claims taken in after all")
    assert d.use_cases.metrics.inline_answers.labels("fallback")._value.get() == 1


def test_messages_we_cannot_read_pass_unchanged(make_daemon: Any, switch: SandboxSwitch) -> None:
    d = inline_daemon(make_daemon, switch)
    with client_for(d) as c:
        garbage = b"NOT AN NCPDP CLAIM \x1c AT ALL"
        answer = c.exchange(garbage)
        assert switch.received[-1] == Framing().frame(garbage)
        assert answer.raw == switch.sent[-1]
        switch.payer.answer = lambda payload: b"GARBLED ANSWER"  # type: ignore[method-assign]
        answer = c.exchange(b.request_bytes(pcn="REJ75"))
        assert answer.payload == b"GARBLED ANSWER"
    assert _exchanges(d) == []


def test_a_swapped_answer_reaches_its_own_request(make_daemon: Any, switch: SandboxSwitch) -> None:
    d = inline_daemon(make_daemon, switch)
    got: dict[str, bytes] = {}

    def ask(rx: str) -> None:
        with client_for(d) as c:
            got[rx] = c.exchange(b.request_bytes(rxs=(b.Rx(rx_number=rx),))).payload

    switch.swap(1)
    first = threading.Thread(target=ask, args=("000000000011",))
    first.start()
    wait_until(lambda: len(switch.received) == 1, what="the first request at the switch")
    ask("000000000022")
    first.join(10)
    # the switch sent each the other's answer; pa-bridge gave each its own
    assert b"D2000000000011" in got["000000000011"]
    assert b"D2000000000022" in got["000000000022"]


def test_an_answer_for_another_claim_is_never_delivered(
    make_daemon: Any, switch: SandboxSwitch
) -> None:
    d = inline_daemon(make_daemon, switch)
    switch.swap_wait_seconds = 0.1
    with client_for(d) as c:
        first = c.exchange(b.request_bytes(rxs=(b.Rx(rx_number="000000000011"),)))
        switch.swap(1)  # the next request gets the previous answer (another claim's)
        c.send(b.request_bytes(rxs=(b.Rx(rx_number="000000000022"),)))
        with pytest.raises(SwitchDown, match=r"closed|broken"):
            c.receive()
    assert switch.sent[-1] == first.raw  # the switch did send the wrong answer
    with client_for(d) as c:  # the next claim goes through on a fresh connection
        ok = c.exchange(b.request_bytes(rxs=(b.Rx(rx_number="000000000033"),)))
        assert b"D2000000000033" in ok.payload


def test_a_switch_that_stalls_or_cuts_looks_like_an_outage_and_the_client_fails_over(
    make_daemon: Any, switch: SandboxSwitch
) -> None:
    d = inline_daemon(make_daemon, switch, switch_timeout_seconds=1.0)
    with client_for(d) as c:
        switch.stall(1)
        c.send(b.request_bytes())
        with pytest.raises(SwitchDown, match=r"closed|broken"):
            c.receive()
    with client_for(d) as c:
        switch.cut(1)
        with pytest.raises(SwitchDown, match=r"closed|broken"):
            c.exchange(b.request_bytes(pcn="SECOND"))
    # a dispensing system with the switch as its backup host gets the payer's answer
    backup = ("127.0.0.1", switch.port)
    with DispensingClient([d.wire.inline_address, backup]) as c:
        switch.cut(1)
        answer = c.claim(b.request_bytes(pcn="THIRD"))
        assert c.answered_by == [backup] and answer.raw == switch.sent[-1]
        # and pa-bridge serves the next one again
        c.hosts = [d.wire.inline_address]
        assert c.claim(b.request_bytes(pcn="FOURTH")).raw == switch.sent[-1]


def test_a_retransmission_gets_one_answer_and_is_taken_in_once(
    make_daemon: Any, switch: SandboxSwitch
) -> None:
    d = inline_daemon(make_daemon, switch)
    request = b.request_bytes(pcn="REJ75")
    with client_for(d) as c:
        switch.stall(1, seconds=1.0)
        c.send(request)
        with pytest.raises(SwitchDown, match="in time"):
            c.receive(timeout=0.2)  # the dispensing system gives up ...
        answer = c.exchange(request)  # ... and sends it again on the same connection
        assert _fq(answer.payload) == REPLACEMENTS["75"]
        # the switch answers both; the second answer is not delivered
        wait_until(lambda: len(switch.sent) == 2, what="both answers sent by the switch")
        dropped = d.use_cases.metrics.inline_answers.labels("dropped")
        wait_until(lambda: dropped._value.get() == 1, what="the surplus answer dropped")
        with pytest.raises(SwitchDown, match="in time"):
            c.receive(timeout=0.3)
    rows = _exchanges(d)
    assert len(rows) == 1 and rows[0]["reject_codes"] == "75"
    # sent again a minute later, still inside the window: the same claim, taken in once
    with client_for(d) as c:
        assert _fq(c.exchange(request).payload) == REPLACEMENTS["75"]
    assert len(_exchanges(d)) == 1


def test_a_reversal_through_inline_reaches_the_service(
    make_daemon: Any, switch: SandboxSwitch
) -> None:
    d = inline_daemon(make_daemon, switch)
    with client_for(d) as c:
        c.exchange(b.request_bytes())
        reversal = c.exchange(b.request_bytes(code="B2"))
        assert reversal.raw == switch.sent[-1]
    wait_until(lambda: any(e["kind"] == "reversal" for e in _exchanges(d)), what="the B2 taken in")
    calls = httpx.get(f"{d.sandbox.url}/sandbox/calls", timeout=10).json()["calls"]
    wait_until(
        lambda: any(
            c.get("transaction_code") == "B2"
            for c in httpx.get(f"{d.sandbox.url}/sandbox/calls", timeout=10).json()["calls"]
        ),
        what="the B2 delivered to the PA service",
    )
    assert calls is not None


def test_tls_on_both_sides(make_daemon: Any, tmp_path: Any) -> None:
    import ssl

    import trustme

    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    server_cert.cert_chain_pems[0].write_to_path(str(cert))
    server_cert.private_key_pem.write_to_path(str(key))
    switch_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(switch_ctx)
    with SandboxSwitch(ssl_context=switch_ctx) as sw:
        d = inline_daemon(
            make_daemon,
            sw,
            switch_tls=True,
            switch_ca_file=str(ca_pem),
            tls_cert=str(cert),
            tls_key=str(key),
        )
        client_ctx = ssl.create_default_context()
        ca.configure_trust(client_ctx)
        with client_for(d, ssl_context=client_ctx) as c:
            answer = c.exchange(b.request_bytes())
            assert answer.raw == sw.sent[-1]
            assert _fq(c.exchange(b.request_bytes(pcn="REJ75")).payload) == REPLACEMENTS["75"]
        # a client that does not speak TLS gets nothing from it
        with DispensingClient(d.wire.inline_address) as plain:
            with pytest.raises(SwitchDown):
                plain.exchange(b.request_bytes(pcn="PLAIN"), timeout=2)


def test_a_failing_switch_address_is_paused_and_the_next_one_serves(
    make_daemon: Any, switch: SandboxSwitch
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # bound, never listening: refused
        d = inline_daemon(make_daemon, f"{dead},{switch.address}")
        failures = d.use_cases.metrics.inline_switch_failures.labels("path_unreachable")
        with client_for(d) as c:
            assert c.exchange(b.request_bytes()).raw == switch.sent[-1]
        assert failures._value.get() == 1
        # paused: the next claims go to the live path without trying the dead one again
        with client_for(d) as c:
            for pcn in ("AGAIN1", "AGAIN2"):
                assert c.exchange(b.request_bytes(pcn=pcn)).raw == switch.sent[-1]
        assert failures._value.get() == 1


def test_a_stop_mid_claim_looks_like_a_switch_outage(
    make_daemon: Any, switch: SandboxSwitch
) -> None:
    d = inline_daemon(make_daemon, switch, stop_grace_seconds=0.2)
    backup = ("127.0.0.1", switch.port)
    result: dict[str, Any] = {}

    def dispensing() -> None:
        with DispensingClient([d.wire.inline_address, backup], timeout=20) as c:
            result["answer"] = c.claim(b.request_bytes())
            result["by"] = c.answered_by

    switch.stall(1)  # pa-bridge's request is in flight when it stops
    t = threading.Thread(target=dispensing)
    t.start()
    wait_until(lambda: len(switch.received) == 1, what="the request at the switch")
    d.stop()
    t.join(20)
    assert result["by"] == [backup]  # failed over to the switch itself
    assert result["answer"].raw == switch.sent[-1]


def test_the_console_shows_an_inline_claim_with_its_submit_pa_button(
    make_daemon: Any,
    switch: SandboxSwitch,
    page: Any,
) -> None:
    from playwright.sync_api import expect

    d = inline_daemon(make_daemon, switch)
    with client_for(d) as c:
        answer = c.exchange(b.request_bytes(pcn="REJ75"))
    assert _fq(answer.payload) == REPLACEMENTS["75"]
    url = d.intake_server.url
    wait_until(
        lambda: httpx.get(f"{url}/v1/console/worklist", timeout=10).json()["claims"],
        what="the claim on the worklist",
    )
    page.goto(f"{url}/")
    row = page.locator("#claims-body").locator("tr", has_text="1234567")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(REPLACEMENTS["75"])
    button = row.get_by_role("button", name="Submit PA")
    expect(button).to_be_visible()
    with page.context.expect_page() as popup:
        button.click()
    pa_id = wait_until(lambda: d.store.query("SELECT id FROM pas"), what="the PA")[0]["id"]
    assert pa_id in popup.value.url
    expect(page.locator("#pas-body tr").first).to_contain_text(pa_id)


def test_connections_to_the_switch_are_kept_alive_and_shared(
    make_daemon: Any, switch: SandboxSwitch
) -> None:
    d = inline_daemon(make_daemon, switch, connections=2)
    results: list[bytes] = []

    def workstation(n: int) -> None:
        with client_for(d) as c:
            for i in range(5):
                rx = f"0000077{n:02d}{i:03d}"
                answer = c.exchange(b.request_bytes(rxs=(b.Rx(rx_number=rx),)))
                assert f"D2{rx}".encode() in answer.payload
                results.append(answer.raw)

    threads = [threading.Thread(target=workstation, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 20
    # four workstations, twenty claims: at most two connections to the switch, kept
    assert 1 <= switch.connections <= 2
    with client_for(d) as c:
        c.exchange(b.request_bytes(pcn="LATER"))
    assert switch.connections <= 2


def test_a_switch_that_cannot_be_reached_closes_the_connection_at_once(make_daemon: Any) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: refused
        d = inline_daemon(make_daemon, f"127.0.0.1:{s.getsockname()[1]}", switch_timeout_seconds=60)
        with client_for(d, timeout=20) as c:
            # an outage, told at once (not after the switch time-out of 60 s, nor after
            # this client's own 20 s): it fails over without waiting
            with pytest.raises(SwitchDown, match=r"closed|broken"):
                c.exchange(b.request_bytes())
        failures = d.use_cases.metrics.inline_switch_failures
        assert failures.labels("path_unreachable")._value.get() == 1
