"""Many pharmacies in one deployment (issue 18): ``[[pharmacies]]``, each claim sent
with its own store's credentials (the sandbox tells whose credentials each call
carried), a store not configured refused before anything is stored or sent, tokens
limited to stores, the feed and the console filtered by store. The intake app through
``app.test_client()`` on both engines, against a real sandbox on loopback."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pa_bridge.app import create_app, make_client
from pa_bridge.config import ConfigError, load_settings
from pa_bridge.store import PgStore, Store
from tests import builders as b
from tests.support import Cli

A, B, C = "1111111", "2222222", "3333333"  # synthetic NCPDP provider ids
CREDS = {
    A: ("store-a", "store-a-password-1", "store-a-api-key-1"),
    B: ("store-b", "store-b-password-2", "store-b-api-key-2"),
    C: ("store-c", "store-c-password-3", "store-c-api-key-3"),
}
TOKEN_ALL = "token-for-every-store-0001"
TOKEN_A = "token-for-store-a-only-0002"


def _entry(pid: str) -> dict[str, str]:
    user, pw, key = CREDS[pid]
    return {"provider_id": pid, "username": user, "password": pw, "api_key": key}


def _claim(provider: str, outcome: b.Outcome = b.REJECT_75, **kw: Any) -> dict[str, str]:
    req = b.request_bytes(provider_id=provider, provider_qualifier="07", **kw)
    return b.exchange_json(req, b.response_bytes([outcome]))


def _b2(provider: str) -> dict[str, str]:
    req = b.request_bytes(code="B2", provider_id=provider, provider_qualifier="07")
    return {"request": req.decode("latin-1")}


class Chain:
    """One intake app of a chain deployment, with its sandbox."""

    def __init__(self, app: Any, sandbox: Any) -> None:
        self.app = app
        self.http = app.test_client()
        self.services = app.extensions["pa_bridge"]
        self.sandbox = sandbox

    def post(self, path: str, body: Any = None, token: str | None = None) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.http.post(path, json=body, headers=headers)

    def get(self, path: str, token: str | None = None, **params: str) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return self.http.get(path, query_string=params, headers=headers)

    def calls(self, interface: str | None = None) -> list[dict[str, Any]]:
        got = httpx.get(self.sandbox.url + "/sandbox/calls", timeout=5).json()["calls"]
        return [c for c in got if interface is None or c["interface"] == interface]

    def count(self, table: str) -> int:
        row = self.services.store.reader().conn.execute(f"SELECT count(*) FROM {table}").fetchone()  # noqa: S608
        return int(row[0])


@pytest.fixture
def chain_sandbox() -> Iterator[Any]:
    from pa_bridge.sandbox import SandboxConfig, SandboxPharmacy, SandboxServer

    stores = tuple(SandboxPharmacy(*CREDS[p], provider_id=p) for p in (A, B, C))
    server = SandboxServer(SandboxConfig(step_seconds=0.05, pharmacies=stores)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def make_chain(tmp_path: Path, chain_sandbox: Any, daemon_storage: dict[str, Any]) -> Iterator[Any]:
    """Build a chain's intake app; every app of a test shares one database."""
    made: list[tuple[Any, Any, Any]] = []
    storage = {"path": str(tmp_path / "chain.sqlite3"), **daemon_storage}

    def make(
        stores: tuple[str, ...] = (A, B),
        tokens: tuple[str, ...] = (),
        scoped: tuple[tuple[str, tuple[str, ...]], ...] = (),
    ) -> Chain:
        settings = load_settings(
            storage=storage,
            intake={
                "listen": "127.0.0.1:0",
                "tokens": list(tokens),
                "scoped_tokens": [{"token": t, "pharmacies": list(p)} for t, p in scoped],
            },
            callbacks={"listen": "127.0.0.1:0"},
            pharmacies=[_entry(p) for p in stores],
        )
        url = settings.storage.database_url()
        store = PgStore(url) if url is not None else Store(settings.storage.path)
        client = make_client(settings, chain_sandbox.url)
        app = create_app(settings, store=store, client=client)
        made.append((app, store, client))
        return Chain(app, chain_sandbox)

    yield make
    for app, store, client in made:
        app.extensions["pa_bridge"].close()
        client.close()
        store.close()


