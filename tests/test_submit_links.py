"""Submit PA against a claim interface that answers several links, or none, in the
real shapes (a fake on 127.0.0.1, the daemon in-process with a real SQLite file)."""

from __future__ import annotations

from typing import Any

import httpx

from tests import builders as b
from tests.fakes import FakeHttpServer, Reply

PORTAL = "https://portal.example.test"


def _daemon(make_daemon: Any, fake: FakeHttpServer) -> Any:
    return make_daemon(
        service={
            "claim_url": fake.url + "/cmmimport/",
            "outcomes_url": fake.url + "/outcomes",
            "username": "u",
            "password": "p",
            "api_key": "k",
        }
    )


def _claim(api: httpx.Client) -> str:
    body = {
        "request": b.request_bytes().decode("latin-1"),
        "response": b.response_bytes([b.REJECT_MR]).decode("latin-1"),
    }
    return str(api.post("/v1/claims", json=body).json()["claim_id"])


def test_several_links_are_all_kept_and_the_history_says_so(make_daemon: Any) -> None:
    links = [
        f"{PORTAL}/request/view/AAA111?token_id=t1",
        f"{PORTAL}/request/view/BBB222?token_id=t2",
    ]
    reply = Reply(status=200, body="\r\n".join(links).encode() + b"\r\n", content_type="text/html")
    with FakeHttpServer(reply) as fake:
        d = _daemon(make_daemon, fake)
        with httpx.Client(base_url=d.intake_server.url) as api:
            r = api.post(f"/v1/claims/{_claim(api)}/pa")
            assert r.status_code == 201
            pa = r.json()
            assert pa["pa_id"] == "AAA111" and pa["urls"] == links and pa["url"] == links[0]
            history = api.get(f"/v1/pa/{pa['pa_id']}").json()["history"]
            assert "2 PA links (PAs AAA111, BBB222)" in history[0]["note"]


def test_a_2xx_without_a_link_is_a_pa_whose_link_is_on_its_way(make_daemon: Any) -> None:
    reply = Reply(
        status=200, body=b"<html><body><p>Thank you</p></body></html>", content_type="text/html"
    )
    with FakeHttpServer(reply) as fake:
        d = _daemon(make_daemon, fake)
        with httpx.Client(base_url=d.intake_server.url) as api:
            claim_id = _claim(api)
            r = api.post(f"/v1/claims/{claim_id}/pa")
            assert r.status_code == 201
            pa = r.json()
            assert pa["pa_id"].startswith("pending-") and pa["link_pending"] is True
            assert pa["url"] is None and pa["workflow_status"] == "New"
            # the second click finds it in our records and sends nothing more
            again = api.post(f"/v1/claims/{claim_id}/pa")
            assert again.status_code == 200 and again.json()["pa_id"] == pa["pa_id"]
            assert len([q for q in fake.requests if q.path.startswith("/cmmimport")]) == 1
