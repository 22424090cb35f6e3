"""End to end: `pa-bridge serve` as a real process against a purpose-built fake that
answers only in the real service's shapes (tests/real_service_fake.py), and the same
flow on the embedded default (the sandbox). Real HTTP on 127.0.0.1, a real SQLite file.

The flow: a 75 rejection (outcomes, with the dispensing system's physician_fax), submit
PA, the second click, callbacks moving the PA (out of order, no updated_at), open at the
token link, a PA known only from its callback opening at its token link, the empty
format ("PA started, link on its way", filled in by the callback), reversal, a 403.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import builders as b
from tests.real_service_fake import RealServiceFake
from tests.support import DaemonProcess, wait_until

pytestmark = pytest.mark.slow

PHYSICIAN_FAX = "6145550199"


def _claim(claim: b.Claim, outcome: b.Outcome = b.REJECT_75) -> dict[str, Any]:
    return b.exchange_json(
        b.request_bytes(claim),
        b.response_bytes([outcome]),
        metadata={"physician_fax": PHYSICIAN_FAX},
    )


def _status(api: httpx.Client, pa_id: str) -> tuple[str | None, str | None]:
    pa = api.get(f"/v1/pa/{pa_id}").json()
    return pa["workflow_status"], pa["plan_outcome"]


@pytest.fixture
def fake_and_daemon(tmp_path: Path) -> Iterator[tuple[RealServiceFake, DaemonProcess]]:
    with RealServiceFake() as fake:
        cfg = tmp_path / "pa-bridge.toml"
        cfg.write_text(
            f"""