# ---- configuration ---------------------------------------------------------------------
def test_duplicate_provider_ids_and_missing_credentials_are_named_never_the_secret() -> None:
    dup = [_entry(A), {**_entry(A), "username": "other"}]
    lacking = {"provider_id": B, "username": "store-b", "password": "store-b-password-2"}
    with pytest.raises(ConfigError) as ei:
        load_settings(pharmacies=[*dup, lacking])
    text = "\n".join(ei.value.problems)
    assert f"provider id {A} is listed more than once" in text
    assert f"provider id {B} lacks api_key" in text
    assert "store-b-password-2" not in text and "store-a-password-1" not in text


def test_pharmacies_from_the_environment_as_json_and_secrets_from_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "b-password").write_text("store-b-password-2\n")
    (tmp_path / "b-key").write_text("store-b-api-key-2\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    entry_b = {
        "provider_id": B,
        "username": "store-b",
        "password_file": "b-password",
        "api_key_file": "b-key",
    }
    monkeypatch.setenv("PA_BRIDGE_PHARMACIES", json.dumps([_entry(A), entry_b]))
    s = load_settings()
    assert [p.provider_id for p in s.pharmacies] == [A, B]
    assert s.secret(s.pharmacies[1].password) == "store-b-password-2"
    assert s.secret(s.pharmacies[1].api_key) == "store-b-api-key-2"
    monkeypatch.setenv("PA_BRIDGE_PHARMACIES", json.dumps([{**entry_b, "api_key_file": "nope"}]))
    with pytest.raises(ConfigError) as ei:
        load_settings()
    assert any(f"provider id {B}" in p and "cannot read" in p for p in ei.value.problems)


def test_a_chain_needs_no_service_credentials_and_scoped_tokens_name_known_stores() -> None:
    s = load_settings(
        service={"claim_url": "https://claims.example.test/cmmimport/", "outcomes_url": "x"},
        sandbox={"enabled": False},
        pharmacies=[_entry(A)],
    )
    assert s.pharmacies[0].provider_id == A
    with pytest.raises(ConfigError) as ei:
        load_settings(
            pharmacies=[_entry(A)],
            intake={
                "tokens": [TOKEN_ALL],
                "scoped_tokens": [
                    {"token": TOKEN_A, "pharmacies": [A, "9999999"]},
                    {"token": TOKEN_ALL, "pharmacies": [A]},
                ],
            },
        )
    text = "\n".join(ei.value.problems)
    assert "provider id 9999999 is not in [[pharmacies]]" in text
    assert "scoped_tokens #2: the same token is in intake.tokens" in text


# ---- each claim with its own store's credentials --------------------------------------
def test_each_claim_goes_with_its_own_pharmacys_credentials(make_chain: Any) -> None:
    chain = make_chain()
    for pid in (A, B):
        claim = chain.post("/v1/claims", _claim(pid))
        assert claim.status_code == 200, claim.get_json()
        # the outcomes call at intake (reject 75) carried this store's api_key
        assert claim.get_json()["message_source"] == "outcomes"
        pa = chain.post(f"/v1/claims/{claim.get_json()['claim_id']}/pa")
        assert pa.status_code == 201, pa.get_json()
        assert pa.get_json()["provider_id"] == pid
    outcomes = [c["username"] for c in chain.calls("outcomes")]
    assert outcomes == ["store-a", "store-b"]
    claims = [(c["username"], c["provider_id"]) for c in chain.calls("claim")]
    assert claims == [("store-a", A), ("store-b", B)]
    # a reversal (B2) goes with its store's credentials too
    r = chain.post("/v1/reversals", _b2(B))
    assert r.status_code == 200 and r.get_json()["status"] == "delivered"
    last = chain.calls("claim")[-1]
    assert (last["username"], last["provider_id"], last["transaction_code"]) == (
        "store-b",
        B,
        "B2",
    )


