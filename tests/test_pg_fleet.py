"""Several daemons on one PostgreSQL database (issue 18): what must hold across them is
held by the database. Each "daemon" here is a store (its own connections and writer)
on the same database; the last tests start whole daemons."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from pa_bridge.config import QueueSettings
from pa_bridge.outbox import Outbox
from pa_bridge.store import (
    Database,
    PgStore,
    StoreError,
    StoreUnavailable,
    callbacks,
    meta,
    now_iso,
    pas,
)
from pa_bridge.store import outbox as queue_items
from tests import builders as b
from tests import pg_server
from tests.support import wait_until


@pytest.fixture
def fleet(pg_url: str) -> Iterator[list[PgStore]]:
    """Three stores on one database, as three daemons have."""
    stores = [PgStore(pg_url) for _ in range(3)]
    try:
        yield stores
    finally:
        for s in stores:
            s.close()


_NEW_STATE: pas.CallbackState = {
    "workflow_status": "New", "plan_outcome": None, "status_time": None,
    "events_json": "[]", "deleted": 0, "fax_failed": 0, "links_json": "{}",
    "urls_json": "[]", "details_json": None, "fax_failed_latest": 0, "news_seq": 0,
}  # fmt: skip


def _pa_change(store: PgStore, pa_id: str, hold: threading.Event | None = None) -> int:
    """Insert a PA (a feed change) in a write job; ``hold`` keeps the transaction open
    after the position is taken, as a slow batch on a busy daemon does."""

    def job(db: Database) -> int:
        seq = store.next_seq(db)
        pas.insert_from_callback(db, pa_id, _NEW_STATE, now=now_iso(), seq=seq)
        if hold is not None:
            assert hold.wait(10)
        return seq

    return store.write(job, timeout=20)


def test_a_plain_sequence_skips_a_change_that_commits_late(pg_url: str) -> None:
    """Why the feed does not use one (decision 0021): position 1 commits after
    position 2, and a reader that saw 2 has moved its cursor past 1 for good."""
    with psycopg.connect(pg_url, autocommit=True) as setup:
        setup.execute("CREATE SEQUENCE s; CREATE TABLE feed (pos BIGINT)")
    a, b_, reader = (psycopg.connect(pg_url) for _ in range(3))
    try:
        pos_a = a.execute("INSERT INTO feed VALUES (nextval('s')) RETURNING pos").fetchone()
        b_.execute("INSERT INTO feed VALUES (nextval('s'))")
        b_.commit()
        seen = [r[0] for r in reader.execute("SELECT pos FROM feed WHERE pos > 0 ORDER BY pos")]
        reader.commit()
        a.commit()
        cursor = max(seen)
        later = [r[0] for r in reader.execute("SELECT pos FROM feed WHERE pos > %s", [cursor])]
        assert pos_a is not None and pos_a[0] < cursor and later == []  # skipped
    finally:
        for c in (a, b_, reader):
            c.close()


def test_feed_positions_follow_commit_order_across_daemons(fleet: list[PgStore]) -> None:
    one, two, reader = fleet
    hold = threading.Event()
    got: dict[str, int] = {}
    first = threading.Thread(target=lambda: got.update(a=_pa_change(one, "pa-a", hold)))
    first.start()
    wait_until(
        lambda: reader.query(
            "SELECT 1 AS x FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " WHERE c.relname = 'feed_clock' AND l.mode = 'RowExclusiveLock'"
        ),
        what="the first daemon holds the feed position",
    )
    second = threading.Thread(target=lambda: got.update(b=_pa_change(two, "pa-b")))
    second.start()
    # the second daemon's change waits for the first: nothing is visible yet, and a
    # reader's cursor cannot move past the first change before it commits
    wait_until(lambda: _someone_waits_for_a_lock(reader), what="the second daemon to wait")
    assert "b" not in got
    assert pas.since(reader.reader(), 0, 100) == []
    hold.set()
    first.join(10)
    second.join(10)
    assert got["a"] < got["b"]
    cursor, seen = 0, []
    for _ in range(3):
        rows = pas.since(reader.reader(), cursor, 100)
        seen += [r["id"] for r in rows]
        cursor = rows[-1]["change_seq"] if rows else cursor
    assert seen == ["pa-a", "pa-b"]


def test_positions_counted_within_a_batch_are_written_back_for_the_next_daemon(
    fleet: list[PgStore],
) -> None:
    """A batch takes the counter row once and counts its further positions itself; the
    row must end at the batch's last one. With the floor far ahead of the clock (as
    after a restore) the clock cannot hide a row left at the batch's first position."""
    one, two, _ = fleet
    floor = int(time.time() * 1_000_000) + 3_600_000_000
    one.write(lambda db: meta.put(db, "feed.seq_floor", str(floor)))

    def change(pa_id: str) -> Any:
        def job(db: Database) -> int:
            seq = one.next_seq(db)
            pas.insert_from_callback(db, pa_id, _NEW_STATE, now=now_iso(), seq=seq)
            return seq

        return job

    results = one.write_all([change(f"pa-{i}") for i in range(5)])
    seqs = [value for ok, value in results if ok]
    assert len(seqs) == 5 and seqs == sorted(set(seqs)) and seqs[0] >= floor
    later = _pa_change(two, "pa-later")
    assert later > seqs[-1]
    rows = pas.since(two.reader(), 0, 100)
    assert [r["id"] for r in rows] == [*(f"pa-{i}" for i in range(5)), "pa-later"]


