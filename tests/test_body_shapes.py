"""The local API's JSON answers keep their exact shape: the order of the keys, which
keys are left out when they do not apply and which are null (issue 15 moves the shapes
into pydantic models; the dispensing systems read these bytes)."""

from __future__ import annotations

from typing import Any

import httpx

from tests import builders as b
from tests.support import wait_until

_TX = [
    "transaction_status",
    "reject_codes",
    "pa_eligible",
    "message",
    "button_label",
    "message_source",
]
_PA = [
    "pa_id", "claim_id", "transaction_index", "rx_number", "product_id", "provider_id",
    "urls", "url",
    "links", "link_pending",
    "open_url", "workflow_status", "plan_outcome", "status", "deleted", "fax_failed",
    "events", "matched", "created_at", "updated_at", "cursor",
    "gone", "expires_at", "expiring", "renewal_of", "renewed_by",
    "provisional_id",
]  # fmt: skip


def test_claim_answers_keep_their_keys_in_order(make_app: Any) -> None:
    c = make_app()
    paid = c.post("/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.PAID])))
    assert list(paid.json()) == ["claim_id", *_TX, "elapsed_ms"]
    assert paid.text.startswith('{"claim_id":"')  # compact, as jsonify writes it

    reject = c.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75]))
    )
    assert list(reject.json()) == ["claim_id", *_TX, "outcomes_elapsed_ms", "elapsed_ms"]

    req = b.request_bytes(rxs=(b.Rx(), b.Rx(rx_number="000001234568")))
    two = c.post("/v1/claims", json=b.exchange_json(req, b.response_bytes([b.PAID, b.REJECT_MR])))
    body = two.json()
    assert list(body) == ["claim_id", *_TX, "transactions", "elapsed_ms"]
    assert [list(t) for t in body["transactions"]] == [["index", *_TX], ["index", *_TX]]
    assert body["transactions"][1]["reject_codes"] == ["MR"]

    bad = c.post("/v1/claims", json={"request": "x", "response": "y"})
    assert bad.status_code == 400
    assert list(bad.json()["error"]) == ["code", "message", "detail"]
    assert list(bad.json()["error"]["detail"]) == ["part", "offset", "segment_id", "field_id"]


def test_pa_answers_keep_their_keys_in_order_and_their_nulls(make_daemon: Any) -> None:
    d = make_daemon()
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as c:
        claim = c.post(
            "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75]))
        ).json()
        created = c.post(f"/v1/claims/{claim['claim_id']}/pa")
        assert created.status_code == 201
        pa = created.json()
        assert list(pa) == _PA
        assert pa["plan_outcome"] is None or isinstance(pa["plan_outcome"], str)
        # the links a callback brought, present only when known, in this order
        order = ["html_url", "pdf_url", "token_urls"]
        assert list(pa["links"]) == [k for k in order if k in pa["links"]]

        again = c.post(f"/v1/claims/{claim['claim_id']}/pa", json={"transaction": 0})
        assert again.status_code == 200 and again.json()["pa_id"] == pa["pa_id"]

        wait_until(
            lambda: c.get(f"/v1/pa/{pa['pa_id']}").json()["workflow_status"] == "PA Response",
            what="PA Response",
        )
        one = c.get(f"/v1/pa/{pa['pa_id']}").json()
        assert list(one) == [*_PA, "history"]
        assert list(one["history"][0]) == [
            "received_at", "source", "workflow_status", "plan_outcome", "event_time", "events",
            "note",
        ]  # fmt: skip
        submit = next(h for h in one["history"] if h["source"] == "submit")
        assert submit["plan_outcome"] is None  # null, not left out

        feed = c.get("/v1/pa").json()
        assert list(feed) == ["pas", "cursor"]
        assert [list(p) for p in feed["pas"]] == [_PA]


def test_reversal_answer_keeps_its_keys_and_null_error(make_app: Any) -> None:
    c = make_app()
    r = c.post("/v1/reversals", json={"request": b.request_bytes(code="B2").decode("latin-1")})
    assert r.status_code == 200
    assert r.json() == {
        "reversal_id": r.json()["reversal_id"],
        "queue_id": r.json()["queue_id"],
        "status": "delivered",
        "last_error": None,
        "pa_found": False,
        "pas": [],
        "message": "The PA service took the reversal; pa-bridge knows no PA for this claim.",
    }
    assert list(r.json()) == [
        "reversal_id", "queue_id", "status", "last_error", "pa_found", "pas", "message",
    ]  # fmt: skip