def test_queued_outcome_reports_go_with_their_pharmacys_credentials(make_chain: Any) -> None:
    chain = make_chain()
    for pid in (B, A):
        assert chain.post("/v1/claims", _claim(pid, b.PAID)).status_code == 200
    assert chain.services.outbox.drain_once() == 2
    assert sorted(c["username"] for c in chain.calls("outcomes")) == ["store-a", "store-b"]


def test_an_unknown_pharmacy_is_refused_naming_it_and_nothing_is_sent_or_stored(
    make_chain: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="pa_bridge")
    chain = make_chain()
    before = (chain.count("exchanges"), chain.count("outbox"), len(chain.calls()))
    for path, body in (("/v1/claims", _claim(C)), ("/v1/reversals", _b2(C))):
        r = chain.post(path, body)
        assert r.status_code == 422, r.get_json()
        err = r.get_json()["error"]
        assert err["code"] == "unknown_pharmacy" and C in err["message"]
        assert err["detail"] == {"provider_id": C}
    assert (chain.count("exchanges"), chain.count("outbox"), len(chain.calls())) == before
    logged = [r.__dict__["fields"] for r in caplog.records if r.getMessage() == "pharmacy.unknown"]
    assert logged == [{"provider_id": C, "configured": 2}] * 2


def test_a_pharmacy_removed_from_the_config(make_chain: Any) -> None:
    """Its stored claim cannot be submitted (422, nothing sent), and its queued
    outcome reports are held for that store with the reason in `queue list`, never
    failed for good (issue 27): a daemon that lists the store again sends them."""
    first = make_chain(stores=(A, B))
    rejected = first.post("/v1/claims", _claim(B, b.REJECT_MR)).get_json()["claim_id"]
    assert first.post("/v1/claims", _claim(B, b.PAID)).status_code == 200
    second = make_chain(stores=(A,))
    sent = len(second.calls())
    r = second.post(f"/v1/claims/{rejected}/pa")
    assert r.status_code == 422 and r.get_json()["error"]["code"] == "unknown_pharmacy"
    assert B in r.get_json()["error"]["message"]
    second.services.outbox.drain_once()
    items = second.services.outbox.list()
    assert [i["status"] for i in items] == ["held", "held"]  # both claims' reports
    assert [i["held_for"] for i in items] == [f"pharmacy:{B}"] * 2
    assert all("unknown_pharmacy" in i["last_error"] and B in i["last_error"] for i in items)
    assert len(second.calls()) == sent
    second.services.outbox.drain_once()  # this daemon leaves them be
    assert len(second.calls()) == sent
    third = make_chain(stores=(A, B))  # B listed again
    third.services.outbox.drain_once()
    assert [i["status"] for i in third.services.outbox.list()] == ["delivered"] * 2
    reports = third.calls("outcomes")[-2:]
    assert [c["username"] for c in reports] == [CREDS[B][0]] * 2


def test_the_sandbox_refuses_one_stores_credentials_for_another_stores_claim(
    chain_sandbox: Any,
) -> None:
    from pa_bridge.client import Credentials, PaServiceClient, ServiceError

    with PaServiceClient(**chain_sandbox.client_kwargs()) as client:
        raw = b.request_bytes(provider_id=B, provider_qualifier="07")
        with pytest.raises(ServiceError) as ei:
            client.submit_claim(raw, credentials=Credentials(*CREDS[A]))
        assert ei.value.code == "credentials"
        assert client.submit_claim(raw, credentials=Credentials(*CREDS[B])).pa_urls


