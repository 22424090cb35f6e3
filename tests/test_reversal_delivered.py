"""A delivered reversal answers 200.

Found in issue 14: ``POST /v1/reversals`` once answered 500 (the log said
``OperationalError``: "database is locked") although the B2 had reached the service, and
the dispensing system's retry answered 200. The cause: after the service took the B2,
the request still wrote the result (the PA's history note, then the queue item's
status), and when something else held the database's write lock longer than
``storage.busy_timeout_ms`` (store IT's ``pa-bridge queue retry``, a backup, a long
maintenance step) those writes failed and the error escaped as a 500; the item also
stayed pending, so the B2 would have been sent again.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import httpx

from tests import builders as b
from tests.fakes import FakeHttpServer, RecordedRequest, Reply, wait_until


def test_a_b2_delivered_while_the_database_is_locked_answers_200_and_is_sent_once(
    make_daemon: Any,
) -> None:
    where: dict[str, str] = {}
    released = threading.Event()
    claims: list[RecordedRequest] = []

    def service(req: RecordedRequest) -> Reply:
        if req.path.startswith("/cmmimport"):
            claims.append(req)
            # Another process takes the database's write lock just as the B2 lands,
            # and keeps it longer than the daemon's busy timeout.
            other = sqlite3.connect(where["db"], isolation_level=None, check_same_thread=False)
            other.execute("BEGIN IMMEDIATE")

            def release() -> None:
                other.execute("ROLLBACK")
                other.close()
                released.set()

            threading.Timer(1.0, release).start()
        return Reply(status=200, body=b"", content_type="text/html")

    with FakeHttpServer(service) as fake:
        d = make_daemon(
            service={
                "claim_url": fake.url + "/cmmimport/",
                "outcomes_url": fake.url + "/outcomes",
                "username": "u",
                "password": "p",
                "api_key": "k",
            },
            storage={"busy_timeout_ms": 200},
        )
        where["db"] = str(d.store.path)
        with httpx.Client(base_url=d.intake_server.url, timeout=20) as api:
            r = api.post(
                "/v1/reversals", json={"request": b.request_bytes(code="B2").decode("latin-1")}
            )
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "delivered"
            assert released.wait(10)
            queue_id = r.json()["queue_id"]
            wait_until(
                lambda: (
                    d.store.query("SELECT status FROM outbox WHERE id = ?", [queue_id])[0]["status"]
                    == "delivered"
                ),
                what="the delivery recorded once the lock is gone",
            )
            # a retry of the drain finds it delivered: the B2 went out once
            d.use_cases.outbox.drain_once()
            assert len(claims) == 1


def test_a_b2_sent_again_never_deletes_a_newer_pa_of_the_same_claim(make_daemon: Any) -> None:
    """Issue 32: a B2 whose first sending the service took, but whose record was lost
    (the daemon killed just after the service answered), is sent again. By then the
    claim may have been billed again and have a new PA, and the service deletes a
    claim's PA by the claim: the second B2 would delete the new PA. Here the state
    after such a crash: the B2 still queued, its PA deleted (the service's DELETE
    callback), the claim billed again and a new PA made. The queue must not send the
    B2 any more: it fails for good, saying why, and the new PA stays."""
    down = threading.Event()
    accepted_b2: list[RecordedRequest] = []
    made: list[str] = []

    def service(req: RecordedRequest) -> Reply:
        if not req.path.startswith("/cmmimport"):
            return Reply(status=200, body=b'{"message": ""}')
        if b"D0B2" in req.body:
            if down.is_set():
                return Reply(status=503, body=b"<p>busy</p>", content_type="text/html")
            accepted_b2.append(req)
            return Reply(status=200, body=b"", content_type="text/html")
        made.append(f"PAR{len(made) + 1:03d}")
        link = f"https://portal.example.test/request/view/{made[-1]}?token_id=t"
        return Reply(status=200, body=link.encode() + b"\r\n", content_type="text/html")

    with FakeHttpServer(service) as fake:
        d = make_daemon(
            service={
                "claim_url": fake.url + "/cmmimport/",
                "outcomes_url": fake.url + "/outcomes",
                "username": "u",
                "password": "p",
                "api_key": "k",
                "probe_seconds": 0,
            },
            sandbox={"enabled": False},
        )
        claim = {
            "request": b.request_bytes().decode("latin-1"),
            "response": b.response_bytes([b.REJECT_MR]).decode("latin-1"),
        }
        hook = f"{d.callback_server.url}/callbacks/pharmacy"
        with httpx.Client(base_url=d.intake_server.url, timeout=20) as api:
            first = api.post("/v1/claims", json=claim).json()["claim_id"]
            assert api.post(f"/v1/claims/{first}/pa").json()["pa_id"] == "PAR001"
            down.set()  # the B2 waits in the queue (its first sending lost in a crash)
            b2 = api.post(
                "/v1/reversals", json={"request": b.request_bytes(code="B2").decode("latin-1")}
            )
            assert b2.status_code == 202
            deleted = {"id": "PAR001", "workflow_status": "PA Request",
                       "events": [{"type": "DELETE", "time": "2026-11-23T10:00:00Z"}]}  # fmt: skip
            assert httpx.post(hook, json={"request": deleted}).status_code == 200
            again = api.post("/v1/claims", json=claim).json()["claim_id"]  # billed again
            assert api.post(f"/v1/claims/{again}/pa").json()["pa_id"] == "PAR002"
            down.clear()  # the service takes B2s again: the queue tries this one

            def item() -> dict[str, Any]:
                d.store.flush()
                return d.store.query(
                    "SELECT status, last_error FROM outbox WHERE id = ?", [b2.json()["queue_id"]]
                )[0]

            wait_until(lambda: item()["status"] == "failed", what="the B2 given up")
            assert accepted_b2 == [], "the B2 was sent again and deleted the newer PA"
            assert "PAR002" in item()["last_error"]
            assert api.get("/v1/pa/PAR002").json()["deleted"] is False
