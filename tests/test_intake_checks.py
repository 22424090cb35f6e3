"""What every request to the local API must pass before its view (``web/checks.py``,
one ``before_request`` hook): each refusal's status, code and headers, for
``POST /v1/claims`` and the rest; the claim's answer bytes; the tokens never shown."""

from __future__ import annotations

import io
import json
import sqlite3
import uuid
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from werkzeug.test import Client

from pa_bridge.service.bodies import ClaimAnswer, TransactionAnswer, dump
from pa_bridge.store import StoreUnavailable
from tests import builders as b

TOKEN = "route-test-token-all-0001"
LIMIT = 4096


def _claim(**extra: Any) -> dict[str, Any]:
    """The body of a claim; ``extra`` adds fields or replaces ``request``/``response``."""
    return {**b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75])), **extra}


AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = json.dumps(_claim())

CASES: dict[str, dict[str, Any]] = {
    "no token": {"data": JSON, "content_type": "application/json"},
    "wrong token": {
        "data": JSON,
        "content_type": "application/json",
        "headers": {"Authorization": "Bearer nope"},
    },
    "basic scheme": {
        "data": JSON,
        "content_type": "application/json",
        "headers": {"Authorization": f"Basic {TOKEN}"},
    },
    "foreign host": {
        "data": JSON,
        "content_type": "application/json",
        "headers": {**AUTH, "Host": "rebind.test"},
    },
    "cross origin": {
        "data": JSON,
        "content_type": "application/json",
        "headers": {**AUTH, "Origin": "http://attacker.test"},
    },
    "cross site fetch": {
        "data": JSON,
        "content_type": "application/json",
        "headers": {**AUTH, "Sec-Fetch-Site": "cross-site"},
    },
    "form": {"data": JSON, "content_type": "text/plain", "headers": AUTH},
    "no type": {"data": JSON, "headers": AUTH},
    "too large": {"data": "x" * (LIMIT + 1), "content_type": "text/plain", "headers": AUTH},
    "too large json": {
        "data": json.dumps({"pad": "x" * LIMIT}),
        "content_type": "application/json",
        "headers": AUTH,
    },
    "bad key": {
        "data": JSON,
        "content_type": "application/json",
        "headers": {**AUTH, "Idempotency-Key": "has blanks"},
    },
    "not json": {"data": "{nope", "content_type": "application/json", "headers": AUTH},
    "array": {"data": "[1]", "content_type": "application/json", "headers": AUTH},
    "deep": {"data": "[" * 200 + "]" * 200, "content_type": "application/json", "headers": AUTH},
    "empty": {"content_type": "application/json", "headers": AUTH},
    "no fields": {"data": "{}", "content_type": "application/json", "headers": AUTH},
    "bad claim": {
        "data": json.dumps({"request": "garbage", "response": "garbage"}),
        "content_type": "application/json; charset=utf-8",
        "headers": AUTH,
    },
}


@pytest.fixture
def app(make_app: Any) -> Any:
    client = make_app(
        intake={
            "tokens": [TOKEN],
            "max_body_bytes": LIMIT,
        }
    )
    return client.app