def test_feed_read_in_a_loop_while_three_daemons_write_sees_every_change_once(
    fleet: list[PgStore],
) -> None:
    per_daemon = 60
    stop = threading.Event()

    def writer(k: int, store: PgStore) -> None:
        for i in range(per_daemon):
            _pa_change(store, f"pa-{k}-{i:03d}")

    threads = [threading.Thread(target=writer, args=(k, s)) for k, s in enumerate(fleet)]
    seen: list[str] = []
    cursor = 0
    reader = fleet[0].reader()
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(seen) < per_daemon * 3 and time.monotonic() < deadline:
        rows = pas.since(reader, cursor, 25)
        seen += [r["id"] for r in rows]
        if rows:
            cursor = rows[-1]["change_seq"]
    stop.set()
    for t in threads:
        t.join(30)
    assert len(seen) == per_daemon * 3 and len(set(seen)) == len(seen)


def test_a_callback_delivered_to_two_daemons_at_once_is_stored_once(
    fleet: list[PgStore],
) -> None:
    one, two, _ = fleet
    hold = threading.Event()
    kept: dict[str, bool] = {}

    def first(db: Database) -> bool:
        ok = callbacks.insert_once(db, "delivery-1", now_iso(), "pa-1", b"{}")
        assert hold.wait(10)
        return ok

    t = threading.Thread(target=lambda: kept.update(one=one.write(first, timeout=20)))
    t.start()
    # the first insert holds its row: a lock on this schema's callbacks table (the
    # server's other sessions, other tests', do not count)
    wait_until(
        lambda: one.query(
            "SELECT 1 AS x FROM pg_locks l JOIN pg_class c ON c.oid = l.relation"
            " WHERE c.relname = 'callbacks' AND c.relnamespace = current_schema()::regnamespace"
            " AND l.mode = 'RowExclusiveLock' AND l.granted"
        ),
        what="the first insert to hold its row",
    )
    t2 = threading.Thread(
        target=lambda: kept.update(
            two=two.write(
                lambda db: callbacks.insert_once(db, "delivery-1", now_iso(), "pa-1", b"{}"),
                timeout=20,
            )
        )
    )
    t2.start()
    wait_until(lambda: _someone_waits_for_a_lock(one), what="the second insert to wait")
    hold.set()
    t.join(10)
    t2.join(10)
    assert kept == {"one": True, "two": False}
    assert one.query("SELECT count(*) AS n FROM callbacks")[0]["n"] == 1


def _someone_waits_for_a_lock(store: Any) -> bool:
    """Whether a session is waiting for a lock another holds (a request not granted)."""
    return bool(store.query("SELECT 1 AS x FROM pg_locks WHERE NOT granted LIMIT 1"))


def test_the_claim_lock_is_held_in_the_database(fleet: list[PgStore]) -> None:
    one, two, _ = fleet
    order: list[str] = []
    with one.claim_lock("bin|pcn|grp|rx|1|prov"):
        t = threading.Thread(
            target=lambda: (
                two.claim_lock("bin|pcn|grp|rx|1|prov").__enter__(),
                order.append("two"),
            )
        )
        t.start()
        with two.claim_lock("another claim"):  # other claims are not held up
            order.append("other")
        wait_until(lambda: _someone_waits_for_a_lock(one), what="the second click to wait")
        order.append("one done")
    t.join(10)
    assert order == ["other", "one done", "two"]


