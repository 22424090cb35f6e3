"""The OpenAPI document at /openapi.json stays true: the intake app's routes and the
document's paths are the same set, real answers validate against its schemas, and
schemathesis finds no 5xx on generated input against a running daemon."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import jsonschema_rs
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from pa_bridge.web.intake import create_intake_app
from tests import builders as b
from tests.support import document, wait_until

#: The local API table of PRODUCT.md (docs/ of the shared workspace).
PRODUCT_TABLE = {
    ("post", "/v1/claims"),
    ("get", "/v1/claims/{claim_id}"),
    ("post", "/v1/claims/{claim_id}/pa"),
    ("post", "/v1/reversals"),
    ("get", "/v1/pa"),
    ("get", "/v1/pa/{pa_id}"),
    ("get", "/v1/pa/{pa_id}/open"),
    ("get", "/v1/dashboard/open"),
    ("get", "/healthz"),
    ("get", "/metrics"),
    ("get", "/"),
}
#: In PRODUCT.md but not served yet. When a route appears, add it to the document and
#: drop it here (test_not_yet_served_is_still_not_served fails to remind you).
NOT_YET_SERVED: set[tuple[str, str]] = set()

_METHODS = {"get", "post", "put", "patch", "delete"}


def _app() -> Any:
    return create_intake_app(cast(Any, None), tokens=[], max_body_bytes=1 << 20)


def _routes(*, include_default_static: bool = False) -> set[tuple[str, str]]:
    out = set()
    for rule in _app().url_map.iter_rules():
        if rule.endpoint == "static" and not include_default_static:
            continue
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        for m in rule.methods or ():
            if m.lower() in _METHODS:
                out.add((m.lower(), path))
    return out


def _documented() -> set[tuple[str, str]]:
    return {(m, path) for path, item in document()["paths"].items() for m in item if m in _METHODS}


def test_every_route_is_documented_and_every_documented_path_is_a_route() -> None:
    routes, documented = _routes(), _documented()
    assert routes - documented == set(), "routes missing from the OpenAPI document"
    assert documented - routes == set(), "documented paths the app does not serve"


def test_the_product_table_is_covered() -> None:
    assert PRODUCT_TABLE - NOT_YET_SERVED <= _documented()
    assert ("get", "/v1/console/worklist") in _documented()


def test_not_yet_served_is_still_not_served() -> None:
    assert NOT_YET_SERVED.isdisjoint(_routes()), "now served: document it, update this test"


def test_no_default_static_route() -> None:
    assert ("get", "/static/{filename}") not in _routes(include_default_static=True)


def test_the_document_is_well_formed() -> None:
    doc = document()
    assert doc["openapi"].startswith("3.1")
    # schemathesis parses it (OpenAPI 3.1) and every schema compiles as JSON Schema 2020-12
    loaded = schemathesis.openapi.from_dict(doc)
    assert len(list(loaded.get_all_operations())) == len(_documented())
    for name, schema in doc["components"]["schemas"].items():
        jsonschema_rs.Draft202012Validator({**schema, "components": doc["components"]}), name
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in _METHODS:
                assert op["operationId"] and op["responses"], (method, path)
                assert "default" in op["responses"], (method, path)


# ---- real answers against the schemas ----------------------------------------------------


def _schema_for(method: str, path: str, status: int) -> dict[str, Any] | None:
    doc = document()
    responses = doc["paths"][path][method]["responses"]
    declared = responses.get(str(status)) or responses["default"]
    content = declared.get("content", {}).get("application/json")
    if content is None or "schema" not in content:
        return None
    return {**content["schema"], "components": doc["components"]}


class Checked:
    """An httpx client that validates every JSON answer against the document."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.seen: set[tuple[str, str, int]] = set()

    def call(self, method: str, template: str, path: str, **kw: Any) -> httpx.Response:
        r = self.client.request(method.upper(), path, **kw)
        responses = document()["paths"][template][method]["responses"]
        assert str(r.status_code) in responses or "default" in responses
        if str(r.status_code) not in responses:
            assert r.status_code >= 400, f"{method} {path}: undeclared {r.status_code}"
        schema = _schema_for(method, template, r.status_code)
        if schema is not None:
            assert r.headers["Content-Type"].startswith("application/json")
            errors = [
                e.message for e in jsonschema_rs.Draft202012Validator(schema).iter_errors(r.json())
            ]
            assert errors == [], f"{method.upper()} {path} -> {r.status_code}: {errors}"
        self.seen.add((method, template, r.status_code))
        return r


