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
            d.bridge.outbox.drain_once()
            assert len(claims) == 1
