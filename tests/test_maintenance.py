"""Retention purge and VACUUM on real SQLite; only the clock is moved."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from pa_bridge.config import load_settings
from pa_bridge.maintenance import CHUNK, purge, schedule_maintenance, vacuum
from pa_bridge.outbox import enqueue
from pa_bridge.store import Database, Store, audit, now_iso
from tests import builders as b
from tests.support import wait_until

DAY = 86400.0


def _claim(request: bytes, response: bytes) -> dict[str, Any]:
    return b.exchange_json(request, response, metadata={"patient_note": "synthetic"})


def _row(store: Store, table: str, key: str, value: Any) -> dict[str, Any] | None:
    rows = store.query(f"SELECT * FROM {table} WHERE {key} = ?", [value])  # noqa: S608
    return rows[0] if rows else None


def test_retention_with_a_moved_clock(make_daemon: Any) -> None:
    d = make_daemon()
    store: Store = d.store
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as api:
        # two PAs, each with callbacks and history
        pa_claims = []
        for group in ("SYNGRP01", "SYNGRP02"):
            c = api.post(
                "/v1/claims",
                json=_claim(b.request_bytes(group_id=group), b.response_bytes([b.REJECT_75])),
            ).json()
            pa = api.post(f"/v1/claims/{c['claim_id']}/pa").json()
            pa_claims.append((c["claim_id"], pa["pa_id"]))
        for _, pa_id in pa_claims:
            wait_until(
                lambda pa_id=pa_id: (
                    api.get(f"/v1/pa/{pa_id}").json()["workflow_status"] == "PA Response"
                ),
                what="PA Response",
            )
        # a paid claim whose outcome report is delivered
        paid = api.post(
            "/v1/claims", json=_claim(b.request_bytes(), b.response_bytes([b.PAID]))
        ).json()["claim_id"]
        # a paid claim whose outcome report keeps failing (the sandbox answers 500): it
        # stays queued, so its raw content must stay
        queued = api.post(
            "/v1/claims", json=_claim(b.request_bytes(bin="999997"), b.response_bytes([b.PAID]))
        ).json()["claim_id"]
        wait_until(
            lambda: (_row(store, "outbox", "claim_id", paid) or {}).get("status") == "delivered",
            what="the paid claim's report delivered",
        )
        wait_until(
            lambda: (_row(store, "outbox", "claim_id", queued) or {}).get("attempts", 0) >= 1,
            what="a failed attempt for the queued report",
        )
        # an authenticated-but-unreadable callback: a dead letter
        r = httpx.post(
            f"{d.callback_server.url}/callbacks/pharmacy",
            content=b"not json",
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 200
    assert store.query("SELECT count(*) AS n FROM dead_letters")[0]["n"] == 1
    n_callbacks = store.query("SELECT count(*) AS n FROM callbacks")[0]["n"]
    assert n_callbacks >= 6

    # ---- 31 days later: raw content gone, metadata kept ------------------------------
    later = time.time() + 31 * DAY
    report = purge(store, d.settings, now=later)
    assert report.raw_exchanges == 3  # the two PA claims and the delivered paid claim
    assert report.callback_bodies == n_callbacks
    assert report.dead_letters == 1
    assert report.exchanges == report.pas == report.audit == report.callbacks == 0
    for claim_id in [paid, *(c for c, _ in pa_claims)]:
        ex = _row(store, "exchanges", "id", claim_id)
        assert ex is not None
        assert ex["request_raw"] is None and ex["response_raw"] is None
        assert ex["metadata_json"] is None
        assert ex["raw_purged_at"] == now_iso(later)
        assert ex["bin"] and ex["transaction_status"]  # metadata kept
    kept = _row(store, "exchanges", "id", queued)
    assert kept is not None and kept["request_raw"] and kept["raw_purged_at"] is None
    assert store.query("SELECT count(*) AS n FROM callbacks WHERE body IS NOT NULL")[0]["n"] == 0
    assert store.query("SELECT count(*) AS n FROM dead_letters")[0]["n"] == 0
    with httpx.Client(base_url=d.intake_server.url, timeout=10) as api:
        for _, pa_id in pa_claims:
            got = api.get(f"/v1/pa/{pa_id}").json()
            assert got["workflow_status"] == "PA Response" and got["history"]
    # idempotent
    again = purge(store, d.settings, now=later)
    assert again.total == 0

    # ---- after metadata_retention_days: the rows go, except what the queue needs -------
    newest = store.query("SELECT id FROM pas ORDER BY change_seq DESC LIMIT 1")[0]["id"]
    (older_claim, older_pa), (newer_claim, newer_pa) = sorted(
        pa_claims, key=lambda c: c[1] == newest
    )
    much_later = time.time() + 366 * DAY
    report = purge(store, d.settings, now=much_later)
    assert report.pas == 1 and report.pa_history >= 3
    assert _row(store, "pas", "id", older_pa) is None
    assert _row(store, "exchanges", "id", older_claim) is None
    assert _row(store, "exchanges", "id", paid) is None
    # the newest PA stays as the feed's high-water mark (change_seq never goes back)
    assert _row(store, "pas", "id", newer_pa) is not None
    assert _row(store, "exchanges", "id", newer_claim) is not None
    assert store.query("SELECT count(*) AS n FROM pa_history")[0]["n"] == 0
    # the audit log keeps its own six years, its chain whole (issue 29)
    assert store.query("SELECT count(*) AS n FROM audit")[0]["n"] > 0
    assert audit.verify(store.reader()).problem is None
    assert store.query("SELECT count(*) AS n FROM callbacks")[0]["n"] == 0
    # the queued claim and its queue item are never purged automatically
    kept = _row(store, "exchanges", "id", queued)
    assert kept is not None and kept["request_raw"]
    item = _row(store, "outbox", "claim_id", queued)
    assert item is not None and item["status"] in ("pending", "failed")
    assert store.query("SELECT count(*) AS n FROM outbox WHERE status = 'delivered'")[0]["n"] == 0


def _old_exchanges(store: Store, n: int, at: float) -> list[str]:
    ids = [f"ex{i:05d}" for i in range(n)]

    def job(db: Database) -> None:
        db.conn.executemany(
            "INSERT INTO exchanges (id, received_at, kind, request_raw, response_raw, metadata_json)"
            " VALUES (?, ?, 'claim', ?, ?, '{}')",
            [(i, now_iso(at), b"\x02raw", b"\x02resp") for i in ids],
        )
        db.conn.executemany(
            "INSERT INTO audit (at, action, object_id) VALUES (?, 'test', ?)",
            [(now_iso(at), i) for i in ids],
        )

    store.write(job)
    return ids


def test_purge_runs_in_chunks_and_spares_queued_items(store: Store, tmp_path: Path) -> None:
    settings = load_settings(storage={"path": str(store.path)})
    t0 = time.time()
    n = CHUNK * 2 + 137
    ids = _old_exchanges(store, n, t0)
    pending, failed, delivered = ids[10], ids[CHUNK + 5], ids[20]

    def queue(db: Database) -> None:
        enqueue(db, "outcome_report", {"claim_id": pending}, claim_id=pending, now=t0)
        fid = enqueue(db, "outcome_report", {"claim_id": failed}, claim_id=failed, now=t0)
        did = enqueue(db, "outcome_report", {"claim_id": delivered}, claim_id=delivered, now=t0)
        db.execute("UPDATE outbox SET status = 'failed' WHERE id = ?", [fid])
        db.execute(
            "UPDATE outbox SET status = 'delivered', delivered_at = ? WHERE id = ?",
            [now_iso(t0), did],
        )

    store.write(queue)
    commits = store.commits
    report = purge(store, settings, now=t0 + 31 * DAY)
    assert report.raw_exchanges == n - 2
    assert report.chunks == 3  # ceil(n / CHUNK) for the one table with work
    assert store.commits - commits >= 3  # one short transaction per chunk
    raw_left = {
        r["id"] for r in store.query("SELECT id FROM exchanges WHERE request_raw IS NOT NULL")
    }
    assert raw_left == {pending, failed}

    report = purge(store, settings, now=t0 + 366 * DAY)
    assert report.exchanges == n - 2 and report.audit == 0  # the audit log keeps six years
    assert report.outbox == 1  # the delivered item; pending and failed stay
    left = {r["id"] for r in store.query("SELECT id FROM exchanges")}
    assert left == {pending, failed}
    assert {r["status"] for r in store.query("SELECT status FROM outbox")} == {"pending", "failed"}
    assert purge(store, settings, now=t0 + 2193 * DAY).audit == n  # [audit] retention_days


def test_purge_with_a_small_chunk_size(store: Store) -> None:
    settings = load_settings(storage={"path": str(store.path)})
    t0 = time.time()
    _old_exchanges(store, 25, t0)
    report = purge(store, settings, now=t0 + 31 * DAY, chunk=10)
    assert report.raw_exchanges == 25 and report.chunks == 3


def test_vacuum_returns_space_while_writes_go_on(sqlite_store: Store) -> None:
    store = sqlite_store
    settings = load_settings(storage={"path": str(store.path)})
    t0 = time.time()

    def big(db: Database) -> None:
        db.conn.executemany(
            "INSERT INTO dead_letters (received_at, reason, body) VALUES (?, 'x', ?)",
            [(now_iso(t0), b"\0" * 8000) for _ in range(300)],
        )

    store.write(big)
    skipped = vacuum(store)
    assert not skipped.ran  # nothing free yet
    assert purge(store, settings, now=t0 + 31 * DAY).dead_letters == 300

    stop = threading.Event()
    written: list[int] = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            store.write(
                lambda db, i=i: db.execute(
                    "INSERT INTO audit (at, action, object_id) VALUES (?, 'w', ?)",
                    [now_iso(), str(i)],
                )
            )
            written.append(i)
            i += 1

    th = threading.Thread(target=writer)
    th.start()
    try:
        wait_until(lambda: len(written) >= 5, what="writes before the VACUUM")
        report = vacuum(store)
        seen = len(written)
        wait_until(lambda: len(written) >= seen + 5, what="writes after the VACUUM")
    finally:
        stop.set()
        th.join(10)
    assert report.ran and report.pages_after < report.pages_before / 2
    assert store.query("SELECT count(*) AS n FROM audit")[0]["n"] == len(written)
    assert store.query("PRAGMA integrity_check")[0]["integrity_check"] == "ok"


def test_scheduled_jobs_log_and_never_raise(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = Store(tmp_path / "db.sqlite3")
    settings = load_settings(storage={"path": str(s.path)})
    scheduler = BackgroundScheduler(timezone="UTC")
    schedule_maintenance(scheduler, s, settings, clock=lambda: time.time() + 31 * DAY)
    jobs = {j.id: j for j in scheduler.get_jobs()}
    assert set(jobs) == {"maintenance-purge", "maintenance-vacuum"}
    assert "interval[1:00:00]" in str(jobs["maintenance-purge"].trigger)
    assert "day_of_week='sun'" in str(jobs["maintenance-vacuum"].trigger)
    caplog.set_level(logging.INFO, logger="pa_bridge")
    jobs["maintenance-purge"].func()
    jobs["maintenance-vacuum"].func()
    s.close()  # now every job fails: they must log, not raise
    jobs["maintenance-purge"].func()
    jobs["maintenance-vacuum"].func()
    events = [getattr(r, "event", "") for r in caplog.records]
    assert "maintenance.purge_nothing" in events
    assert "maintenance.vacuum_skipped" in events
    assert "maintenance.purge_failed" in events
    assert "maintenance.vacuum_failed" in events
