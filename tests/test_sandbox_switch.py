"""The sandbox's switch: it answers claims as payers do, over each framing profile, and
misbehaves on command (stall, cut, swap), so the inline mode's promises can be tested."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest

import ncpdp
from ncpdp.framing import Framing
from pa_bridge.sandbox import SandboxConfig, SandboxServer
from pa_bridge.sandbox.switch import SandboxSwitch
from tests import builders as b
from tests.dispensing import DispensingClient, SwitchDown

PROFILES = {
    "stx_etx": Framing(kind="stx_etx"),
    "etx": Framing(kind="etx"),
    "length_prefix": Framing(kind="length_prefix", length_width=5, length_counts_itself=True),
}


@pytest.fixture
def switch() -> Iterator[SandboxSwitch]:
    with SandboxSwitch() as sw:
        yield sw


def _status(frame_payload: bytes) -> tuple[str, list[str], str | None]:
    tx = ncpdp.parse(frame_payload).as_response().transactions[0]
    return tx.transaction_status or "", [r.code for r in tx.reject_codes], tx.additional_message


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_answers_by_bin_and_pcn_over_each_profile(name: str) -> None:
    framing = PROFILES[name]
    with SandboxSwitch(framing) as sw, DispensingClient(("127.0.0.1", sw.port), framing) as c:
        assert _status(c.exchange(b.request_bytes()).payload)[:2] == ("P", [])
        # the same claim again on the same connection: a duplicate of paid
        assert _status(c.exchange(b.request_bytes()).payload)[0] == "D"
        assert _status(c.exchange(b.request_bytes(pcn="REJ75")).payload)[:2] == ("R", ["75"])
        assert _status(c.exchange(b.request_bytes(pcn="REJMR")).payload)[:2] == ("R", ["MR"])
        drill = _status(c.exchange(b.request_bytes(bin="999998")).payload)
        assert drill[:2] == ("R", ["75"])
        reversal = ncpdp.parse(c.exchange(b.request_bytes(code="B2")).payload)
        assert reversal.as_response().transactions[0].transaction_status == "A"
        # reversed: paid again
        assert _status(c.exchange(b.request_bytes()).payload)[0] == "P"
        assert len(sw.received) == 7 and len(sw.sent) == 7
        assert sw.received[0] == framing.frame(b.request_bytes())


def test_every_answer_echoes_the_rx_number_and_the_store() -> None:
    from pa_bridge.sandbox.switch import SwitchPayer

    two = b.request_bytes(provider_id="1999999968", rxs=(b.Rx(), b.Rx(rx_number="000001234568")))
    resp = ncpdp.parse(SwitchPayer().answer(two))
    assert resp.as_response().service_provider_id == "1999999968"
    assert [g.segment("22").get("D2") for g in resp.groups] == [  # type: ignore[union-attr]
        "000001234567",
        "000001234568",
    ]
    e1 = ncpdp.parse(SwitchPayer().answer(b.request_bytes(code="E1")))
    assert e1.as_response().header_response_status == "R" and not e1.groups


def test_cut_closes_the_connection_without_an_answer(switch: SandboxSwitch) -> None:
    switch.cut()
    with DispensingClient(("127.0.0.1", switch.port)) as c:
        with pytest.raises(SwitchDown, match=r"closed|broken"):
            c.exchange(b.request_bytes())
        assert _status(c.claim(b.request_bytes()).payload)[0] == "P"  # the next one works


def test_stall_holds_the_answer(switch: SandboxSwitch) -> None:
    switch.stall(1)
    with DispensingClient(("127.0.0.1", switch.port)) as c:
        with pytest.raises(SwitchDown, match="in time"):
            c.exchange(b.request_bytes(), timeout=0.5)
    switch.stall(1, seconds=0.2)
    with DispensingClient(("127.0.0.1", switch.port)) as c:
        assert _status(c.exchange(b.request_bytes(pcn="OTHER")).payload)[0] == "P"


def test_swap_gives_two_requests_each_others_answer(switch: SandboxSwitch) -> None:
    switch.swap(1)
    got: dict[str, bytes] = {}

    def ask(rx: str) -> None:
        with DispensingClient(("127.0.0.1", switch.port)) as c:
            got[rx] = c.exchange(b.request_bytes(rxs=(b.Rx(rx_number=rx),))).payload

    first = threading.Thread(target=ask, args=("000000000011",))
    first.start()
    # the first request is held until the second arrives
    from tests.support import wait_until

    wait_until(lambda: len(switch.received) == 1, what="first request received")
    ask("000000000022")
    first.join(10)
    assert b"D2000000000022" in got["000000000011"]
    assert b"D2000000000011" in got["000000000022"]


def test_a_swap_with_no_second_request_gives_the_previous_answer(switch: SandboxSwitch) -> None:
    switch.swap_wait_seconds = 0.2
    with DispensingClient(("127.0.0.1", switch.port)) as c:
        first = c.exchange(b.request_bytes(rxs=(b.Rx(rx_number="000000000011"),))).payload
        switch.swap(1)
        second = c.exchange(b.request_bytes(rxs=(b.Rx(rx_number="000000000022"),))).payload
    assert second == first


def test_faults_on_command_over_the_sandboxs_http_port() -> None:
    with SandboxServer(SandboxConfig()) as sb, SandboxSwitch() as sw:
        r = httpx.post(f"{sb.url}/sandbox/switch", json={"cut": 1})
        assert r.status_code == 404  # no switch attached yet
        sb.state.switch = sw
        r = httpx.post(f"{sb.url}/sandbox/switch", json={"cut": 1, "swap": "2"})
        assert r.status_code == 200 and r.json()["armed"] == {"stall": 0, "cut": 1, "swap": 2}
        assert sw.faults.cut == 1 and sw.faults.swap == 2
        assert httpx.post(f"{sb.url}/sandbox/switch", json={"clear": True}).status_code == 200
        assert sw.faults.cut == 0
        assert httpx.post(f"{sb.url}/sandbox/switch", json={"cut": "x"}).status_code == 400
        # a negative count arms nothing (it used to cut every request until cleared)
        for bad in ({"cut": -1}, {"stall": -2}, {"swap": -1}, {"stall": 1, "stall_seconds": -1}):
            r = httpx.post(f"{sb.url}/sandbox/switch", json=bad)
            assert r.status_code == 400, (bad, r.text)
        assert (sw.faults.cut, len(sw.faults.stall), sw.faults.swap) == (0, 0, 0)
        # a form says false as "false": it does not clear
        sw.cut(1)
        r = httpx.post(f"{sb.url}/sandbox/switch", data={"clear": "false", "swap": "1"})
        assert r.status_code == 200 and (sw.faults.cut, sw.faults.swap) == (1, 1)
        assert httpx.post(f"{sb.url}/sandbox/switch", data={"clear": "true"}).status_code == 200
        assert (sw.faults.cut, sw.faults.swap) == (0, 0)


@pytest.mark.slow
def test_pa_bridge_sandbox_runs_the_switch_beside_it() -> None:
    import re
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "pa_bridge", "sandbox", "--port", "0"),
            *("--switch-port", "0", "--switch-framing", "etx"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        address = url = None
        for line in proc.stdout:
            if m := re.search(r"listening on (http://\S+)", line):
                url = m.group(1)
            if m := re.search(r"switch:\s+(\S+):(\d+) \(etx", line):
                address = (m.group(1), int(m.group(2)))
                break
        assert address is not None and url is not None
        with DispensingClient(address, Framing(kind="etx")) as c:
            httpx.post(f"{url}/sandbox/switch", json={"cut": 1}, timeout=10)
            with pytest.raises(SwitchDown):
                c.exchange(b.request_bytes())
            assert _status(c.claim(b.request_bytes(pcn="REJ75")).payload)[:2] == ("R", ["75"])
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)


def test_the_outcomes_interface_can_be_as_far_away_as_a_real_one() -> None:
    import time

    from pa_bridge.client import PaServiceClient, outcome_variables

    with SandboxServer(SandboxConfig(outcomes_delay_seconds=0.3)) as sb:
        client = PaServiceClient(**sb.client_kwargs())
        try:
            variables = outcome_variables(
                b.request(), b.response([b.REJECT_75]), api_key=sb.config.api_key
            )
            started = time.monotonic()
            result = client.outcomes(variables, budget_ms=1500, fallback_message="payer's")
            assert result.source == "outcomes" and time.monotonic() - started >= 0.3
        finally:
            client.close()
