"""Faults on PostgreSQL (issue 32): the connections killed, the server restarted, the
database made read-only, a standby promoted. After each the store heals by itself, and
nothing a caller was told is stored is lost. All against a real server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from pa_bridge.store import PgStore, StoreUnavailable, meta
from tests import builders as b
from tests import pg_server
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


def test_a_write_waited_on_after_the_connections_were_killed_commits_and_the_writer_lives(
    pg_url: str,
) -> None:
    """The issue's reproduction: one write, pg_terminate_backend on the store's
    connections, one more ``submit`` (a write whose result a caller waits on, as a
    claim's answer record is). The writer sees that its connection was ended before it
    begins, connects again and commits; its thread goes on; and a read after it gets a
    live connection from the pool, not the ended one."""
    store = PgStore(pg_url)
    try:
        store.write(_put("k", "1"))
        assert meta.get(store.reader(), "k") == "1"  # the pool holds a connection now
        assert _kill_connections(pg_url) >= 2
        store.submit(_put("k", "2")).result(timeout=10)
        assert store.writer_alive, "the writer thread died"
        assert meta.get(store.reader(), "k") == "2"
        assert store.problem() is None
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
    assert d.use_cases.store.writer_alive
    kept = {r["claim_id"] for r in d.use_cases.store.query("SELECT id AS claim_id FROM exchanges")}
    print(
        f"\nconnection-kill drill: {len(statuses)} keyed claims, {len(stored_ids)} answered"
        f" 200 ({statuses.count(503)} answered 503), {len(set(stored_ids) & kept)} of them kept"
    )
    assert set(stored_ids) <= kept


# ---- a primary and its streaming standby ------------------------------------------------

#: the primary waits for the standby before a commit returns (synchronous replication):
#: what the daemon acknowledged is on the standby when it is promoted
_SYNC = "-c synchronous_commit=on -c synchronous_standby_names=standby"


@pytest.fixture
def pair(pg: pg_server.PgServer) -> Iterator[tuple[pg_server.PgServer, pg_server.PgServer]]:
    """A primary with a synchronous streaming standby, started for the test (the
    session's server only lends its binaries)."""
    with pg_server.running_server(options=_SYNC) as primary:
        with pg_server.running_standby(primary) as standby:
            with primary.admin() as admin:
                wait_until(
                    lambda: admin.execute(
                        "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'"
                    ).fetchone(),
                    what="the standby to stream synchronously",
                )
            yield primary, standby


def _pair_url(primary: pg_server.PgServer, standby: pg_server.PgServer, attrs: str) -> str:
    """libpq's URL naming both servers (``attrs``: its ``target_session_attrs``)."""
    hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
    url = primary.url().replace(f"127.0.0.1:{primary.port}", hosts)
    return f"{url}?target_session_attrs={attrs}" if attrs else url


@pytest.mark.slow
def test_a_switchover_answers_read_only_then_follows_the_promoted_standby(
    pair: tuple[pg_server.PgServer, pg_server.PgServer],
) -> None:
    """A planned switchover: store IT makes the primary read-only, then promotes the
    standby. Meanwhile each write is told "not stored" naming the read-only server;
    after the promotion the store's writer connects again (the URL names both servers
    and asks for the one that writes), and its reads follow it there."""
    primary, standby = pair
    store = PgStore(_pair_url(primary, standby, "read-write"))
    try:
        store.write(_put("k", "before"))
        assert meta.get(store.reader(), "k") == "before"
        with primary.admin() as admin:
            admin.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            admin.execute("SELECT pg_reload_conf()")

        def refused() -> str:
            try:
                store.write(_put("k", "during"))
            except StoreUnavailable as e:
                return str(e)
            return ""

        assert "read-only" in wait_until(refused, what="a write refused as read-only")
        assert "read-only" in (store.problem() or "")  # what /healthz says
        standby.promote()
        promoted = time.monotonic()
        wait_until(lambda: store.problem() is None, what="the writer on the new primary")
        print(f"\nswitchover drill: writing again {time.monotonic() - promoted:.2f} s after")
        store.write(_put("k", "after"))
        assert meta.get(store.reader(), "k") == "after"  # read from the new primary
        with psycopg.connect(standby.url(), autocommit=True) as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'k'").fetchone()
        assert row == ("after",)
    finally:
        store.close()


@pytest.mark.slow
def test_a_standby_promoted_while_daemons_write_loses_no_acknowledged_callback(
    pair: tuple[pg_server.PgServer, pg_server.PgServer], make_daemon: Any
) -> None:
    """The primary dies under load (stopped at once) and its standby is promoted, with
    two daemons taking callbacks from 8 senders that retry whatever is not answered 200,
    as the service does. One daemon's URL asks for the server that writes
    (``target_session_attrs=read-write``): it refuses while there is none. The other's
    names both servers without asking: it reaches the standby and gets read-only
    answers until the promotion. Both answer 503 (never 200) while nothing can commit,
    are healthy again by themselves after the promotion, and every callback either
    acknowledged is on the new primary, once."""
    primary, standby = pair
    with primary.admin() as admin:
        admin.execute('CREATE DATABASE "failover"')
    urls = [
        _pair_url(primary, standby, "read-write").replace("/postgres", "/failover"),
        _pair_url(primary, standby, "").replace("/postgres", "/failover"),
    ]
    daemons = [make_daemon(storage={"url": u}) for u in urls]
    hooks = [f"{d.callback_server.url}/callbacks/pharmacy" for d in daemons]
    acked: set[str] = set()
    refused = [0, 0]  # answers that were not 200, per daemon
    lock = threading.Lock()
    stop = threading.Event()
    stopped = threading.Event()  # the primary is gone

    def sender(k: int) -> None:
        with httpx.Client(timeout=20) as c:
            n = 0
            while not stop.is_set():
                n += 1
                key = f"fo-{k}-{n}"
                body = {"request": {"id": f"FO{k}{n % 50:02d}", "workflow_status": "New",
                                    "delivery_id": key}}  # fmt: skip
                tries = 0
                while not stop.is_set():
                    # a refused callback is tried again at the other daemon: a sender
                    # whose callbacks one daemon acknowledged just before the kill
                    # reaches both afterwards (else every sender may end up stuck on
                    # one daemon, and the other is never asked while nothing commits)
                    which = (k + n + tries) % 2
                    tries += 1
                    try:
                        status = c.post(hooks[which], json=body).status_code
                    except httpx.HTTPError:
                        status = 0
                    with lock:
                        if status == 200:
                            acked.add(key)
                            break
                        refused[which] += stopped.is_set()
                    stop.wait(0.05)  # the service's retry, sooner than its own

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    figures: dict[str, float] = {}
    try:
        wait_until(lambda: len(acked) >= 200, timeout=60, what="callbacks before the fault")
        primary.stop()  # immediate: its sessions end, nothing is shut down cleanly
        stopped.set()
        t0 = time.monotonic()
        before = len(acked)
        wait_until(lambda: min(refused) >= 10, timeout=60, what="both daemons refusing")
        with httpx.Client(timeout=20) as api:
            down = [api.get(f"{d.intake_server.url}/healthz") for d in daemons]
            assert [h.status_code for h in down] == [503, 503]
            assert "read-only" in down[1].json()["database_error"]
            assert len(acked) <= before + 8  # at most the commits in flight at the kill
            standby.promote()
            t1 = time.monotonic()
            for k, d in enumerate(daemons):
                wait_until(
                    lambda d=d: api.get(f"{d.intake_server.url}/healthz").status_code == 200,
                    what="the daemon healthy on the new primary",
                )
                figures[f"healthy_{k}_s"] = time.monotonic() - t1
        after = len(acked)
        wait_until(lambda: len(acked) >= after + 200, timeout=60, what="callbacks after")
        figures["outage_s"] = t1 - t0
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    with psycopg.connect(urls[0], autocommit=True) as conn:
        assert conn.info.port == standby.port
        rows = conn.execute("SELECT dedupe_key, count(*) FROM callbacks GROUP BY 1").fetchall()
    stored = {k.removeprefix("delivery:"): n for k, n in rows}
    lost = acked - stored.keys()
    print(
        f"\nfailover drill: {len(acked)} acknowledged, {len(stored)} kept on the new primary,"
        f" {len(lost)} acknowledged but lost, {sum(refused)} refusals during the outage;"
        f" primary down to promotion {figures['outage_s']:.2f} s, healthy after the"
        f" promotion in {figures['healthy_0_s']:.2f} s (read-write URL) and"
        f" {figures['healthy_1_s']:.2f} s (both hosts, no attrs)"
    )
    assert not lost, f"{len(lost)} acknowledged callbacks lost in the failover"
    assert all(n == 1 for n in stored.values())


def test_a_replay_whose_answer_record_was_lost_on_postgresql_is_rebuilt_after_the_budget(
    make_app: Any, pg_url: str
) -> None:
    """On PostgreSQL another daemon may still be answering a claim whose answer is not
    recorded yet: a replay looks again until that claim's budget has passed since its
    commit, then rebuilds the answer from the stored claim (never 409). The record's
    loss is the state a connection killed as it committed leaves."""
    app = make_app(storage={"url": pg_url}, outcomes={"budget_ms": 300})
    body = {
        "request": b.request_bytes().decode("latin-1"),
        "response": b.response_bytes([b.REJECT_75]).decode("latin-1"),
    }
    key = {"Idempotency-Key": "pg-lost-answer-1"}
    first = app.post("/v1/claims", json=body, headers=key).json()
    assert app.store.flush()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE exchanges SET answer_json = NULL, message_source = NULL")
    again = app.post("/v1/claims", json=body, headers=key)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    got = again.json()
    assert got["claim_id"] == first["claim_id"]
    assert (got["message_source"], got["fallback_reason"]) == ("fallback", "not_recorded")
    assert got["pa_eligible"] is True and got["button_label"] == "Submit PA"
    assert app.store.flush()
    assert app.post("/v1/claims", json=body, headers=key).json() == got


def _callback_load(
    hooks: list[str], stop: threading.Event, acked: set[str], refused: list[int]
) -> list[threading.Thread]:
    """8 senders of distinct callbacks to ``hooks`` in turn, retrying what is not
    answered 200, as the service does."""
    lock = threading.Lock()

    def sender(k: int) -> None:
        with httpx.Client(timeout=20) as c:
            n = 0
            while not stop.is_set():
                n += 1
                key = f"load-{k}-{n}"
                body = {"request": {"id": f"LD{k}{n % 50:02d}", "workflow_status": "New",
                                    "delivery_id": key}}  # fmt: skip
                while not stop.is_set():
                    try:
                        status = c.post(hooks[(k + n) % len(hooks)], json=body).status_code
                    except httpx.HTTPError:
                        status = 0
                    with lock:
                        if status == 200:
                            acked.add(key)
                            break
                        refused[0] += 1
                    stop.wait(0.05)

    threads = [threading.Thread(target=sender, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    return threads


@pytest.mark.slow
def test_a_server_restarted_under_load_loses_no_acknowledged_callback(
    pg: pg_server.PgServer, make_daemon: Any
) -> None:
    """PostgreSQL stopped at once (a crash) and started again while a daemon takes
    callbacks: 503 meanwhile, healthy again by itself, every acknowledged callback kept
    once. Commits are synchronous, as a server's default is (the tests' own server
    turns that off for speed, and then a crash loses the last acknowledged ones)."""
    with pg_server.running_server(options="-c synchronous_commit=on") as server:
        with server.admin() as admin:
            admin.execute('CREATE DATABASE "restart"')
        d = make_daemon(storage={"url": server.url("restart")})
        hook = f"{d.callback_server.url}/callbacks/pharmacy"
        acked: set[str] = set()
        refused = [0]
        stop = threading.Event()
        threads = _callback_load([hook], stop, acked, refused)
        try:
            wait_until(lambda: len(acked) >= 200, timeout=60, what="callbacks before")
            server.stop()
            t0 = time.monotonic()
            wait_until(lambda: refused[0] >= 10, what="callbacks refused while it is down")
            with httpx.Client(base_url=d.intake_server.url, timeout=20) as api:
                assert api.get("/healthz").status_code == 503
                server.start()
                t1 = time.monotonic()
                wait_until(lambda: api.get("/healthz").status_code == 200, what="healed")
                healed = time.monotonic() - t1
            after = len(acked)
            wait_until(lambda: len(acked) >= after + 200, timeout=60, what="callbacks after")
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        with psycopg.connect(server.url("restart")) as conn:
            rows = conn.execute("SELECT dedupe_key, count(*) FROM callbacks GROUP BY 1").fetchall()
    stored = {k.removeprefix("delivery:"): n for k, n in rows}
    lost = acked - stored.keys()
    print(
        f"\nrestart drill: {len(acked)} acknowledged, {len(stored)} kept, {len(lost)} lost,"
        f" {refused[0]} refusals; down {t1 - t0:.2f} s, healthy {healed:.2f} s after the start"
    )
    assert not lost and all(n == 1 for n in stored.values())