[service]
claim_url = "{fake.url}/cmmimport/"
outcomes_url = "{fake.url}/outcomes"
dashboard_url = "{fake.url}/dashboard"
username = "{fake.username}"
password = "{fake.password}"
api_key = "{fake.api_key}"
timeout_seconds = 5
[storage]
path = "{tmp_path / "db.sqlite3"}"
[queue]
poll_seconds = 0.2
backoff_base_seconds = 0.2
backoff_max_seconds = 0.5
"""
        )
        d = DaemonProcess(tmp_path, config=cfg).start()
        fake.callback_url = f"http://127.0.0.1:{d.callback_port}/callbacks/pharmacy"
        try:
            yield fake, d
        finally:
            d.terminate()
    lines = d.log_lines()
    for secret in (b.PATIENT_FIRST, b.PATIENT_LAST, b.CARDHOLDER_ID, fake.password, fake.api_key):
        assert not [x for x in lines if secret in x], f"{secret!r} is in the daemon's log"


def test_serve_against_the_real_shapes(
    fake_and_daemon: tuple[RealServiceFake, DaemonProcess],
) -> None:
    fake, d = fake_and_daemon
    claim = b.Claim(rxs=(b.Rx(rx_number="000007000001"),))
    with httpx.Client(base_url=d.url, timeout=15) as api:
        answer = api.post("/v1/claims", json=_claim(claim)).json()
        assert answer["message_source"] == "outcomes" and answer["button_label"] == "Submit PA"
        assert fake.outcomes[-1]["prescriber_fax"] == PHYSICIAN_FAX

        # submit PA: the bare URL line, HTTP 200, is a new PA (not a duplicate)
        r = api.post(f"/v1/claims/{answer['claim_id']}/pa")
        assert r.status_code == 201, r.text
        pa = r.json()
        (fake_pa,) = fake.pas.values()
        assert pa["pa_id"] == fake_pa.id and pa["url"] == fake.link(fake_pa)
        sent = fake.claims[-1]
        assert sent.code == "B1" and sent.framed
        assert sent.form["physician_fax"] == PHYSICIAN_FAX and sent.form["rejection_code"] == "75"

        # the second click, on the same claim and on a resent exchange of the same claim
        assert api.post(f"/v1/claims/{answer['claim_id']}/pa").json()["pa_id"] == pa["pa_id"]
        resent = api.post("/v1/claims", json=_claim(claim)).json()
        again = api.post(f"/v1/claims/{resent['claim_id']}/pa")
        assert again.status_code == 200 and again.json()["pa_id"] == pa["pa_id"]
        assert [c.code for c in fake.claims] == ["B1"]  # sent once

        # callbacks move it, out of order and without updated_at
        for status, outcome in [("PA Response", "Favorable"), ("New", None), ("PA Request", None)]:
            assert fake.callback(pa["pa_id"], status, outcome) == 200
        assert _status(api, pa["pa_id"]) == ("PA Response", "Favorable")
        history = api.get(f"/v1/pa/{pa['pa_id']}").json()["history"]
        assert [h["source"] for h in history] == ["submit", "callback", "callback", "callback"]

        # open: the hosted page with its token
        opened = api.get(f"/v1/pa/{pa['pa_id']}/open")
        assert opened.status_code == 302 and opened.headers["location"] == fake.link(fake_pa)
        assert httpx.get(opened.headers["location"]).status_code == 200

        # a PA we first hear of in a callback opens at its token link
        assert fake.callback("CBONLY", "New") == 200
        only = api.get("/v1/pa/CBONLY").json()
        assert only["matched"] is False and "token_id=" in only["url"]
        opened = api.get("/v1/pa/CBONLY/open")
        assert opened.status_code == 302 and opened.headers["location"] == only["url"]

        # the empty format: PA started, link on its way; the callback fills the row in
        empty_claim = b.Claim(group_id="SYNEMPTY", rxs=(b.Rx(rx_number="000007000002"),))
        e_answer = api.post("/v1/claims", json=_claim(empty_claim)).json()
        r = api.post(f"/v1/claims/{e_answer['claim_id']}/pa")
        assert r.status_code == 201, r.text
        started = r.json()
        assert started["url"] is None and started["link_pending"] is True
        no_link = api.get(f"/v1/pa/{started['pa_id']}/open")
        assert (
            no_link.status_code == 404 and "link on its way" in no_link.json()["error"]["message"]
        )
        real_id = next(p.id for p in fake.pas.values() if p.payer["group_id"] == "SYNEMPTY")
        assert fake.callback(real_id, "New") == 200
        filled = api.get(f"/v1/pa/{real_id}").json()
        assert filled["claim_id"] == e_answer["claim_id"] and "token_id=" in filled["url"]
        # renamed, not doubled; the provisional id still answers, with the PA's own id
        assert api.get(f"/v1/pa/{started['pa_id']}").json()["pa_id"] == real_id
        assert started["pa_id"] not in [p["pa_id"] for p in api.get("/v1/pa").json()["pas"]]

        # reversal: delivered (framed) -> 200; the DELETE callback marks the PA
        b2 = b.request_bytes(claim.with_(code="B2")).decode("latin-1")
        r = api.post("/v1/reversals", json={"request": b2})
        assert r.status_code == 200 and r.json()["status"] == "delivered"
        assert fake.claims[-1].code == "B2" and fake.claims[-1].framed
        assert fake.callback(pa["pa_id"], "PA Response", "Favorable", delete=True) == 200
        assert api.get(f"/v1/pa/{pa['pa_id']}").json()["deleted"] is True

        # a 403 from the service: a clear error, and nothing stored as a PA
        fake.password = "rotated-at-the-service"
        other = b.Claim(rxs=(b.Rx(rx_number="000007000003"),))
        o_answer = api.post("/v1/claims", json=_claim(other)).json()
        r = api.post(f"/v1/claims/{o_answer['claim_id']}/pa")
        assert r.status_code == 502
        err = r.json()["error"]
        assert err["code"] == "service_credentials" and "credentials" in err["message"]
        assert "Wrong or unknown username or password" in err["detail"]
        assert "rotated" not in r.text
        pas = api.get("/v1/pa").json()["pas"]
        assert not [p for p in pas if p["claim_id"] == o_answer["claim_id"]]


def test_the_same_flow_on_the_embedded_default(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path, env={"PA_BRIDGE_SANDBOX__STEP_SECONDS": "0.1"}).start()
    claim = b.Claim(rxs=(b.Rx(rx_number="000008000001"),))
    try:
        with httpx.Client(base_url=d.url, timeout=15) as api:
            answer = api.post("/v1/claims", json=_claim(claim)).json()
            assert answer["message_source"] == "outcomes"
            r = api.post(f"/v1/claims/{answer['claim_id']}/pa")
            assert r.status_code == 201, r.text
            pa = r.json()
            assert f"/request/view/{pa['pa_id']}?token_id=" in pa["url"]
            assert api.post(f"/v1/claims/{answer['claim_id']}/pa").status_code == 200
            resent = api.post("/v1/claims", json=_claim(claim)).json()
            assert api.post(f"/v1/claims/{resent['claim_id']}/pa").json()["pa_id"] == pa["pa_id"]

            wait_until(
                lambda: _status(api, pa["pa_id"]) == ("PA Response", "Favorable"),
                what="the sandbox's callbacks",
            )
            got = api.get(f"/v1/pa/{pa['pa_id']}").json()
            assert got["links"]["token_urls"] == [pa["url"]]
            opened = api.get(f"/v1/pa/{pa['pa_id']}/open")
            assert opened.status_code == 302 and opened.headers["location"] == pa["url"]
            page = httpx.get(opened.headers["location"])
            assert page.status_code == 200 and "PA Response" in page.text

            # a PA first heard of in a callback (the real body's shape)
            from tests.real_shapes import callback_body

            cb = httpx.post(
                f"http://127.0.0.1:{d.callback_port}/callbacks/pharmacy",
                content=callback_body("SBONLY", "New"),
                headers={"Content-Type": "application/json"},
            )
            assert cb.status_code == 200
            opened = api.get("/v1/pa/SBONLY/open")
            assert opened.status_code == 302 and "token_id=" in opened.headers["location"]

            b2 = b.request_bytes(claim.with_(code="B2")).decode("latin-1")
            r = api.post("/v1/reversals", json={"request": b2})
            assert r.status_code == 200 and r.json()["status"] == "delivered"
            wait_until(
                lambda: api.get(f"/v1/pa/{pa['pa_id']}").json()["deleted"],
                what="the DELETE callback",
            )
            started = [json.loads(x) for x in d.log_lines() if '"daemon.sandbox_started"' in x]
            seen = httpx.get(started[0]["url"] + "/sandbox/claims").json()["claims"]
            assert [c["framed"] for c in seen] == [True, True]
    finally:
        assert d.terminate() == 0
    for secret in (b.PATIENT_FIRST, b.PATIENT_LAST, b.CARDHOLDER_ID):
        assert not [x for x in d.log_lines() if secret in x]