def test_each_queue_item_is_delivered_by_one_daemon(fleet: list[PgStore]) -> None:
    n = 60
    fleet[0].write(lambda db: [queue_items.enqueue(db, "webhook", {"i": i}) for i in range(n)])
    delivered: list[int] = []
    lock = threading.Lock()
    started = threading.Condition(lock)
    drainers: set[int] = set()

    def deliver(payload: dict[str, Any]) -> None:
        with started:
            # every daemon's first delivery waits until all are delivering (or a second
            # has passed): the daemons reach for the same items at the same time
            drainers.add(threading.get_ident())
            started.notify_all()
            started.wait_for(lambda: len(drainers) >= len(fleet), timeout=1.0)
            delivered.append(payload["i"])

    boxes = [Outbox(s, {"webhook": deliver}, QueueSettings(batch_size=n)) for s in fleet]
    threads = [threading.Thread(target=box.drain_once) for box in boxes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for box in boxes:  # what a daemon skipped because another held it is done by now
        box.drain_once()
    assert sorted(delivered) == list(range(n))
    counts = queue_items.summary(fleet[0].reader())[0]
    assert counts == {}
    spread = [fleet[0].query("SELECT count(*) AS n FROM outbox WHERE status = 'delivered'")[0]["n"]]
    assert spread == [n]


def test_an_item_a_daemon_holds_is_left_to_it(fleet: list[PgStore]) -> None:
    one, two, _ = fleet
    item = one.write(lambda db: queue_items.enqueue(db, "webhook", {"x": 1}))
    calls: list[str] = []
    box = Outbox(two, {"webhook": lambda p: calls.append("two")}, QueueSettings())
    with one.item_lock(item) as mine:
        assert mine
        assert box.deliver(item) is False and calls == []
    assert box.deliver(item) is True and calls == ["two"]


def test_maintenance_runs_once_across_the_fleet(fleet: list[PgStore]) -> None:
    one, two, _ = fleet
    with one.fleet_once("maintenance.purge", 3600) as mine:
        assert mine
        with two.fleet_once("maintenance.purge", 3600) as theirs:
            assert not theirs  # running on the first daemon
    with two.fleet_once("maintenance.purge", 3600) as theirs:
        assert not theirs  # ran a moment ago
    two.write(lambda db: meta.put(db, "fleet.maintenance.purge", repr(time.time() - 3600)))
    with two.fleet_once("maintenance.purge", 3600) as theirs:
        assert theirs  # due again: whichever daemon comes first


# ---- whole daemons ---------------------------------------------------------------------


def test_two_clicks_on_two_daemons_give_one_pa(make_daemon: Any, pg_url: str) -> None:
    from pa_bridge.sandbox import (
        SANDBOX_API_KEY,
        SANDBOX_PASSWORD,
        SANDBOX_USERNAME,
        SandboxConfig,
        SandboxServer,
    )

    sandbox = SandboxServer(SandboxConfig(step_seconds=60), host="127.0.0.1", port=0).start()
    try:
        service = {
            "claim_url": f"{sandbox.url}/cmmimport/",
            "outcomes_url": f"{sandbox.url}/outcomes.json",
            "dashboard_url": f"{sandbox.url}/dashboard",
            "username": SANDBOX_USERNAME,
            "password": SANDBOX_PASSWORD,
            "api_key": SANDBOX_API_KEY,
        }
        daemons = [
            make_daemon(storage={"url": pg_url}, service=service, sandbox={"enabled": False})
            for _ in range(2)
        ]
        urls = [d.intake_server.url for d in daemons]
        with httpx.Client(timeout=20) as c:
            claim = c.post(
                f"{urls[0]}/v1/claims",
                json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75])),
            ).json()
        go = threading.Barrier(8)
        answers: list[httpx.Response] = []

        def click(k: int) -> None:
            with httpx.Client(timeout=30) as c:
                go.wait()
                answers.append(c.post(f"{urls[k % 2]}/v1/claims/{claim['claim_id']}/pa"))

        threads = [threading.Thread(target=click, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(r.status_code for r in answers) == [200] * 7 + [201]
        assert len({r.json()["pa_id"] for r in answers}) == 1
        assert len(sandbox.state.claims()) == 1  # sent to the service once
    finally:
        sandbox.stop()


def test_an_item_another_daemon_just_tried_waits_for_its_backoff(fleet: list[PgStore]) -> None:
    """Daemon two read the item as due; daemon one tried it meanwhile and the service
    failed: two leaves it to the backoff instead of trying again at once."""
    from pa_bridge.outbox import DeliveryFailed

    one, two, _ = fleet
    item = one.write(lambda db: queue_items.enqueue(db, "webhook", {"x": 1}))
    seen_due_at = time.time()
    calls: list[str] = []

    def failing(payload: dict[str, Any]) -> None:
        calls.append("one")
        raise DeliveryFailed("503 from the service")

    settings = QueueSettings(backoff_base_seconds=30)
    assert Outbox(one, {"webhook": failing}, settings).deliver(item) is False
    box_two = Outbox(two, {"webhook": lambda p: calls.append("two")}, settings)
    horizon = seen_due_at + settings.backoff_max_seconds + 60
    assert box_two.deliver(item, wait_s=0.0, due=(seen_due_at, horizon)) is False
    assert calls == ["one"]


def test_queue_commands_on_postgresql(pg_url: str, tmp_path: Any) -> None:
    """`queue list|retry|drop` with storage.url (its password from a file): the same
    items, the same answers, as on the SQLite file."""
    from urllib.parse import urlsplit, urlunsplit

    from click.testing import CliRunner

    from pa_bridge.cli import main
    from tests import pg_server

    with PgStore(pg_url) as store:
        item = store.write(lambda db: queue_items.enqueue(db, "reversal", {"exchange_id": "x"}))
    parts = urlsplit(pg_url)
    bare = urlunsplit(
        (parts.scheme, f"{parts.username}@{parts.hostname}:{parts.port}", parts.path,
         parts.query, "")
    )  # fmt: skip
    pw = tmp_path / "db-password"
    pw.write_text(pg_server.PASSWORD + "\n")
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(f'[storage]\nurl = "{bare}"\npassword_file = "{pw}"\n')
    runner = CliRunner()
    r = runner.invoke(main, ["queue", "list", "--json", "--config", str(cfg)])
    assert r.exit_code == 0, r.output
    import json

    (shown,) = json.loads(r.output)
    assert shown["id"] == item and shown["kind"] == "reversal" and shown["retrying"]
    r = runner.invoke(main, ["queue", "drop", str(item), "--config", str(cfg)])
    assert r.exit_code == 0 and "dropped" in r.output, r.output
    r = runner.invoke(main, ["queue", "retry", str(item), "--config", str(cfg)])
    assert r.exit_code == 0 and "due now" in r.output, r.output
    r = runner.invoke(main, ["queue", "retry", "999", "--config", str(cfg)])
    assert r.exit_code == 1 and "no undelivered queue item 999" in r.output
    pw.write_text("wrong-password\n")
    r = runner.invoke(main, ["queue", "list", "--config", str(cfg)])
    assert r.exit_code == 1 and "cannot connect" in r.output
    assert "wrong-password" not in r.output and pg_server.PASSWORD not in r.output


def test_doctor_checks_the_connection_schema_and_privileges(pg_url: str) -> None:
    from urllib.parse import urlsplit

    from pa_bridge.doctor import check_postgres

    before = {c.name: c for c in check_postgres(pg_url)}
    assert before["database schema"].status == "ok" and "applied at start" in (
        before["database schema"].message
    )
    PgStore(pg_url).close()  # migrates
    after = check_postgres(pg_url)
    assert [c.status for c in after] == ["ok", "ok", "ok", "ok"], after
    assert after[-1].name == "backup tools" and "pg_dump 1" in after[-1].message
    assert "PostgreSQL 1" in after[0].message and "synthetic" not in after[0].message

    schema = pg_url.rsplit("%3D", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS doctor_reader")
        admin.execute("CREATE ROLE doctor_reader LOGIN PASSWORD 'reader-password-123'")
        admin.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO doctor_reader')
        admin.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO doctor_reader')
    try:
        parts = urlsplit(pg_url)
        reader_url = pg_url.replace(
            f"{parts.username}:{parts.password}@", "doctor_reader:reader-password-123@"
        )
        checks = {c.name: c for c in check_postgres(reader_url)}
        assert checks["database privileges"].status == "FAIL"
        assert "outbox: INSERT" in checks["database privileges"].message
        wrong = check_postgres(reader_url.replace("reader-password-123", "nope"))
        assert wrong[0].status == "FAIL" and "cannot connect" in wrong[0].message
        assert "nope" not in wrong[0].message
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f'REVOKE ALL ON ALL TABLES IN SCHEMA "{schema}" FROM doctor_reader')
            admin.execute(f'REVOKE ALL ON SCHEMA "{schema}" FROM doctor_reader')
            admin.execute("DROP ROLE doctor_reader")


def test_doctor_names_a_role_without_any_table_privilege(pg_url: str) -> None:
    """A role that may log in and see the schema but read no table (the DBA forgot the
    GRANT): doctor reports it as failed checks, it does not crash on the first read."""
    from urllib.parse import urlsplit

    from pa_bridge.doctor import check_postgres

    PgStore(pg_url).close()  # migrates
    schema = pg_url.rsplit("%3D", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS doctor_nobody")
        admin.execute("CREATE ROLE doctor_nobody LOGIN PASSWORD 'nobody-password-123'")
        admin.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO doctor_nobody')
    try:
        parts = urlsplit(pg_url)
        url = pg_url.replace(
            f"{parts.username}:{parts.password}@", "doctor_nobody:nobody-password-123@"
        )
        checks = {c.name: c for c in check_postgres(url)}
        assert checks["database"].status == "ok"
        assert checks["database schema"].status == "FAIL"
        assert "pa_bridge_migrations" in checks["database schema"].message
        assert checks["database privileges"].status == "FAIL"
        assert "outbox: SELECT" in checks["database privileges"].message
        assert all("nobody-password-123" not in c.message for c in checks.values())
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f'REVOKE ALL ON SCHEMA "{schema}" FROM doctor_nobody')
            admin.execute("DROP ROLE doctor_nobody")


def test_doctor_names_a_schema_the_role_may_not_use(pg_url: str) -> None:
    """A role without USAGE on the schema (what a PostgreSQL restore leaves, as it
    re-creates the schema) sees no table at all: doctor says so, instead of "6
    migrations to apply" on a database that has them all."""
    from urllib.parse import urlsplit

    from pa_bridge.doctor import check_postgres

    PgStore(pg_url).close()  # migrates
    schema = pg_url.rsplit("%3D", 1)[1]
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS doctor_outside")
        admin.execute("CREATE ROLE doctor_outside LOGIN PASSWORD 'outside-password-123'")
    try:
        parts = urlsplit(pg_url)
        url = pg_url.replace(
            f"{parts.username}:{parts.password}@", "doctor_outside:outside-password-123@"
        )
        checks = {c.name: c for c in check_postgres(url)}
        assert checks["database"].status == "ok"
        assert checks["database schema"].status == "FAIL"
        assert f"schema {schema}" in checks["database schema"].message
        assert "USAGE" in checks["database schema"].message
        assert "migrations" not in checks["database schema"].message
        assert all("outside-password-123" not in c.message for c in checks.values())
        with pytest.raises(StoreError) as ei:  # and serve says what to grant
            PgStore(url)
        assert "GRANT USAGE" in str(ei.value) and "outside-password-123" not in str(ei.value)
        # queue list names the schema too, not "is not a pa-bridge database"
        from click.testing import CliRunner

        from pa_bridge.cli import main

        r = CliRunner().invoke(main, ["queue", "list"], env={"PA_BRIDGE_STORAGE__URL": url})
        assert r.exit_code == 1 and f"schema {schema}" in r.output, r.output
        assert "not a pa-bridge database" not in r.output
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("DROP ROLE doctor_outside")


def test_a_wrong_password_is_named_without_it(pg_url: str) -> None:
    from pa_bridge.store import StoreError
    from tests import pg_server

    wrong = pg_url.replace(pg_server.PASSWORD, "not-the-password")
    with pytest.raises(StoreError) as ei:
        PgStore(wrong)
    msg = str(ei.value)
    assert msg.startswith("cannot open the database at postgresql://pa_bridge_test:***@127.0.0.1")
    assert "not-the-password" not in msg and "password authentication failed" in msg


def test_a_daemons_connections_stay_within_its_cap_under_many_readers(pg: Any, pg_url: str) -> None:
    """40 threads reading, taking claim and queue-item locks and snapshots at once on a
    store capped at 4 connections: never more than 4 open (the writer and 3 pooled),
    the readers wait for one instead, and every one of them gets its answer."""
    name = f"cap-{time.monotonic_ns()}"
    store = PgStore(f"{pg_url}&application_name={name}", max_connections=4)
    seen: list[int] = []
    waited: list[int] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def sample() -> None:
        with psycopg.connect(pg.url(), autocommit=True) as admin:
            while not done.is_set():
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [name]
                ).fetchone()
                seen.append(int(row[0]) if row else 0)
                waited.append(store.connections["requests_waiting"])

    def work(k: int) -> None:
        try:
            for i in range(6):
                slow = "SELECT pg_sleep(0.01) AS s"
                if k % 4 == 0:
                    with store.claim_lock(f"claim-{k % 3}"):
                        store.query(slow)  # on the connection holding the lock
                elif k % 4 == 1:
                    with store.item_lock(k * 100 + i) as got:
                        assert got
                        store.query(slow)
                elif k % 4 == 2:
                    with store.snapshot() as db:
                        assert db.execute("SELECT 1").fetchone()[0] == 1
                        store.query(slow)
                else:
                    store.query(slow)
                    store.write(lambda db, v=str(i): meta.put(db, f"cap.{k}", v))
        except BaseException as e:  # reported below
            errors.append(e)

    sampler = threading.Thread(target=sample)
    sampler.start()
    threads = [threading.Thread(target=work, args=(k,)) for k in range(40)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        done.set()
        sampler.join(10)
        store.close()
    assert errors == []
    assert max(seen) <= 4
    assert max(seen) >= 3 and max(waited) > 0  # the cap was reached and readers queued
    assert store.connections["pool_max"] == 3


def test_a_lock_held_past_the_timeout_fails_the_batch_as_unavailable(pg_url: str) -> None:
    """Another session holds a table the batch writes (an admin's LOCK, a stuck
    migration): each job is told "not stored" (a 503 to its caller), nothing of the
    batch is kept, and the next batch commits once the lock is gone."""
    store = PgStore(pg_url, lock_timeout_ms=200)
    other = psycopg.connect(pg_url, autocommit=True)
    try:
        other.execute("BEGIN")
        other.execute("LOCK TABLE audit IN EXCLUSIVE MODE")

        def job(i: int) -> Any:
            return lambda db: db.execute(
                "INSERT INTO audit (at, action, object_id) VALUES (?, 'locked', ?)",
                [now_iso(), str(i)],
            )

        results = store.write_all([job(i) for i in range(8)])
        assert all(not ok and isinstance(v, StoreUnavailable) for ok, v in results)
        assert "lock" in str(results[0][1])
        other.execute("ROLLBACK")
        store.write(job(99))
        assert [r["object_id"] for r in store.query("SELECT object_id FROM audit")] == ["99"]
    finally:
        other.close()
        store.close()


def test_a_daemon_on_the_database_host_can_use_the_unix_socket(pg: Any, pg_url: str) -> None:
    """libpq's socket URL (``postgresql://user@/db?host=/dir``), the password given
    apart as with ``password_file``: writes, reads, locks and the redacted name."""
    from pa_bridge.config import StorageSettings

    schema = pg_url.rsplit("%3D", 1)[1]
    socket_url = pg.url("pa_bridge_tests", password=False, unix=True)
    settings = StorageSettings(
        url=f"{socket_url}&options=-csearch_path%3D{schema}", password=pg_server.PASSWORD
    )
    url = settings.database_url()
    assert url is not None and "@/pa_bridge_tests?host=" in url
    store = PgStore(url)
    try:
        assert pg_server.PASSWORD not in store.location
        store.write(lambda db: meta.put(db, "over", "socket"))
        assert meta.get(store.reader(), "over") == "socket"
        with store.claim_lock("k"), store.item_lock(7) as got:
            assert got
        row = store.query("SELECT inet_server_addr() IS NULL AS unix")
        assert row == [{"unix": True}]  # not over TCP
    finally:
        store.close()


def test_healthz_on_postgresql_shows_the_database_and_the_fleets_queue(
    make_daemon: Any, pg_url: str
) -> None:
    """Over HTTP: which daemon answered, on what, and the queue the fleet shares (an
    outcome report queued on one daemon is in the depth both report)."""
    import os
    import socket

    from tests.support import free_port

    gone = f"http://127.0.0.1:{free_port()}"  # the service is down: the report stays queued
    service = {
        "claim_url": f"{gone}/cmmimport/", "outcomes_url": f"{gone}/outcomes.json",
        "dashboard_url": f"{gone}/dashboard", "username": "u", "password": "p",
        "api_key": "k", "timeout_seconds": 1, "probe_seconds": 0,
    }  # fmt: skip
    one, two = (
        make_daemon(storage={"url": pg_url}, service=service, sandbox={"enabled": False})
        for _ in range(2)
    )
    with httpx.Client(timeout=10) as c:
        r = c.post(
            f"{one.intake_server.url}/v1/claims",
            json=b.exchange_json(b.request_bytes(), b.response_bytes([b.PAID])),
        )
        assert r.status_code == 200
        answers = [c.get(f"{d.intake_server.url}/healthz") for d in (one, two)]
    for r in answers:
        assert r.status_code == 200
        body = r.json()
        assert body["database"] is True and body["database_error"] is None
        assert body["database_engine"] == "postgresql"
        assert body["daemon_id"] == f"{socket.gethostname()}:{os.getpid()}"
        assert body["queue_depth"] == 1 and sum(body["queue"].values()) == 1
        assert 0 <= body["queue_oldest_age_s"] < 60


def test_doctor_warns_when_pg_dump_is_missing(
    pg_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pa_bridge import pg_tools
    from pa_bridge.doctor import check_postgres

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(pg_tools, "DEBIAN_BINS", str(tmp_path / "none" / "*" / "bin"))
    PgStore(pg_url).close()
    tools = check_postgres(pg_url)[-1]
    assert tools.name == "backup tools" and tools.status == "warn"
    assert "pg_dump is not installed" in tools.message


def test_healthz_and_callbacks_answer_503_while_postgresql_refuses_and_recover(
    make_daemon: Any, pg: Any
) -> None:
    """The daemon's login is refused and its sessions ended (the server restarted under
    it, say): /healthz says unavailable and names it, without the password, and a
    callback is answered 503 (not committed, so not acknowledged); once the login works
    again the daemon reconnects by itself and the callback's retry is stored."""
    import os

    name = pg.new_database("hz")
    role, secret = f"hz_role_{os.getpid()}", "health-role-password-7"
    with pg.admin() as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{secret}'")
        admin.execute(f'ALTER DATABASE "{name}" OWNER TO {role}')
    url = pg.url(name).replace(pg.url(name).split("@")[0], f"postgresql://{role}:{secret}")
    d = make_daemon(storage={"url": url})
    try:
        with httpx.Client(base_url=d.intake_server.url, timeout=10) as api:
            assert api.get("/healthz").json()["status"] == "ok"
            with pg.admin() as admin:
                admin.execute(f"ALTER ROLE {role} NOLOGIN")
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                    [role],
                )
            h = api.get("/healthz")
            assert h.status_code == 503
            body = h.json()
            assert body["database"] is False and body["status"] == "unavailable"
            assert "connection" in body["database_error"] and secret not in h.text
            assert body["queue_depth"] is None  # unknown while the queue cannot be read
            callback = {"request": {"id": "PGDOWN1", "workflow_status": "New"}}
            hook = f"{d.callback_server.url}/callbacks/pharmacy"
            r = httpx.post(hook, json=callback, timeout=20)  # not committed: not acknowledged
            assert r.status_code == 503 and r.json()["error"]["code"] == "storage_unavailable"
            assert secret not in r.text
            with pg.admin() as admin:
                admin.execute(f"ALTER ROLE {role} LOGIN")
            wait_until(
                lambda: api.get("/healthz").status_code == 200, what="the database to recover"
            )
            r = httpx.post(hook, json=callback, timeout=20)  # the service's retry lands
            assert r.status_code == 200 and r.json()["status"] == "stored"
    finally:
        d.stop()
        pg.drop_database(name)
        with pg.admin() as admin:
            admin.execute(f"DROP ROLE IF EXISTS {role}")
