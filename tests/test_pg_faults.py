"""Faults on PostgreSQL (issue 32): the connections killed, the server restarted, the
database made read-only, a standby promoted. After each the store heals by itself, and
nothing a caller was told is stored is lost. All against a real server."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import psycopg
import pytest

from pa_bridge.store import PgStore, StoreUnavailable, meta
from tests import builders as b
from tests.support import wait_until


def _kill_connections(pg_url: str) -> int:
    """pg_terminate_backend on every pa-bridge connection, waiting until each is gone
    (so the store's next statement meets a closed socket, as after a server restart)."""
    with psycopg.connect(pg_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
            " WHERE application_name = 'pa-bridge' AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def _put(key: str, value: str) -> Any:
    return lambda db: meta.put(db, key, value)


def test_a_write_waited_on_after_the_connections_were_killed_fails_once_and_the_writer_lives(
    pg_url: str,
) -> None:
    """The issue's reproduction: one write, pg_terminate_backend on the store's
    connections, one more ``submit`` (a write whose result a caller waits on, as a
    claim's answer record is). It is told "not stored" once, the writer thread goes on,
    and the next write reconnects and commits."""
    store = PgStore(pg_url)
    try:
        store.write(_put("k", "1"))
        assert _kill_connections(pg_url) >= 1
        future = store.submit(_put("k", "2"))
        with pytest.raises(StoreUnavailable):
            future.result(timeout=10)
        assert store.writer_alive, "the writer thread died"
        wait_until(lambda: store.problem() is None, what="the store to heal")
        store.submit(_put("k", "3")).result(timeout=10)
        assert meta.get(store.reader(), "k") == "3"
    finally:
        store.close()


def test_claims_in_flight_while_the_connections_are_killed_never_get_a_500(
    make_daemon: Any, pg_url: str
) -> None:
    """The drill: keyed 75-rejects and paid claims from 8 threads while every
    connection of the daemon is killed three times. Each claim is answered 200 (stored)
    or 503 (not stored: send it again), never 500; /healthz is back to 200 by itself;
    and every claim answered 200 is stored."""
    d = make_daemon(storage={"url": pg_url})
    statuses: list[int] = []
    stored_ids: list[str] = []
    stop = threading.Event()
    lock = threading.Lock()

    def sender(k: int) -> None:
        with httpx.Client(base_url=d.intake_server.url, timeout=20) as api:
            n = 0
            while not stop.is_set():
                n += 1
                outcome = b.REJECT_75 if n % 2 else b.PAID
                rx = f"{k:02d}{n:010d}"
                r = api.post(
                    "/v1/claims",
                    json={
                        "request": b.request_bytes(rxs=(b.Rx(rx_number=rx),)).decode("latin-1"),
                        "response": b.response_bytes([outcome]).decode("latin-1"),
                    },
                    headers={"Idempotency-Key": f"kill-{k}-{n}"},
                )
                with lock:
                    statuses.append(r.status_code)
                    if r.status_code == 200:
                        stored_ids.append(r.json()["claim_id"])

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            count = len(statuses)
            wait_until(lambda c=count: len(statuses) > c + 20, what="claims answered")
            assert _kill_connections(pg_url) >= 1
        count = len(statuses)
        wait_until(lambda c=count: len(statuses) > c + 20, what="claims after the kills")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    with httpx.Client(base_url=d.intake_server.url, timeout=20) as api:
        wait_until(lambda: api.get("/healthz").status_code == 200, what="/healthz to heal")
    assert set(statuses) <= {200, 503}, sorted(set(statuses))
    assert d.bridge.store.writer_alive
    kept = {r["claim_id"] for r in d.bridge.store.query("SELECT id AS claim_id FROM exchanges")}
    assert set(stored_ids) <= kept
