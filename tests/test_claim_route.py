"""``POST /v1/claims`` outside Flask (``web.claim_route``, decision 0028): every answer
the route gives is byte for byte the answer of the Flask view it stands in for. Each
request goes once through the app (the route in front) and once through Flask's own
``wsgi_app`` (the route's ``inner``), on the same store and sandbox. Scoped tokens
through the route: ``tests/test_pharmacies.py``; everything else in the intake tests
goes through it too."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
import uuid
from collections.abc import Iterator
from typing import Any

import flask
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from werkzeug.test import Client

from pa_bridge.service.bodies import ClaimAnswer, TransactionAnswer, dump
from pa_bridge.store import StoreUnavailable
from pa_bridge.web.claim_route import ClaimRoute
from pa_bridge.web.intake import create_intake_app
from tests import builders as b

TOKEN = "route-test-token-all-0001"
LIMIT = 4096


def _claim(**extra: Any) -> dict[str, Any]:
    return {
        "request": b.request_bytes().decode("latin-1"),
        "response": b.response_bytes([b.REJECT_75]).decode("latin-1"),
        **extra,
    }


def _both(app: Any, **kw: Any) -> tuple[Any, Any]:
    route = app.wsgi_app
    assert isinstance(route, ClaimRoute)
    kw.setdefault("method", "POST")
    a = Client(app).open("/v1/claims", **kw)
    f = Client(route.inner).open("/v1/claims", **kw)
    return a, f


@contextlib.contextmanager
def _flask_requests(app: Any) -> Iterator[list[str]]:
    """The paths Flask itself handles while in the block."""
    seen: list[str] = []

    def started(sender: Any, **extra: Any) -> None:
        seen.append(flask.request.path)

    flask.request_started.connect(started, app)
    try:
        yield seen
    finally:
        flask.request_started.disconnect(started, app)


def _same(a: Any, f: Any) -> None:
    assert (a.status, list(a.headers.items()), a.get_data()) == (
        f.status,
        list(f.headers.items()),
        f.get_data(),
    )


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


@pytest.mark.parametrize("case", sorted(CASES))
def test_refusals_are_the_flask_views_bytes(app: Any, case: str) -> None:
    a, f = _both(app, **CASES[case])
    assert a.status_code >= 400
    _same(a, f)


def test_other_methods_and_paths_reach_flask(app: Any) -> None:
    for method, path in (("GET", "/v1/claims"), ("PUT", "/v1/claims"), ("POST", "/v1/claims/")):
        a = Client(app).open(path, method=method, headers=AUTH)
        f = Client(app.wsgi_app.inner).open(path, method=method, headers=AUTH)
        assert a.status_code in (404, 405, 308)
        _same(a, f)


def test_an_answer_and_its_replay_match_flasks(app: Any) -> None:
    key = str(uuid.uuid4())
    kw: dict[str, Any] = {
        "data": JSON,
        "content_type": "application/json",
        "headers": {**AUTH, "Idempotency-Key": key},
    }
    first = Client(app).open("/v1/claims", method="POST", **kw)
    assert first.status_code == 200
    assert first.headers["Content-Type"] == "application/json"
    answer = first.get_json()
    assert answer["reject_codes"] == ["75"] and answer["claim_id"]
    assert first.get_data() == (json.dumps(answer, separators=(",", ":")) + "\n").encode()
    a, f = _both(app, **kw)
    assert a.headers["Idempotent-Replayed"] == "true"
    assert a.get_json()["claim_id"] == answer["claim_id"]
    _same(a, f)
    # and the stored claim reads the same through the Flask-served GET
    got = Client(app).get(f"/v1/claims/{answer['claim_id']}", headers=AUTH)
    assert got.status_code == 200
    assert got.get_json()["claim_id"] == answer["claim_id"]


def test_a_plain_claim_is_served_by_the_route_and_a_refusal_by_flask(app: Any) -> None:
    with _flask_requests(app) as seen:
        ok = Client(app).post(
            "/v1/claims", data=JSON, content_type="application/json", headers=AUTH
        )
        assert ok.status_code == 200 and seen == []
        for case in ("no token", "form", "not json", "too large", "cross origin"):
            refused = Client(app).open("/v1/claims", method="POST", **CASES[case])
            assert refused.status_code >= 400
        assert seen == ["/v1/claims"] * 5
        # a charset parameter is still the plain shape
        ctype = "application/json; charset=utf-8"
        other = Client(app).post("/v1/claims", data=JSON, content_type=ctype, headers=AUTH)
        assert other.status_code == 200 and other.get_json()["reject_codes"] == ["75"]
        assert len(seen) == 5
        # no Content-Length (a chunked body the server did not count): Flask serves it
        environ = {"wsgi.input_terminated": True}
        chunked = Client(app).post(
            "/v1/claims",
            input_stream=io.BytesIO(JSON.encode()),
            content_type="application/json",
            headers={**AUTH, "Transfer-Encoding": "chunked"},
            environ_overrides=environ,
        )
        assert chunked.status_code == 200 and chunked.get_json()["reject_codes"] == ["75"]
        assert seen[5:] == ["/v1/claims"]


def test_a_reused_idempotency_key_reads_the_same(app: Any) -> None:
    """What the use case raises (a bad claim, ``{}``: ``CASES``; here a 422)."""
    key = str(uuid.uuid4())
    headers = {**AUTH, "Idempotency-Key": key}
    first = Client(app).post(
        "/v1/claims", data=JSON, content_type="application/json", headers=headers
    )
    assert first.status_code == 200
    other = json.dumps(_claim(response=b.response_bytes([b.PAID]).decode("latin-1")))
    a, f = _both(app, data=other, content_type="application/json", headers=headers)
    assert a.status_code == 422 and a.get_json()["error"]["code"] == "idempotency_key_reused"
    _same(a, f)


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (StoreUnavailable("cannot begin a write: database is locked"), 503, "database_unavailable"),
        (sqlite3.OperationalError("disk I/O error"), 503, "database_unavailable"),
        (RuntimeError("patient Jane Doe"), 500, "internal_error"),
    ],
)
def test_a_database_failure_and_an_unexpected_error_read_the_same(
    app: Any, monkeypatch: pytest.MonkeyPatch, error: Exception, status: int, code: str
) -> None:
    """Injected: nothing real raises these on demand (a held lock answers the claim's
    own 503 ``storage_unavailable`` after a 5 s wait, a ``BridgeError`` like the rest)."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(app.extensions["pa_bridge"].claims, "intake", broken)
    a, f = _both(app, data=JSON, content_type="application/json", headers=AUTH)
    assert a.status_code == status and a.get_json()["error"]["code"] == code
    assert b"Jane" not in a.get_data()
    _same(a, f)


def test_a_new_flask_hook_stops_the_app_from_being_built(make_app: Any) -> None:
    app = make_app().app
    assert isinstance(app.wsgi_app, ClaimRoute)  # the daemon's app serves claims through it
    services = app.extensions["pa_bridge"]
    fresh = create_intake_app(services, tokens=[TOKEN], max_body_bytes=LIMIT)
    route = fresh.wsgi_app
    assert isinstance(route, ClaimRoute)

    @fresh.before_request
    def audit_every_request() -> None:
        return None

    with pytest.raises(RuntimeError, match="audit_every_request"):
        ClaimRoute(fresh, route.inner, hooks=())
    with pytest.raises(RuntimeError, match="audit_every_request"):
        ClaimRoute(fresh, route.inner, hooks=tuple(fresh.before_request_funcs[None][:2]))


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
def test_an_odd_content_length_reads_as_flask_reads_it(app: Any, length: str) -> None:
    a, f = _both(
        app,
        data=JSON,
        content_type="application/json",
        headers={**AUTH},
        environ_overrides={"CONTENT_LENGTH": length},
    )
    assert a.status_code != 500
    _same(a, f)
