"""The requests resource's client (issue 28): ``GET /requests/{id}`` and ``POST
/requests/search`` on the wire as pa-service-interface.md describes them, every shape
the description allows read, every failure a typed error. The service is a
purpose-built fake on loopback that answers what each test needs; the sandbox's own
requests resource is read with the same client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pa_bridge.callbacks.ingest import parse_callback
from pa_bridge.client import (
    BadResponseError,
    CredentialsError,
    HttpStatusError,
    RequestNotFoundError,
    RequestsResource,
    ServiceError,
    ServiceTimeoutError,
    UnreachableError,
)
from pa_bridge.client._requests import read_requests
from pa_bridge.sandbox import SANDBOX_API_ID, SandboxConfig, SandboxServer
from tests.fakes import FakeHttpServer, Reply, json_reply
from tests.real_shapes import request_object
from tests.support import free_port

API_ID = "synthetic-api-id"


@pytest.fixture
def fake() -> Iterator[tuple[FakeHttpServer, list[Reply]]]:
    """A service answering the replies queued in the list, one per request."""
    replies: list[Reply] = []
    server = FakeHttpServer(lambda req: replies.pop(0))
    with server:
        yield server, replies


@pytest.fixture
def api(fake: Any) -> Iterator[RequestsResource]:
    client = RequestsResource(fake[0].url + "/", timeout_s=5)
    try:
        yield client
    finally:
        client.close()


def test_search_sends_the_tokens_as_form_data_and_the_api_id(fake: Any, api: Any) -> None:
    _, replies = fake
    replies.append(json_reply(200, {"requests": []}))
    assert api.search_requests(["tok-a", "tok b&c"], api_id=API_ID) == []
    (req,) = fake[0].requests
    parts = urlsplit(req.path)
    assert (req.method, parts.path, parse_qs(parts.query)) == (
        "POST",
        "/requests/search",
        {"v": ["1"]},
    )
    assert req.headers["content-type"] == "application/x-www-form-urlencoded"
    assert parse_qs(req.body.decode()) == {"token_ids[]": ["tok-a", "tok b&c"]}
    # the api_id alone in the header: the tokens are the call's input
    assert req.headers["authorization"] == f"Bearer {API_ID}+x-no-pass"


def test_get_sends_the_pas_own_token_in_a_bearer_header(fake: Any, api: Any) -> None:
    _, replies = fake
    obj = request_object("AB12CD", "PA Response", "Favorable")
    replies.append(json_reply(200, {"request": obj}))
    assert api.get_request("AB 12/CD", "tok-1", api_id=API_ID) == obj
    (req,) = fake[0].requests
    parts = urlsplit(req.path)
    assert (req.method, parts.path, parse_qs(parts.query)) == (
        "GET",
        "/requests/AB%2012%2FCD",  # the id is one path segment, whatever it holds
        {"v": ["1"]},
    )
    assert req.headers["authorization"] == f"Bearer {API_ID}+tok-1"


def test_search_reads_bare_and_wrapped_elements_and_string_values(fake: Any, api: Any) -> None:
    _, replies = fake
    bare = request_object("AA11AA", "PA Response", "Favorable")
    bare.update(
        is_renewal="true",  # strings where the type is a boolean or a number
        authorization_period={"effective_date": "01/05/2027", "expiration_date": "01/04/2028"},
        associated_requests={"request_being_renewed": {"id": "ZZ99ZZ", "href": "x"}},
    )
    wrapped = {"request": request_object("BB22BB", "New")}
    junk = [None, "text", 7, {"no": "id"}, {"request": {"id": True}}]
    replies.append(json_reply(200, {"requests": [bare, wrapped, *junk], "more": "tolerated"}))
    got = api.search_requests(["t1", "t2"], api_id=API_ID)
    assert [o["id"] for o in got] == ["AA11AA", "BB22BB"]
    cb = parse_callback(json.dumps({"request": got[0]}).encode())  # the callbacks' parser
    assert cb.details["is_renewal"] is True and cb.details["renewal_of"] == "ZZ99ZZ"
    assert cb.details["expiration_date"] == "01/04/2028"


@pytest.mark.parametrize(
    ("status", "error", "retryable"),
    [
        (401, CredentialsError, False),
        (403, CredentialsError, False),
        (404, RequestNotFoundError, False),
        (408, ServiceTimeoutError, True),
        (429, HttpStatusError, True),
        (500, HttpStatusError, True),
        (503, HttpStatusError, True),
        (400, HttpStatusError, False),
    ],
)
def test_errors_are_typed_and_carry_the_services_words_but_never_debug(
    fake: Any, api: Any, status: int, error: type[ServiceError], retryable: bool
) -> None:
    _, replies = fake
    body = {"errors": [{"code": status * 1000 + 1, "message": "said so", "debug": "stack XYZ"}]}
    replies.append(json_reply(status, body))
    with pytest.raises(error) as caught:
        api.search_requests(["t1"], api_id=API_ID)
    assert caught.value.retryable is retryable and caught.value.status_code == status
    assert "said so" in caught.value.detail and "XYZ" not in str(caught.value)
    assert "t1" not in str(caught.value) and API_ID not in str(caught.value)


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=200, body=b"<html>maintenance</html>", content_type="text/html"),
        json_reply(200, {"request": {"id": "AA11AA"}}),  # a GET's shape, not a search's
        json_reply(200, {"requests": {"id": "AA11AA"}}),
        json_reply(200, ["AA11AA"]),
    ],
)
def test_a_2xx_that_is_not_the_described_json_is_a_bad_response(
    fake: Any, api: Any, reply: Reply
) -> None:
    fake[1].append(reply)
    with pytest.raises(BadResponseError):
        api.search_requests(["t1"], api_id=API_ID)


def test_a_get_answer_bare_or_wrapped_but_never_without_an_id(fake: Any, api: Any) -> None:
    _, replies = fake
    bare = request_object("CC33CC", "New")
    replies += [json_reply(200, bare), json_reply(200, {"request": {"workflow_status": "New"}})]
    assert api.get_request("CC33CC", "t", api_id=API_ID)["id"] == "CC33CC"
    with pytest.raises(BadResponseError):
        api.get_request("CC33CC", "t", api_id=API_ID)


def test_nothing_listening_is_unreachable_and_retryable() -> None:
    api = RequestsResource(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    try:
        with pytest.raises(UnreachableError) as caught:
            api.search_requests(["t"], api_id=API_ID)
        assert caught.value.retryable
    finally:
        api.close()


@given(st.lists(st.one_of(st.none(), st.booleans(), st.integers(), st.text(), st.dictionaries(
    st.sampled_from(["id", "request", "workflow_status"]),
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
              st.dictionaries(st.sampled_from(["id"]), st.text(max_size=8))),
)), max_size=6))  # fmt: skip
def test_any_element_list_gives_objects_with_an_id_or_leaves_them_out(items: list[Any]) -> None:
    resp = httpx.Response(200, content=json.dumps({"requests": items}).encode())
    for obj in read_requests(resp):
        assert isinstance(obj, dict)
        assert obj["id"] is not None and not isinstance(obj["id"], bool | dict | list)
        assert str(obj["id"]).strip()


def test_the_sandbox_serves_the_resource_as_described() -> None:
    """The sandbox's requests resource, read with the client: a PA by its token,
    deleted PAs left out, the api_id checked, the version required."""
    with SandboxServer(SandboxConfig(step_seconds=0.01, search_wrapped=True)) as sb:
        state = sb.state
        one = state.create("k1", {"payer": {"bin": "610014"}}, "Favorable", sb.url)
        two = state.create("k2", {"payer": {"bin": "610014"}}, "Favorable", sb.url)
        state.delete(two, "test")
        t1, t2 = one["tokens"][0]["id"], two["tokens"][0]["id"]
        api = RequestsResource(sb.url)
        try:
            found = api.search_requests([t1, t2, "unknown"], api_id=SANDBOX_API_ID)
            assert [o["id"] for o in found] == [one["id"]]  # wrapped elements read
            assert found[0]["api_id"] == SANDBOX_API_ID
            assert api.get_request(one["id"], t1, api_id=SANDBOX_API_ID)["id"] == one["id"]
            with pytest.raises(RequestNotFoundError):
                api.get_request(two["id"], t2, api_id=SANDBOX_API_ID)  # deleted: revoked
            with pytest.raises(RequestNotFoundError):
                api.get_request(one["id"], t2, api_id=SANDBOX_API_ID)  # not its token
            with pytest.raises(CredentialsError):
                api.search_requests([t1], api_id="someone-else")
        finally:
            api.close()
        no_version = httpx.post(
            f"{sb.url}/requests/search",
            data={"token_ids[]": t1},
            headers={"Authorization": f"Bearer {SANDBOX_API_ID}+x-no-pass"},
        )
        assert no_version.status_code == 400 and no_version.json()["errors"][0]["code"]
        by_params = httpx.get(
            f"{sb.url}/requests/{one['id']}",
            params={"v": "1", "api_id": SANDBOX_API_ID, "token_id": t1},
        )
        assert by_params.status_code == 200 and by_params.json()["request"]["id"] == one["id"]
