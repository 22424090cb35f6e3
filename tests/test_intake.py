"""The local API, in process, against the in-process sandbox, over real HTTP."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import pytest

from pa_bridge.store import PgStore
from tests import builders as b
from tests.conftest import AppClient
from tests.support import wait_until


@pytest.fixture
def api(make_daemon: Any, daemon_storage: dict[str, Any]) -> Any:
    d = make_daemon(storage=daemon_storage)
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as c:
        c.daemon = d  # type: ignore[attr-defined]
        yield c


@pytest.fixture
def app(make_app: Any, daemon_storage: dict[str, Any]) -> Any:
    """The intake app alone (``app.test_client()``): for what needs no callback, no
    scheduler and no listener; on each engine in turn."""
    return make_app(storage=daemon_storage)


def test_reject_75_gets_the_outcomes_message(app: AppClient) -> None:
    r = app.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75]))
    )
    assert r.status_code == 200
    body = r.json()
    assert body["message_source"] == "outcomes"
    assert body["pa_eligible"] is True and body["reject_codes"] == ["75"]
    assert body["button_label"]
    assert body["message"] != "PRIOR AUTHORIZATION REQUIRED CALL HELP DESK"
    assert set(body) >= {"claim_id", "transaction_status", "elapsed_ms"}


def test_outcomes_failure_falls_back_to_the_payer_message(app: AppClient) -> None:
    r = app.post(
        "/v1/claims",
        json=b.exchange_json(b.request_bytes(bin="999997"), b.response_bytes([b.REJECT_75])),
    )
    body = r.json()
    assert body["message_source"] == "fallback"
    assert body["message"] == "PRIOR AUTHORIZATION REQUIRED CALL HELP DESK"
    assert body["pa_eligible"] is True and body["button_label"] == "Submit PA"


def test_mr_answers_at_once_with_submit_pa(app: AppClient) -> None:
    body = app.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_MR]))
    ).json()
    assert body["message_source"] == "payer"
    assert body["pa_eligible"] is True and body["button_label"] == "Submit PA"
    assert body["message"] == "PRODUCT NOT ON FORMULARY"


def test_paid_claim_is_reported_through_the_queue(api: httpx.Client) -> None:
    body = api.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.PAID]))
    ).json()
    assert body["pa_eligible"] is False and body["message_source"] == "payer"
    outbox = api.daemon.use_cases.outbox  # type: ignore[attr-defined]
    wait_until(
        lambda: outbox.list() and outbox.list()[0]["status"] == "delivered", what="report delivered"
    )


def test_a_paid_claims_report_is_handed_over_as_its_stored_exchange_reads(app: AppClient) -> None:
    """Intake hands the queued report's variables to the deliverer in memory (no
    re-read, no re-parse); they are exactly what the stored exchange gives after a
    restart, and the hand-off is used once."""
    req = b.request_bytes(rxs=(b.Rx(), b.Rx(rx_number="000001234568")))
    body = b.exchange_json(
        req, b.response_bytes([b.PAID, b.PAID]), metadata={"prescriber_fax": "5551234567"}
    )
    claim_id = app.post("/v1/claims", json=body).json()["claim_id"]
    deliveries = app.services.deliveries
    for index in (0, 1):
        payload = {"claim_id": claim_id, "index": index}
        handed = deliveries.report_variables(payload)
        stored = deliveries.report_variables(payload)  # the hand-off is gone: the row
        assert handed == stored
        assert handed["prescription_reference_number"] == ("000001234567", "000001234568")[index]
        assert handed["prescriber_fax"] == "5551234567"
    assert app.services.outbox.drain_once() == 2
    assert [i["status"] for i in app.services.outbox.list()] == ["delivered", "delivered"]


def test_several_transactions_are_answered_each(app: AppClient) -> None:
    req = b.request_bytes(
        rxs=(b.Rx(), b.Rx(rx_number="000001234568"), b.Rx(rx_number="000001234569"))
    )
    resp = b.response_bytes([b.PAID, b.REJECT_75, b.REJECT_MR])
    body = app.post("/v1/claims", json=b.exchange_json(req, resp)).json()
    assert [t["message_source"] for t in body["transactions"]] == ["payer", "outcomes", "payer"]
    assert [t["pa_eligible"] for t in body["transactions"]] == [False, True, True]
    assert body["transaction_status"] == "P"  # the top level is the first transaction


def test_malformed_claim_is_400_with_the_parser_position_and_nothing_stored(
    app: AppClient,
) -> None:
    raw = b.request_bytes()
    broken = raw[:100] + b"\x1c\x1c" + raw[100:]
    r = app.post("/v1/claims", json=b.exchange_json(broken, b.response_bytes([b.PAID])))
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "malformed_claim"
    assert err["detail"]["offset"] is not None and "byte offset" in err["message"]
    store = app.store
    assert store.query("SELECT count(*) AS n FROM exchanges")[0]["n"] == 0
    r = app.post("/v1/claims", json={"request": 5})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_body"
    r = app.post("/v1/claims", content=b"not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400


def test_submit_pa_once_and_the_second_click_returns_the_same_pa(app: AppClient) -> None:
    claim = app.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75]))
    ).json()
    first = app.post(f"/v1/claims/{claim['claim_id']}/pa")
    assert first.status_code == 201
    pa = first.json()
    assert pa["url"] and pa["pa_id"]
    second = app.post(f"/v1/claims/{claim['claim_id']}/pa")
    assert second.status_code == 200 and second.json()["pa_id"] == pa["pa_id"]
    opened = app.get(f"/v1/pa/{pa['pa_id']}/open")
    assert opened.status_code == 302 and opened.headers["location"] == pa["url"]


def test_submit_pa_errors(app: AppClient) -> None:
    r = app.post("/v1/claims/nope/pa")
    assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_claim"
    paid = app.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.PAID]))
    ).json()
    r = app.post(f"/v1/claims/{paid['claim_id']}/pa")
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_pa_eligible"
    bad_ndc = app.post(
        "/v1/claims",
        json=b.exchange_json(
            b.request_bytes(rxs=(b.Rx(product_id="00000000000"),)), b.response_bytes([b.REJECT_MR])
        ),
    ).json()
    r = app.post(f"/v1/claims/{bad_ndc['claim_id']}/pa")
    assert r.status_code == 502
    err = r.json()["error"]
    assert err["code"] == "service_unrecognized_ndc" and err["message"]
    # nothing stored, so the pharmacist can click again
    assert app.get("/v1/pa").json()["pas"] == []


def test_reversal_reaches_the_service_and_the_pa_shows_delete(api: httpx.Client) -> None:
    claim = api.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75]))
    ).json()
    pa = api.post(f"/v1/claims/{claim['claim_id']}/pa").json()
    r = api.post("/v1/reversals", json={"request": b.request_bytes(code="B2").decode("latin-1")})
    assert r.status_code == 200 and r.json()["status"] == "delivered"

    def deleted() -> bool:
        got = api.get(f"/v1/pa/{pa['pa_id']}").json()
        return got["deleted"] and any(e["type"] == "DELETE" for e in got["events"])

    wait_until(deleted, what="DELETE event on the PA")
    r = api.post("/v1/reversals", json={"request": b.request_bytes().decode("latin-1")})
    assert r.status_code == 400 and r.json()["error"]["code"] == "not_a_reversal"


def test_pa_feed_cursor_returns_only_changes(api: httpx.Client) -> None:
    claim = api.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75]))
    ).json()
    pa = api.post(f"/v1/claims/{claim['claim_id']}/pa").json()
    wait_until(
        lambda: api.get(f"/v1/pa/{pa['pa_id']}").json()["workflow_status"] == "PA Response",
        what="PA Response",
    )
    feed = api.get("/v1/pa").json()
    assert [p["pa_id"] for p in feed["pas"]] == [pa["pa_id"]]
    cursor = feed["cursor"]
    assert api.get("/v1/pa", params={"since": cursor}).json()["pas"] == []
    assert api.get("/v1/pa", params={"since": "x"}).status_code == 400
    for bad in ("-1", str(1 << 64), "99999999999999999999999", str(int(cursor) + 10**12)):
        r = api.get("/v1/pa", params={"since": bad})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_cursor", bad


def test_unknown_paths_and_pas_answer_json_errors(app: AppClient) -> None:
    for path in ("/nowhere", "/v1/pa/NOPE", "/v1/pa/NOPE/open"):
        r = app.get(path)
        assert r.status_code == 404
        assert set(r.json()["error"]) == {"code", "message", "detail"}


def test_oversized_body_is_413(make_app: Any) -> None:
    app = make_app(intake={"max_body_bytes": 2048})
    r = app.post(
        "/v1/claims",
        content=b"{" + b" " * 4096 + b"}",
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"


def _pieces(data: bytes, size: int = 64) -> Any:
    """A body httpx sends with ``Transfer-Encoding: chunked`` (no Content-Length)."""
    for i in range(0, len(data), size):
        yield data[i : i + size]


def test_chunked_bodies_are_accepted_and_refused_over_the_limit(make_daemon: Any) -> None:
    # issue 19: a small chunked body got a generic 400; over the limit is 413 however framed
    d = make_daemon(intake={"max_body_bytes": 4096})
    claim = json.dumps(b.exchange_json(b.request_bytes(), b.response_bytes([b.PAID]))).encode()
    headers = {"Content-Type": "application/json"}
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as c:
        r = c.post("/v1/claims", content=_pieces(claim), headers=headers)
        assert r.request.headers["transfer-encoding"] == "chunked"
        assert r.status_code == 200, r.text
        assert r.json()["message_source"] == "payer" and r.json()["pa_eligible"] is False
        big = json.dumps(
            b.exchange_json(b.request_bytes(), b.response_bytes([b.PAID]), x="y" * 5000)
        )
        r = c.post("/v1/claims", content=_pieces(big.encode()), headers=headers)
        assert r.status_code == 413
        assert r.json()["error"]["code"] == "body_too_large"
        assert set(r.json()["error"]) == {"code", "message", "detail"}
        # a chunked body of the wrong type is still 415, like one with a length
        r = c.post("/v1/claims", content=_pieces(b"a=b"), headers={"Content-Type": "text/plain"})
        assert r.status_code == 415
    rows = d.store.query("SELECT count(*) AS n FROM exchanges")
    assert rows[0]["n"] == 1  # the accepted claim alone


def test_bearer_token_is_required_when_configured(make_app: Any) -> None:
    app = make_app(intake={"tokens": ["tok-one-0a1b2c3d", "tok-two-4e5f6a7b"]})
    body = b.exchange_json(b.request_bytes(), b.response_bytes([b.PAID]))
    r = app.post("/v1/claims", json=body)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    r = app.post("/v1/claims", json=body, headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    assert app.store.query("SELECT count(*) AS n FROM exchanges")[0]["n"] == 0
    r = app.post("/v1/claims", json=body, headers={"Authorization": "Bearer tok-two-4e5f6a7b"})
    assert r.status_code == 200
    assert app.get("/healthz").status_code == 200  # probes need no token


def test_dashboard_open_redirects_with_a_token(app: AppClient) -> None:
    r = app.get("/v1/dashboard/open")
    assert r.status_code == 302
    assert "token=" in r.headers["location"]
    assert r.headers["cache-control"] == "no-store"


def test_healthz_reports_components(api: httpx.Client, engine: str) -> None:
    body = api.get("/healthz").json()
    assert body["status"] == "ok"
    assert body["database"] and body["scheduler"] and body["writer"]
    assert body["queue_depth"] == 0
    assert body["database_engine"] == engine
    assert body["daemon_id"].endswith(f":{os.getpid()}")  # in-process daemon


def test_metrics_count_decisions_and_queue(app: AppClient) -> None:
    app.post("/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75])))
    app.post(
        "/v1/claims",
        json=b.exchange_json(b.request_bytes(bin="999997"), b.response_bytes([b.REJECT_75])),
    )
    app.post("/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_MR])))
    r = app.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'pa_bridge_claims_total{decision="outcomes"} 1.0' in text
    assert 'pa_bridge_claims_total{decision="fallback"} 1.0' in text
    assert 'pa_bridge_claims_total{decision="submit_pa"} 1.0' in text
    assert 'pa_bridge_outcomes_calls_total{result="fallback"} 1.0' in text
    assert "pa_bridge_outcomes_call_seconds_bucket" in text
    assert 'pa_bridge_queue_depth{status="pending"}' in text
    assert "pa_bridge_dead_letters 0.0" in text
    assert "pa_bridge_budget_misses_total 0.0" in text


def test_a_malformed_claim_error_names_the_place_not_the_bytes(app: AppClient) -> None:
    req = b.request_bytes()
    # the segment separator before the patient segment's fields is lost: the parser
    # meets the patient's name where a segment id should be
    i = req.index(b"\x1e\x1cAM01") if b"\x1e\x1cAM01" in req else req.index(b"AM01")
    broken = req[:i] + b"\x1e\x1c" + b.PATIENT_LAST.encode() + req[i + 6 :]
    r = app.post("/v1/claims", json=b.exchange_json(broken, b.response_bytes()))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "malformed_claim" and "byte offset" in err["message"]
    for phi in (b.PATIENT_LAST, b.PATIENT_LAST[:8], b.PATIENT_FIRST[:8]):
        assert phi not in r.text


def test_deeply_nested_json_is_a_400_everywhere(app: AppClient) -> None:
    deep = "[" * 1000 + "]" * 1000
    body = '{"request": ' + deep + "}"
    claim_id = app.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75]))
    ).json()["claim_id"]
    for path in ("/v1/claims", "/v1/reversals", f"/v1/claims/{claim_id}/pa"):
        r = app.post(path, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (path, r.status_code, r.text[:200])
        assert r.json()["error"]["code"] == "invalid_body"
    # strings full of brackets are not nesting
    from pa_bridge.jsonlimits import loads_bounded

    assert loads_bounded('{"a": "' + "[" * 500 + '"}') == {"a": "[" * 500}


def test_transaction_counts_must_agree(app: AppClient) -> None:
    two = b.request_bytes(rxs=(b.Rx(rx_number="000001111111"), b.Rx(rx_number="000002222222")))
    one = b.request_bytes()
    cases = {
        "1 vs 2": (one, b.response_bytes([b.REJECT_75, b.REJECT_75])),
        "2 vs 3": (two, b.response_bytes([b.REJECT_75] * 3)),
        "count X": (one[:20] + b"X" + one[21:], b.response_bytes([b.REJECT_75])),
        "count 0": (one[:20] + b"0" + one[21:], b.response_bytes([b.REJECT_75])),
        "count 2, one group": (one[:20] + b"2" + one[21:], b.response_bytes([b.REJECT_75])),
    }
    before = app.store.query("SELECT count(*) AS n FROM exchanges")[0]["n"]
    for name, (req, resp) in cases.items():
        r = app.post("/v1/claims", json=b.exchange_json(req, resp))
        assert r.status_code == 400, (name, r.status_code, r.text[:300])
        assert r.json()["error"]["code"] == "malformed_claim", name
    after = app.store.query("SELECT count(*) AS n FROM exchanges")[0]["n"]
    assert after == before  # nothing half-stored
    ok = app.post("/v1/claims", json=b.exchange_json(two, b.response_bytes([b.REJECT_75, b.PAID])))
    assert ok.status_code == 200 and len(ok.json()["transactions"]) == 2


def test_a_b2_without_what_finds_the_claim_is_a_400(app: AppClient) -> None:
    no_rx = b.request_bytes(code="B2", rxs=(b.Rx(rx_number=""),))
    r = app.post("/v1/reversals", json={"request": no_rx.decode("latin-1")})
    assert r.status_code == 400 and "402-D2" in r.json()["error"]["message"]
    bad_count = b.request_bytes(code="B2")
    bad_count = bad_count[:20] + b"X" + bad_count[21:]
    r = app.post("/v1/reversals", json={"request": bad_count.decode("latin-1")})
    assert r.status_code == 400 and r.json()["error"]["code"] == "malformed_claim"
    assert app.store.query("SELECT count(*) AS n FROM outbox WHERE kind = 'reversal'")[0]["n"] == 0


def test_submit_pa_after_the_claim_was_reversed_is_refused(app: AppClient) -> None:
    claim = app.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75]))
    ).json()
    r = app.post("/v1/reversals", json={"request": b.request_bytes(code="B2").decode("latin-1")})
    assert r.status_code in (200, 202)
    s = app.post(f"/v1/claims/{claim['claim_id']}/pa")
    assert s.status_code == 409 and s.json()["error"]["code"] == "claim_reversed"
    assert app.store.query("SELECT count(*) AS n FROM pas")[0]["n"] == 0
    # the claim billed again after the reversal can have its PA
    again = app.post(
        "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75]))
    ).json()
    assert app.post(f"/v1/claims/{again['claim_id']}/pa").status_code == 201


def test_the_answers_deferred_record_is_seen_at_once_by_its_readers(app: AppClient) -> None:
    """The answer's record rides in the next commit on SQLite (decision 0025); GET of
    the claim and an Idempotency-Key replay flush it first, so they see it at once. On
    PostgreSQL it is committed at once, by itself, for the fleet's other daemons."""
    app.store.defer_seconds = 3600.0  # only a flush or another commit writes it
    on_sqlite = not isinstance(app.store, PgStore)
    body = b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75]))
    key = {"Idempotency-Key": "5e0b8a52-3c1d-4a7e-9f26-6d1c0b9e4f13"}
    first = app.post("/v1/claims", json=body, headers=key).json()

    def answer_json(claim_id: str) -> object:
        rows = app.store.query("SELECT answer_json FROM exchanges WHERE id = ?", [claim_id])
        return rows[0]["answer_json"]

    if on_sqlite:
        assert answer_json(first["claim_id"]) is None  # deferred: not committed by itself
    else:  # committed by itself, seen without a flush
        wait_until(lambda: answer_json(first["claim_id"]), what="the answer's record")
    again = app.post("/v1/claims", json=body, headers=key)  # flushes, then reads
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json() == first
    second = app.post("/v1/claims", json=body).json()
    if on_sqlite:
        assert answer_json(second["claim_id"]) is None
    got = app.get(f"/v1/claims/{second['claim_id']}").json()  # flushes, then reads
    assert got["answer"]["message"] == second["message"]