# ---- the dashboard ------------------------------------------------------------------
def test_the_dashboard_logs_in_as_the_pharmacy_named(make_chain: Any) -> None:
    chain = make_chain()
    r = chain.get("/v1/dashboard/open")
    assert r.status_code == 400
    assert r.get_json()["error"]["code"] == "missing_pharmacy"
    assert "'pharmacy'" in r.get_json()["error"]["message"]
    r = chain.get("/v1/dashboard/open", pharmacy=B)
    assert r.status_code == 302 and "token=" in r.headers["Location"]
    assert [c["username"] for c in chain.calls("dashboard_login")] == ["store-b"]
    r = chain.get("/v1/dashboard/open", pharmacy=C)
    assert r.status_code == 422 and r.get_json()["error"]["detail"] == {"provider_id": C}
    one = make_chain(stores=(A,))
    assert one.get("/v1/dashboard/open").status_code == 302
    assert [c["username"] for c in chain.calls("dashboard_login")] == ["store-b", "store-a"]


def test_a_single_store_keeps_its_service_credentials(
    make_app: Any, sandbox: Any, daemon_storage: dict[str, Any]
) -> None:
    app = make_app(storage=daemon_storage)
    r = app.post("/v1/claims", json=_claim("1999999976"))
    assert r.status_code == 200 and r.json()["message_source"] == "outcomes"
    pa = app.post(f"/v1/claims/{r.json()['claim_id']}/pa").json()
    assert pa["provider_id"] == "1999999976"
    calls = httpx.get(sandbox.url + "/sandbox/calls", timeout=5).json()["calls"]
    assert {c["username"] for c in calls} == {"sandbox-pharmacy"}
    assert app.get("/v1/dashboard/open").status_code == 302


# ---- tokens limited to pharmacies --------------------------------------------------
def test_a_scoped_token_acts_and_reads_only_for_its_pharmacies(make_chain: Any) -> None:
    chain = make_chain(tokens=(TOKEN_ALL,), scoped=((TOKEN_A, (A,)),))
    mine = chain.post("/v1/claims", _claim(A, b.REJECT_MR), TOKEN_A).get_json()["claim_id"]
    theirs = chain.post("/v1/claims", _claim(B, b.REJECT_MR), TOKEN_ALL).get_json()["claim_id"]
    sent = len(chain.calls())
    for path, body in (("/v1/claims", _claim(B)), ("/v1/reversals", _b2(B))):
        r = chain.post(path, body, TOKEN_A)
        assert r.status_code == 403, r.get_json()
        err = r.get_json()["error"]
        assert err["code"] == "pharmacy_not_allowed" and B in err["message"]
    assert len(chain.calls()) == sent
    assert chain.post(f"/v1/claims/{theirs}/pa", None, TOKEN_A).status_code == 404
    assert len(chain.calls()) == sent
    pa_a = chain.post(f"/v1/claims/{mine}/pa", None, TOKEN_A).get_json()["pa_id"]
    pa_b = chain.post(f"/v1/claims/{theirs}/pa", None, TOKEN_ALL).get_json()["pa_id"]
    feed = chain.get("/v1/pa", TOKEN_A).get_json()
    assert [p["pa_id"] for p in feed["pas"]] == [pa_a]
    everything = chain.get("/v1/pa", TOKEN_ALL).get_json()
    assert [p["pa_id"] for p in everything["pas"]] == [pa_a, pa_b]
    for path in (f"/v1/pa/{pa_b}", f"/v1/pa/{pa_b}/open", f"/v1/claims/{theirs}"):
        assert chain.get(path, TOKEN_A).status_code == 404, path
    assert chain.get("/v1/pa", TOKEN_A, claim_id=theirs).status_code == 404
    assert chain.get(f"/v1/pa/{pa_a}", TOKEN_A).get_json()["provider_id"] == A
    assert chain.get(f"/v1/claims/{mine}", TOKEN_A).get_json()["provider_id"] == A
    assert chain.get(f"/v1/pa/{pa_b}", TOKEN_ALL).status_code == 200
    r = chain.get("/v1/pa", TOKEN_A, pharmacy=B)
    assert r.status_code == 403 and r.get_json()["error"]["detail"] == {"provider_id": B}
    # the dashboard: the one store the token has, without naming it; not another's
    assert chain.get("/v1/dashboard/open", TOKEN_A).status_code == 302
    assert chain.get("/v1/dashboard/open", TOKEN_A, pharmacy=B).status_code == 403
    assert [c["username"] for c in chain.calls("dashboard_login")] == ["store-a"]