#: what each case answers: status, error code
EXPECTED: dict[str, tuple[int, str]] = {
    "no token": (401, "unauthorized"),
    "wrong token": (401, "unauthorized"),
    "basic scheme": (401, "unauthorized"),
    "foreign host": (403, "forbidden_host"),
    "cross origin": (403, "cross_origin"),
    "cross site fetch": (403, "cross_origin"),
    "form": (415, "unsupported_media_type"),
    "no type": (415, "unsupported_media_type"),
    "too large": (413, "body_too_large"),
    "too large json": (413, "body_too_large"),
    "bad key": (400, "invalid_idempotency_key"),
    "not json": (400, "invalid_body"),
    "array": (400, "invalid_body"),
    "deep": (400, "invalid_body"),
    "empty": (400, "invalid_body"),
    "no fields": (400, "invalid_body"),
    "bad claim": (400, "malformed_claim"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_refusal_answers_its_status_and_code_and_stores_nothing(app: Any, case: str) -> None:
    r = Client(app).open("/v1/claims", method="POST", **CASES[case])
    status, code = EXPECTED[case]
    assert (r.status_code, r.get_json()["error"]["code"]) == (status, code)
    assert r.headers["Content-Type"] == "application/json"
    assert set(r.get_json()["error"]) == {"code", "message", "detail"}
    if status == 401:
        assert r.headers["WWW-Authenticate"] == 'Bearer realm="pa-bridge"'
    else:
        assert "WWW-Authenticate" not in r.headers
    assert (
        app.extensions["pa_bridge"].store.query("SELECT count(*) AS n FROM exchanges")[0]["n"] == 0
    )


def test_other_methods_and_paths_answer_json(app: Any) -> None:
    for method, path, status in (
        ("GET", "/v1/claims", 405),
        ("PUT", "/v1/claims", 405),
        ("POST", "/v1/claims/", 404),
    ):
        r = Client(app).open(path, method=method, headers=AUTH)
        assert r.status_code == status, (method, path)
        assert set(r.get_json()["error"]) == {"code", "message", "detail"}
        if status == 405:
            assert "POST" in r.headers["Allow"]


def test_an_answer_is_its_json_text_and_a_replay_says_so(app: Any) -> None:
    key = str(uuid.uuid4())
    kw: dict[str, Any] = {
        "data": JSON,
        "content_type": "application/json",
        "headers": {**AUTH, "Idempotency-Key": key},
    }
    first = Client(app).open("/v1/claims", method="POST", **kw)
    assert first.status_code == 200
    assert first.headers["Content-Type"] == "application/json"
    assert "Idempotent-Replayed" not in first.headers
    answer = first.get_json()
    assert answer["reject_codes"] == ["75"] and answer["claim_id"]
    assert first.get_data() == (json.dumps(answer, separators=(",", ":")) + "\n").encode()
    again = Client(app).open("/v1/claims", method="POST", **kw)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["claim_id"] == answer["claim_id"]
    # the stored claim reads the same through GET
    got = Client(app).get(f"/v1/claims/{answer['claim_id']}", headers=AUTH)
    assert got.status_code == 200
    assert got.get_json()["claim_id"] == answer["claim_id"]


def test_a_charset_and_a_chunked_body_are_claims_too(app: Any) -> None:
    ctype = "application/json; charset=utf-8"
    other = Client(app).post("/v1/claims", data=JSON, content_type=ctype, headers=AUTH)
    assert other.status_code == 200 and other.get_json()["reject_codes"] == ["75"]
    # no Content-Length (a chunked body the server did not count)
    chunked = Client(app).post(
        "/v1/claims",
        input_stream=io.BytesIO(JSON.encode()),
        content_type="application/json",
        headers={**AUTH, "Transfer-Encoding": "chunked"},
        environ_overrides={"wsgi.input_terminated": True},
    )
    assert chunked.status_code == 200 and chunked.get_json()["reject_codes"] == ["75"]


def test_a_reused_idempotency_key_is_a_422(app: Any) -> None:
    key = str(uuid.uuid4())
    headers = {**AUTH, "Idempotency-Key": key}
    first = Client(app).post(
        "/v1/claims", data=JSON, content_type="application/json", headers=headers
    )
    assert first.status_code == 200
    other = json.dumps(_claim(response=b.response_bytes([b.PAID]).decode("latin-1")))
    r = Client(app).post("/v1/claims", data=other, content_type="application/json", headers=headers)
    assert r.status_code == 422 and r.get_json()["error"]["code"] == "idempotency_key_reused"


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (StoreUnavailable("cannot begin a write: database is locked"), 503, "database_unavailable"),
        (sqlite3.OperationalError("disk I/O error"), 503, "database_unavailable"),
        (RuntimeError("patient Jane Doe"), 500, "internal_error"),
    ],
)
def test_a_database_failure_and_an_unexpected_error_say_no_more(
    app: Any, monkeypatch: pytest.MonkeyPatch, error: Exception, status: int, code: str
) -> None:
    """Injected: nothing real raises these on demand (a held lock answers the claim's
    own 503 ``storage_unavailable`` after a 5 s wait)."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(app.extensions["pa_bridge"].claims, "intake", broken)
    r = Client(app).post("/v1/claims", data=JSON, content_type="application/json", headers=AUTH)
    assert r.status_code == status and r.get_json()["error"]["code"] == code
    assert b"Jane" not in r.get_data()


_texts = st.text(alphabet=st.characters(max_codepoint=127), max_size=40) | st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40
)
_ms = st.floats(min_value=0, max_value=1e7, allow_nan=False).map(lambda x: round(x, 1)) | st.floats(
    min_value=0, max_value=1e-3
)


@example(
    message="\x7f", label="", codes=[], elapsed=0.0, outcomes=None, tolerated=None, several=False
)
@given(
    message=_texts,
    label=_texts,
    codes=st.lists(st.text(alphabet="0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ", max_size=3)),
    elapsed=_ms,
    outcomes=st.none() | _ms,
    tolerated=st.none() | st.lists(_texts, min_size=1, max_size=3),
    several=st.booleans(),
)
def test_the_answer_json_is_what_json_dumps_made(
    message: str,
    label: str,
    codes: list[str],
    elapsed: float,
    outcomes: float | None,
    tolerated: list[str] | None,
    several: bool,
) -> None:
    """``ClaimAnswer.json_text`` takes pydantic's serializer for an ASCII answer: the
    bytes are those of ``json.dumps`` (what the API has always sent and stored)."""
    t = TransactionAnswer(
        index=0,
        transaction_status="R",
        reject_codes=codes,
        pa_eligible=bool(codes),
        message=message,
        button_label=label,
        message_source="outcomes" if outcomes is not None else "payer",
        outcomes_elapsed_ms=outcomes,
    )
    answer = ClaimAnswer(
        claim_id="c" * 32,
        **t.model_dump(exclude={"index"}),
        transactions=[t, t] if several else None,
        tolerated=tolerated,
        elapsed_ms=elapsed,
    )
    assert answer.json_text() == json.dumps(dump(answer), separators=(",", ":"))


def test_the_tokens_are_kept_once_and_never_shown(app: Any) -> None:
    tokens = app.extensions["pa_bridge.tokens"]
    assert TOKEN not in repr(tokens) and TOKEN not in str(tokens)
    assert not any(TOKEN in repr(v) for v in app.config.values())


@pytest.mark.parametrize(
    "length", ["\u00b2", "\u00b9", "\u0665", "\uff15", "+5", " 5", "-1", "5 ", "0x10"]
)
def test_an_odd_content_length_is_no_claim_and_no_500(app: Any, length: str) -> None:
    r = Client(app).post(
        "/v1/claims",
        data=JSON,
        content_type="application/json",
        headers={**AUTH},
        environ_overrides={"CONTENT_LENGTH": length},
    )
    assert 400 <= r.status_code < 500
    assert (
        app.extensions["pa_bridge"].store.query("SELECT count(*) AS n FROM exchanges")[0]["n"] == 0
    )