def test_real_answers_validate_against_the_document(make_daemon: Any) -> None:
    d = make_daemon()
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as c:
        api = Checked(c)
        one = api.call(
            "post",
            "/v1/claims",
            "/v1/claims",
            json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75])),
        ).json()
        req = b.request_bytes(rxs=(b.Rx(), b.Rx(rx_number="000001234568")))
        api.call(
            "post",
            "/v1/claims",
            "/v1/claims",
            json=b.exchange_json(req, b.response_bytes([b.PAID, b.REJECT_MR])),
        )
        api.call("post", "/v1/claims", "/v1/claims", json={"request": "x", "response": "y"})
        api.call(
            "post",
            "/v1/claims",
            "/v1/claims",
            content=b"[]",
            headers={"Content-Type": "application/json"},
        )
        api.call("post", "/v1/claims", "/v1/claims", content=b"x" * (2 << 20))

        sub = "/v1/claims/{claim_id}/pa"
        pa = api.call("post", sub, f"/v1/claims/{one['claim_id']}/pa").json()
        api.call("post", sub, f"/v1/claims/{one['claim_id']}/pa", json={"transaction": 0})
        api.call("post", sub, f"/v1/claims/{one['claim_id']}/pa", json={"transaction": 9})
        api.call("post", sub, "/v1/claims/nope/pa")
        paid = c.post(
            "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.PAID]))
        )
        api.call("post", sub, f"/v1/claims/{paid.json()['claim_id']}/pa")

        wait_until(
            lambda: c.get(f"/v1/pa/{pa['pa_id']}").json()["workflow_status"] == "PA Response",
            what="PA Response",
        )
        listed = api.call("get", "/v1/pa", "/v1/pa").json()
        api.call("get", "/v1/pa", "/v1/pa", params={"since": listed["cursor"], "limit": "5"})
        api.call("get", "/v1/pa", "/v1/pa", params={"since": "x"})
        api.call("get", "/v1/pa/{pa_id}", f"/v1/pa/{pa['pa_id']}")
        api.call("get", "/v1/pa/{pa_id}", "/v1/pa/NOPE00")
        opened = api.call("get", "/v1/pa/{pa_id}/open", f"/v1/pa/{pa['pa_id']}/open")
        assert opened.status_code == 302 and opened.headers["Location"] == pa["url"]
        api.call("get", "/v1/pa/{pa_id}/open", "/v1/pa/NOPE00/open")
        assert api.call("get", "/v1/dashboard/open", "/v1/dashboard/open").status_code == 302

        work = api.call("get", "/v1/console/worklist", "/v1/console/worklist").json()
        assert work["claims"] and work["pas"]
        assert work["items"] and work["guide"]
        page = "/v1/console/pa/{pa_id}"
        assert api.call("get", page, f"/v1/console/pa/{pa['pa_id']}").json()["claim"]
        api.call("get", page, "/v1/console/pa/NOPE00")
        ack = "/v1/pa/{pa_id}/acknowledge"
        assert api.call("post", ack, f"/v1/pa/{pa['pa_id']}/acknowledge").status_code == 200
        api.call("post", ack, "/v1/pa/NOPE00/acknowledge")
        api.call("get", "/console/pa/{pa_id}", f"/console/pa/{pa['pa_id']}")
        api.call("get", "/healthz", "/healthz")
        api.call("get", "/", "/")
        api.call("get", "/console/static/{filename}", "/console/static/console.js")
        api.call("get", "/console/static/{filename}", "/console/static/nope.js")
        assert api.call("get", "/openapi.json", "/openapi.json").json() == document()

        got = api.call("get", "/v1/claims/{claim_id}", f"/v1/claims/{one['claim_id']}").json()
        assert [p["pa_id"] for p in got["pas"]] == [pa["pa_id"]]
        api.call("get", "/v1/claims/{claim_id}", "/v1/claims/nope")
        api.call("get", "/v1/pa", "/v1/pa", params={"claim_id": one["claim_id"]})
        api.call("get", "/v1/pa", "/v1/pa", params={"claim_id": "nope"})
        api.call("get", "/v1/pa", "/v1/pa", params={"since": str(int(listed["cursor"]) + 9)})
        keyed = {"Idempotency-Key": "openapi-claim-1"}
        body = b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_MR]))
        api.call("post", "/v1/claims", "/v1/claims", json=body, headers=keyed)
        api.call("post", "/v1/claims", "/v1/claims", json=body, headers=keyed)
        other = b.exchange_json(b.request_bytes(), b.response_bytes([b.PAID]))
        assert (
            api.call("post", "/v1/claims", "/v1/claims", json=other, headers=keyed).status_code
            == 422
        )
        cut = b.exchange_json(b.request_bytes()[:70], b.response_bytes([b.REJECT_75]))
        api.call("post", "/v1/claims", "/v1/claims", json=cut)

        rev = api.call(
            "post",
            "/v1/reversals",
            "/v1/reversals",
            json={"request": b.request_bytes(code="B2").decode("latin-1")},
        )
        assert rev.status_code in (200, 202) and rev.json()["pas"][0]["pa_id"] == pa["pa_id"]
        api.call(
            "post",
            "/v1/reversals",
            "/v1/reversals",
            json={"request": b.request_bytes().decode("latin-1")},
        )

    statuses = {s for _, _, s in api.seen}
    assert {200, 201, 302, 400, 404, 409, 413, 422} <= statuses