# ---- the feed filtered by pharmacy ---------------------------------------------------
def test_the_feed_filtered_by_pharmacy_never_skips_a_change(make_chain: Any) -> None:
    """Changes of two stores interleaved, read one at a time with the cursor: every
    change of the store asked for is seen once, none of the other's; a later change is
    seen after the cursor moved past the other store's changes."""
    chain = make_chain()
    made: dict[str, list[str]] = {A: [], B: []}
    for i in range(6):
        pid = (A, B)[i % 2]
        rx = b.Rx(rx_number=f"00000{7000 + i}")
        claim = chain.post("/v1/claims", _claim(pid, b.REJECT_MR, rxs=(rx,))).get_json()
        made[pid].append(chain.post(f"/v1/claims/{claim['claim_id']}/pa").get_json()["pa_id"])

    def read_all(cursor: str, pharmacy: str) -> tuple[list[str], str]:
        seen: list[str] = []
        while True:
            page = chain.get("/v1/pa", pharmacy=pharmacy, since=cursor, limit="1").get_json()
            seen += [p["pa_id"] for p in page["pas"]]
            assert all(p["provider_id"] == pharmacy for p in page["pas"])
            if not page["pas"]:
                return seen, page["cursor"]
            cursor = page["cursor"]

    seen_a, cursor_a = read_all("", A)
    assert seen_a == made[A]
    seen_b, _ = read_all("", B)
    assert seen_b == made[B]
    newest = chain.get("/v1/pa").get_json()["pas"][-1]["cursor"]
    assert int(cursor_a) == int(newest)  # moved past B's last change, which is newer
    # more changes of both stores after the cursor: A's are all seen, once
    later = []
    for i, pid in enumerate((B, A, B)):
        rx = b.Rx(rx_number=f"00000{8000 + i}")
        claim = chain.post("/v1/claims", _claim(pid, b.REJECT_MR, rxs=(rx,))).get_json()
        pa = chain.post(f"/v1/claims/{claim['claim_id']}/pa").get_json()["pa_id"]
        if pid == A:
            later.append(pa)
    assert read_all(cursor_a, A)[0] == later
    bad = chain.get("/v1/pa", pharmacy=" ")
    assert bad.status_code == 400 and bad.get_json()["error"]["code"] == "invalid_pharmacy"


# ---- the migration's backfill, on both engines --------------------------------------
def test_a_filtered_page_moves_the_cursor_to_the_last_change_never_the_restore_floor(
    make_chain: Any,
) -> None:
    """After a restore the floor is above every change and a cursor up to it is
    accepted; a filtered page that is not full moves the cursor to the last change, not
    to the floor (a change may yet be given the floor's own position)."""
    from pa_bridge.store import meta

    chain = make_chain()
    claim = chain.post("/v1/claims", _claim(A, b.REJECT_MR)).get_json()
    chain.post(f"/v1/claims/{claim['claim_id']}/pa")
    newest = chain.get("/v1/pa").get_json()["cursor"]
    floor = str(int(newest) + 5_000_000)
    chain.services.store.write(lambda db: meta.put(db, "feed.seq_floor", floor))
    page = chain.get("/v1/pa", pharmacy=B).get_json()
    assert page == {"pas": [], "cursor": newest}
    assert chain.get("/v1/pa", pharmacy=B, since=floor).get_json() == {"pas": [], "cursor": floor}


