"""The local API says exactly what it does (issue 31): what a schemathesis run and a new
integrator's reading of docs/api.md found, each held against the document, the answers
and the reference."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from pa_bridge.service.bodies import ClaimAnswer, TransactionAnswer
from tests import builders as b
from tests.conftest import AppClient
from tests.support import document, wait_until

ROOT = Path(__file__).resolve().parent.parent


def _claim(response: bytes | None = None, **extra: Any) -> dict[str, Any]:
    return b.exchange_json(b.request_bytes(), response or b.response_bytes([b.REJECT_75]), **extra)


@pytest.fixture
def app(make_app: Any) -> AppClient:
    return make_app()


def test_empty_strings_are_refused_by_the_document_as_by_the_api(app: AppClient) -> None:
    doc = document()
    schemas = doc["components"]["schemas"]
    for model, field in (("ClaimExchange", "request"), ("ClaimExchange", "response")):
        assert schemas[model]["properties"][field]["minLength"] == 1, (model, field)
    assert schemas["Reversal"]["properties"]["request"]["minLength"] == 1
    params = {p["name"]: p["schema"] for p in doc["paths"]["/v1/pa"]["get"]["parameters"]}
    assert params["claim_id"]["minLength"] == params["pharmacy"]["minLength"] == 1
    # and the API refuses them, as the document now says
    assert app.post("/v1/claims", json={"request": "", "response": ""}).status_code == 400
    assert app.post("/v1/reversals", json={"request": ""}).status_code == 400
    assert app.get("/v1/pa", params={"claim_id": ""}).status_code == 400
    assert app.get("/v1/pa", params={"pharmacy": ""}).status_code == 400


def test_every_operation_with_a_body_declares_415() -> None:
    for path, item in document()["paths"].items():
        for method, op in item.items():
            if "requestBody" in op:
                assert "415" in op["responses"], (method, path)


def test_a_cursor_past_the_newest_names_the_newest(app: AppClient) -> None:
    app.post("/v1/claims", json=_claim())
    for since in (str(10**18), str(2**62)):
        r = app.get("/v1/pa", params={"since": since})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_cursor"
        assert r.json()["error"]["detail"] == {"newest_cursor": app.get("/v1/pa").json()["cursor"]}


@pytest.mark.parametrize("limit", ["0", "-1"])
def test_a_limit_below_one_is_a_400(app: AppClient, limit: str) -> None:
    r = app.get("/v1/pa", params={"limit": limit})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_limit"


def test_a_replayed_submit_answers_the_status_of_the_first(app: AppClient) -> None:
    claim_id = app.post("/v1/claims", json=_claim()).json()["claim_id"]
    key = {"Idempotency-Key": str(uuid.uuid4())}
    first = app.post(f"/v1/claims/{claim_id}/pa", headers=key)
    assert first.status_code == 201
    again = app.post(f"/v1/claims/{claim_id}/pa", headers=key)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert (again.status_code, again.json()["pa_id"]) == (201, first.json()["pa_id"])
    # a second click without the key is the same PA, 200, as before
    assert app.post(f"/v1/claims/{claim_id}/pa").status_code == 200


def test_a_key_used_on_another_path_is_a_422(app: AppClient) -> None:
    key = {"Idempotency-Key": str(uuid.uuid4())}
    claim = app.post("/v1/claims", json=_claim(), headers=key)
    assert claim.status_code == 200
    b2 = {"request": b.request_bytes(code="B2").decode("latin-1")}
    for path, body in ((f"/v1/claims/{claim.json()['claim_id']}/pa", None), ("/v1/reversals", b2)):
        r = app.post(path, json=body, headers=key)
        assert r.status_code == 422, path
        assert r.json()["error"]["code"] == "idempotency_key_reused"
    assert app.store.query("SELECT count(*) AS n FROM pas")[0]["n"] == 0
    assert app.store.query("SELECT count(*) AS n FROM exchanges")[0]["n"] == 1


def test_a_repeated_b2_finds_the_pa_its_first_one_deleted(make_daemon: Any) -> None:
    d = make_daemon()
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as api:
        claim_id = api.post("/v1/claims", json=_claim()).json()["claim_id"]
        pa_id = api.post(f"/v1/claims/{claim_id}/pa").json()["pa_id"]
        b2 = {"request": b.request_bytes(code="B2").decode("latin-1")}
        first = api.post("/v1/reversals", json=b2).json()
        assert first["pa_found"] is True
        wait_until(lambda: api.get(f"/v1/pa/{pa_id}").json()["deleted"], what="the DELETE")
        again = api.post("/v1/reversals", json=b2).json()
    assert again["pa_found"] is True
    assert [(p["pa_id"], p["deleted"]) for p in again["pas"]] == [(pa_id, True)]
    assert again["message"] == f"The PA service took the reversal. PA {pa_id} was deleted already."


def test_the_reference_names_every_operation_and_every_answer_field() -> None:
    """docs/api.md is the integrator's reference: every operation of the document is
    in its table, and every field of a claim's answer is named."""
    text = (ROOT / "docs" / "api.md").read_text()
    named = {
        (m.group(1).lower(), re.sub(r"\{[a-z_]+\}", "{}", m.group(2).split("?")[0]))
        for m in re.finditer(r"`(GET|POST) (/[^` ]*)`", text)
    }
    for path, item in document()["paths"].items():
        for method in item:
            if path.startswith("/console/") or path == "/":
                continue  # the console's own pages (docs/console.md)
            assert (method, re.sub(r"\{[a-z_]+\}", "{}", path)) in named, (method, path)
    for field in {*ClaimAnswer.model_fields, *TransactionAnswer.model_fields}:
        assert f"`{field}`" in text, field
