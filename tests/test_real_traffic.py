"""Issue 25 through pa-bridge: a claim of the largest PBMs (BIN 004336, 003858, the
999999 test BIN) framed STX/ETX, as pa-bridge itself frames claims for the service, or
sent after a line break, is answered, submitted and reversed like any other; the reject
text shown is joined as the standard says.

Before the fix, intake answered 400 ``malformed_claim`` ("an NCPDP batch file"), Submit
PA answered 502 ``service_bad_claim`` (the sandbox read the framed claim as a batch
file) and ``pa-bridge claim parse --lenient`` printed a batch header."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from pa_bridge.client import frame_claim, is_framed
from tests import builders as b
from tests.conftest import AppClient
from tests.support import Cli

STX, ETX = b"\x02", b"\x03"
PBM_BINS = ["004336", "003858", "999999"]


@pytest.mark.parametrize("bin_", PBM_BINS)
@pytest.mark.parametrize(
    "frame",
    [
        lambda r: r,  # sent bare: Submit PA framed it for the service, which then failed
        lambda r: STX + r + ETX,
        lambda r: b"\r\n" + r,
        lambda r: b"\n" + STX + r + ETX,
    ],
    ids=["bare", "stx-etx", "crlf-before", "lf-stx-etx"],
)
def test_a_pbm_claim_framed_as_pharmacies_send_it_is_answered_and_submitted(
    make_app: Any, sandbox: Any, bin_: str, frame: Callable[[bytes], bytes]
) -> None:
    app: AppClient = make_app()
    req = frame(b.request_bytes(bin=bin_))
    r = app.post("/v1/claims", json=b.exchange_json(req, frame(b.response_bytes([b.REJECT_MR]))))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["pa_eligible"] is True and body["button_label"] == "Submit PA"
    pa = app.post(f"/v1/claims/{body['claim_id']}/pa")
    assert pa.status_code == 201, pa.text
    assert pa.json()["pa_id"]
    # the sandbox took the claim framed STX ... ETX, as the real service's reference
    # claims are: read, not a batch file
    last = httpx.get(f"{sandbox.url}/sandbox/claims").json()["claims"][-1]
    assert last["framed"] is True and last["provider_id"] == "1999999976"


def test_a_continued_payer_message_is_shown_joined(make_app: Any) -> None:
    app: AppClient = make_app()
    text = (
        "NCPDP REJECT: TRANSACTION CODE (103-A3) IS INVALID. SUBMIT CLAIM AND REVERSAL SEPARATELY"
    )
    outcome = b.Outcome(status="R", reject_codes=("MR",), messages=(b.continued(text),))
    r = app.post("/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([outcome])))
    assert r.status_code == 200, r.text
    assert r.json()["message"] == text


@pytest.mark.parametrize("bin_", PBM_BINS)
def test_a_framed_pbm_reversal_reaches_the_service(make_daemon: Any, bin_: str) -> None:
    d = make_daemon()
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as api:
        claim = api.post(
            "/v1/claims",
            json=b.exchange_json(
                STX + b.request_bytes(bin=bin_) + ETX, b.response_bytes([b.REJECT_MR])
            ),
        ).json()
        pa = api.post(f"/v1/claims/{claim['claim_id']}/pa")
        assert pa.status_code == 201, pa.text
        for reversal in (
            b"\r\n" + b.request_bytes(bin=bin_, code="B2"),
            STX + b.request_bytes(bin=bin_, code="B2") + ETX + b"\r\n",
        ):
            r = api.post("/v1/reversals", json={"request": reversal.decode("latin-1")})
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "delivered", r.json()


def test_claims_go_out_framed_once_whatever_framing_they_came_with() -> None:
    core = b.request_bytes(bin="004336").decode("latin-1")
    for came in (core, "\r\n" + core, "\x02" + core + "\x03\r\n", "\n\x02" + core + "\x03"):
        assert frame_claim(came) == "\x02" + core + "\x03"
        assert frame_claim(came, "none") == core
    assert is_framed("\r\n\x02" + core + "\x03\r\n") and not is_framed("\r\n" + core)


@pytest.mark.parametrize("bin_", PBM_BINS)
def test_claim_parse_reads_a_framed_pbm_claim_not_a_batch_file(cli: Cli, bin_: str) -> None:
    framed = STX + b.request_bytes(bin=bin_) + ETX
    r = cli("claim", "parse", "--lenient", "-", input=framed)
    assert r.exit_code == 0, r.stderr_bytes
    doc = json.loads(r.stdout_bytes)
    assert doc["kind"] == "request" and doc["header"][0] == {
        "id": "A1",
        "number": 101,
        "name": "BIN Number",
        "value": bin_,
    }
    back = cli("claim", "format", "-", input=r.stdout_bytes)
    assert back.stdout_bytes == framed
    # strict mode names the framing, not a batch file
    r = cli("claim", "parse", "-", input=framed)
    assert r.exit_code == 2 and b"STX framing before the header" in r.stderr_bytes