def test_the_migration_backfills_each_pas_pharmacy(store_url: str) -> None:
    """A database from before ``m006_pharmacies``: each PA gets the provider id of its
    claim exchange, else the one in its claim key; a PA from a callback gets none."""
    rows = [
        ("INSERT INTO exchanges (id, received_at, kind, provider_id) VALUES (?, ?, ?, ?)",
         ["ex1", "2026-11-20T10:00:00Z", "claim", A]),
        ("INSERT INTO pas (id, claim_id, transaction_index, claim_key, created_at, updated_at,"
         " change_seq) VALUES (?, ?, 0, ?, ?, ?, ?)",
         ["PA1", "ex1", f"610014|SYNPCN|G|1|0|{A}", "2026-11-20", "2026-11-20", 1]),
        ("INSERT INTO pas (id, claim_id, transaction_index, claim_key, created_at, updated_at,"
         " change_seq) VALUES (?, NULL, 0, ?, ?, ?, ?)",
         ["PA2", f"610014|SYNPCN|G|2|0|{B}", "2026-11-20", "2026-11-20", 2]),
        ("INSERT INTO pas (id, created_at, updated_at, change_seq) VALUES (?, ?, ?, ?)",
         ["PA3", "2026-11-20", "2026-11-20", 3]),
    ]  # fmt: skip
    if store_url.startswith("postgresql://"):
        import psycopg

        from pa_bridge.store import pg_migrations

        with psycopg.connect(store_url, autocommit=True) as conn:
            conn.execute(pg_migrations._TABLE)
            for name, statements in pg_migrations.PG_MIGRATIONS[:5]:
                for sql in statements:
                    conn.execute(sql)
                conn.execute("INSERT INTO pa_bridge_migrations (name) VALUES (%s)", [name])
            for sql, args in rows:
                conn.execute(sql.replace("?", "%s"), args)
        store: Store = PgStore(store_url)
    else:
        from sqlite_utils import Database

        from pa_bridge.store.migrations import MIGRATIONS

        db = Database(store_url)
        MIGRATIONS.apply(db, stop_before="m006_pharmacies")
        for sql, args in rows:
            db.execute(sql, args)
        db.conn.commit()
        db.close()
        store = Store(store_url)
    try:
        got = dict(
            store.reader().conn.execute("SELECT id, provider_id FROM pas ORDER BY id").fetchall()
        )
    finally:
        store.close()
    assert got == {"PA1": A, "PA2": B, "PA3": None}


# ---- the console API ---------------------------------------------------------------
def test_the_console_worklist_filtered_by_pharmacy_and_by_the_tokens_scope(
    make_chain: Any,
) -> None:
    chain = make_chain(tokens=(TOKEN_ALL,), scoped=((TOKEN_A, (A,)),))
    ids = {}
    for pid, rx in ((A, "000005551"), (B, "000005552")):
        body = _claim(pid, b.REJECT_MR, rxs=(b.Rx(rx_number=rx),))
        ids[pid] = chain.post("/v1/claims", body, TOKEN_ALL).get_json()["claim_id"]
    pa_b = chain.post(f"/v1/claims/{ids[B]}/pa", None, TOKEN_ALL).get_json()["pa_id"]

    def claim_ids(data: dict[str, Any]) -> set[str]:
        return {c["claim_id"] for c in data["claims"]}

    everything = chain.get("/v1/console/worklist", TOKEN_ALL).get_json()
    assert claim_ids(everything) == {ids[A], ids[B]}
    assert [p["provider_id"] for p in everything["pharmacies"]] == [A, B]
    only_a = chain.get("/v1/console/worklist", TOKEN_ALL, pharmacy=A).get_json()
    assert claim_ids(only_a) == {ids[A]} and only_a["pas"] == []
    assert only_a["pharmacy"] == A
    assert all(i["claim"]["claim_id"] == ids[A] for i in only_a["items"] if i["claim"])
    assert not any(i["pa"] for i in only_a["items"])
    only_b = chain.get("/v1/console/worklist", TOKEN_ALL, pharmacy=B).get_json()
    assert [p["pa_id"] for p in only_b["pas"]] == [pa_b]
    # the scoped token: its own store only, whatever it asks
    scoped = chain.get("/v1/console/worklist", TOKEN_A).get_json()
    assert claim_ids(scoped) == {ids[A]} and scoped["pas"] == []
    assert [p["provider_id"] for p in scoped["pharmacies"]] == [A]
    r = chain.get("/v1/console/worklist", TOKEN_A, pharmacy=B)
    assert r.status_code == 403 and r.get_json()["error"]["code"] == "pharmacy_not_allowed"
    assert chain.get(f"/v1/console/pa/{pa_b}", TOKEN_A).status_code == 404
    assert chain.post(f"/v1/pa/{pa_b}/acknowledge", None, TOKEN_A).status_code == 404
    assert chain.get(f"/v1/console/pa/{pa_b}", TOKEN_ALL).status_code == 200
    assert chain.post(f"/v1/pa/{pa_b}/acknowledge", None, TOKEN_ALL).status_code == 200