def test_unauthorized_answers_validate_too(make_daemon: Any) -> None:
    d = make_daemon(intake={"tokens": ["openapi-test-token"]})
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as c:
        api = Checked(c)
        for method, path in sorted(_documented()):
            concrete = path.replace("{claim_id}", "x").replace("{pa_id}", "x")
            concrete = concrete.replace("{filename}", "console.css")
            r = api.call(method, path, concrete)
            public = document()["paths"][path][method].get("security") == []
            assert (r.status_code != 401) == public, (method, path, r.status_code)


# ---- schemathesis against a running daemon ------------------------------------------------


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pa_bridge.config import load_settings
    from pa_bridge.runtime import Daemon

    tmp: Path = tmp_path_factory.mktemp("openapi")
    d = Daemon(
        load_settings(
            storage={"path": str(tmp / "fuzz.sqlite3")},
            intake={"listen": "127.0.0.1:0"},
            callbacks={"listen": "127.0.0.1:0"},
            # a free port: the default 8480 may be taken by another daemon on the machine
            sandbox={"step_seconds": 0.05, "listen": "127.0.0.1:0", "persist": False},
            queue={"poll_seconds": 0.1, "backoff_base_seconds": 0.1, "backoff_max_seconds": 0.5},
        )
    )
    d.start()
    try:
        # something to find: a claim and its PA
        assert d.intake_server is not None
        with httpx.Client(base_url=d.intake_server.url, timeout=10) as c:
            claim = c.post(
                "/v1/claims",
                json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75])),
            ).json()
            c.post(f"/v1/claims/{claim['claim_id']}/pa")
        yield d
    finally:
        d.stop()


@pytest.fixture(scope="module")
def served_schema(running: Any) -> Any:
    """The document as the running daemon serves it, loaded by schemathesis."""
    return schemathesis.openapi.from_url(f"{running.intake_server.url}/openapi.json")


@pytest.mark.parametrize(("method", "path"), sorted(_documented()))
def test_no_server_error_on_generated_input(
    method: str, path: str, running: Any, served_schema: Any
) -> None:
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    operation = served_schema[path][method.upper()]

    @given(case=operation.as_strategy())
    @settings(
        max_examples=15,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        derandomize=True,
    )
    def fuzz(case: Any) -> None:
        case.call_and_validate(
            base_url=running.intake_server.url,
            checks=[
                not_a_server_error,
                status_code_conformance,
                content_type_conformance,
                response_schema_conformance,
            ],
            allow_redirects=False,
            timeout=15,
        )

    fuzz()


def test_answers_carry_no_json_decoding_surprises() -> None:
    # the document itself serialises to JSON as served (no tuples, sets, callables)
    assert json.loads(json.dumps(document())) == document()


# ---- issue 16: what an integrator's generated client needs ----------------------------------


def test_the_document_types_statuses_events_and_declares_401_413() -> None:
    doc = document(max_body_bytes=4096)
    pa = doc["components"]["schemas"]["Pa"]["properties"]
    known = pa["workflow_status"]["anyOf"][0]["enum"]
    assert {"New", "PA Request", "PA Response", "Archived", None} <= set(known)
    assert {"Favorable", "Unfavorable", "Pending", None} <= set(
        pa["plan_outcome"]["anyOf"][0]["enum"]
    )
    assert pa["events"]["items"] == {"$ref": "#/components/schemas/Event"}
    event = doc["components"]["schemas"]["Event"]
    assert event["properties"]["type"]["anyOf"][0]["enum"][0] == "DELETE"
    assert event["required"] == ["type", "time"]
    entry = doc["components"]["schemas"]["HistoryEntry"]["properties"]
    assert entry["source"]["enum"] == ["submit", "callback", "reversal", "reconcile", "expiring"]
    assert entry["workflow_status"] == pa["workflow_status"]
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in _METHODS:
                continue
            if op.get("security") != []:
                assert "401" in op["responses"], (method, path)
            if "requestBody" in op:
                assert "4096 bytes" in op["responses"]["413"]["description"], (method, path)
    assert "paChanged" in doc["webhooks"]


def test_405_says_allow_and_413_says_the_limit(make_daemon: Any) -> None:
    d = make_daemon(intake={"max_body_bytes": 4096})
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as c:
        r = c.delete("/v1/claims")
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
        assert "POST" in r.headers["Allow"]
        r = c.get("/v1/reversals")
        assert r.status_code == 405 and "POST" in r.headers["Allow"]
        r = c.post("/v1/claims", content=b"x" * 5000, headers={"Content-Type": "application/json"})
        assert r.status_code == 413
        assert r.json()["error"]["detail"] == {"max_body_bytes": 4096}
        assert "4096 bytes" in r.json()["error"]["message"]
        served = c.get("/openapi.json").json()
        assert served == document(max_body_bytes=4096)