# ---- doctor ---------------------------------------------------------------------------
def test_doctor_lists_each_pharmacy_and_whether_its_credentials_are_there(
    tmp_path: Path, cli: Cli
) -> None:
    (tmp_path / "a-key").write_text("store-a-api-key-1\n")
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(
        f'[storage]\npath = "{tmp_path / "db" / "pa.sqlite3"}"\n'
        f'[[pharmacies]]\nprovider_id = "{A}"\nname = "Store A"\nusername = "store-a"\n'
        f'password = "store-a-password-1"\napi_key_file = "{tmp_path / "a-key"}"\n'
        f'[[pharmacies]]\nprovider_id = "{B}"\nusername = "store-b"\n'
        f'password_file = "{tmp_path / "no-such-file"}"\napi_key = "store-b-api-key-2"\n'
    )
    r = cli("doctor", "--config", str(cfg))
    out = r.stdout
    assert r.exit_code == 1
    assert f"ok    pharmacy {A} (Store A): credentials present" in out
    line = next(ln for ln in out.splitlines() if ln.startswith(f"FAIL  pharmacy {B}:"))
    assert "password missing: cannot read" in line
    for secret in ("store-a-password-1", "store-a-api-key-1", "store-b-api-key-2"):
        assert secret not in out and secret not in r.stderr


def test_doctor_tells_to_remove_a_duplicate_store_not_to_add_credentials(
    tmp_path: Path, cli: Cli
) -> None:
    """A provider id listed twice with complete credentials: the fix is to keep one
    entry, not to "give this store's username, password and api_key"."""
    entry = 'username = "store-a"\npassword = "store-a-password-1"\napi_key = "store-a-api-key-1"\n'
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(
        f'[storage]\npath = "{tmp_path / "db" / "pa.sqlite3"}"\n'
        f'[[pharmacies]]\nprovider_id = "{A}"\n{entry}[[pharmacies]]\nprovider_id = "{A}"\n{entry}'
    )
    r = cli("doctor", "--config", str(cfg))
    assert r.exit_code == 1
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith(f"FAIL  pharmacy {A}:"))
    assert "listed more than once" in line and "one [[pharmacies]] entry" in line, line
    assert "give this store's username" not in line
    assert "store-a-password-1" not in r.stdout and "store-a-api-key-1" not in r.stdout


def test_a_chains_client_uses_the_first_stores_credentials_only_when_service_has_none() -> None:
    """The client's own credentials (the health probe's) in a chain: [service]'s when
    given, else the first store's; each claim's call passes its store's anyway."""
    service = {
        "claim_url": "https://claims.example.test/cmmimport/",
        "outcomes_url": "https://claims.example.test/outcomes.json",
    }
    s = load_settings(service=service, sandbox={"enabled": False}, pharmacies=[_entry(B)])
    with make_client(s) as client:
        assert client.credentials.username == "store-b"
        assert client.api_key == "store-b-api-key-2"
    own = {**service, "username": "hq", "password": "hq-password-1", "api_key": "hq-key-1"}
    s = load_settings(service=own, sandbox={"enabled": False}, pharmacies=[_entry(B)])
    with make_client(s) as client:
        assert client.credentials.username == "hq" and client.api_key == "hq-key-1"
        assert "hq-password-1" not in repr(client.credentials)
