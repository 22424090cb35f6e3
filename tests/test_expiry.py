"""Approvals that lapse (issue 28): "Expiring soon" in the console's worklist, with its
reminder; one signed ``pa.expiring`` webhook and feed entry per PA entering the window;
a renewal PA linked both ways and closing the entry. Only the clock is faked: the
store is real (both engines), the callbacks go through the real ingest, the webhook
to a fake receiver on loopback, the API through the intake app."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest

from pa_bridge.app import create_app, make_client
from pa_bridge.callbacks.ingest import CallbackIntake
from pa_bridge.config import load_settings
from pa_bridge.service.expiry import ExpiryWatch
from pa_bridge.store import PgStore, Store
from pa_bridge.store.expiry import expiry_date
from pa_bridge.webhooks import verify
from tests.conftest import AppClient
from tests.fakes import FakeHttpServer, Reply
from tests.real_shapes import request_object
from tests.support import NO_SERVICE, document, wait_until

SECRET = "whsec-expiring-0123456789"


TODAY = dt.date.today()


def day(n: int) -> str:
    """Today plus ``n`` days, YYYY-MM-DD (the store's times are real: the callbacks'
    arrival; the clock moves from today on)."""
    return (TODAY + dt.timedelta(days=n)).isoformat()


def us(n: int) -> str:
    """:func:`day` as the interface's "date" type writes it, MM/DD/YYYY."""
    d = TODAY + dt.timedelta(days=n)
    return f"{d.month:02d}/{d.day:02d}/{d.year}"


def at(n: int, hour: int = 12) -> float:
    """Epoch seconds of ``day(n)`` at ``hour`` local time."""
    return dt.datetime.combine(TODAY + dt.timedelta(days=n), dt.time(hour)).astimezone().timestamp()


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Pharmacy:
    """The intake app, the callback ingest and the expiry watch on one store, all on
    one movable clock."""

    def __init__(self, where: str, tmp: Path, hook_url: str) -> None:
        self.clock = Clock(at(0))
        storage = {"url": where} if where.startswith("postgresql://") else {"path": where}
        self.settings = load_settings(
            storage=storage,
            intake={"listen": "127.0.0.1:0"},
            callbacks={"listen": "127.0.0.1:0", "forward_url": hook_url, "forward_secret": SECRET},
            service=NO_SERVICE,
            sandbox={"enabled": False},
        )
        self.store = PgStore(where) if where.startswith("postgresql://") else Store(where)
        self.client = make_client(self.settings)
        self.app = AppClient(
            create_app(self.settings, store=self.store, client=self.client, clock=self.clock)
        )
        self.ingest = CallbackIntake(self.store, forward=True)
        self.watch = ExpiryWatch(self.settings, self.store, forward=True, clock=self.clock)

    def callback(self, pa_id: str, status: str, outcome: str | None = None, **extra: Any) -> None:
        obj = request_object(pa_id, status, outcome, token=f"tok-{pa_id}")
        obj.update(extra)
        (r,) = self.ingest.receive_many([(json.dumps({"request": obj}).encode(), None)])
        assert not isinstance(r, BaseException) and r.outcome == "stored", r

    def pa(self, pa_id: str) -> dict[str, Any]:
        r = self.app.get(f"/v1/pa/{pa_id}")
        assert r.status_code == 200
        return r.json()  # type: ignore[no-any-return]

    def worklist(self) -> dict[str, str]:
        """PA id -> its worklist group, for the PAs on "Needs you"."""
        items = self.app.get("/v1/console/worklist").json()["items"]
        return {i["pa"]["pa_id"]: i["attention"] for i in items if i["pa"]}

    def item(self, pa_id: str) -> dict[str, Any]:
        items = self.app.get("/v1/console/worklist").json()["items"]
        return next(i for i in items if i["pa"] and i["pa"]["pa_id"] == pa_id)

    def acknowledge(self, pa_id: str) -> None:
        assert self.app.post(f"/v1/pa/{pa_id}/acknowledge").status_code == 200

    def feed(self, since: str = "0") -> list[dict[str, Any]]:
        return self.app.get("/v1/pa", params={"since": since}).json()["pas"]  # type: ignore[no-any-return]

    def close(self) -> None:
        self.app.services.close()
        self.client.close()
        self.store.close()


@pytest.fixture
def hook() -> Iterator[FakeHttpServer]:
    with FakeHttpServer(Reply(status=200, body=b"{}")) as server:
        yield server


@pytest.fixture
def pharmacy(store_url: str, tmp_path: Path, hook: FakeHttpServer) -> Iterator[Pharmacy]:
    p = Pharmacy(store_url, tmp_path, hook.url + "/hook")
    try:
        yield p
    finally:
        p.close()


def expiring(hook: FakeHttpServer) -> list[Any]:
    """The pa.expiring webhooks received (the callbacks' pa.changed ones aside)."""
    return [r for r in hook.requests if r.headers.get("pa-bridge-event") == "pa.expiring"]


def _approved(end: str) -> dict[str, Any]:
    return {"authorization_period": {"effective_date": day(-265), "expiration_date": end}}


def test_the_expiring_window_its_reminder_webhook_feed_entry_and_renewal(
    pharmacy: Pharmacy, hook: FakeHttpServer
) -> None:
    p = pharmacy
    p.callback("EX28AA", "PA Response", "Favorable", **_approved(us(100)))  # MM/DD/YYYY
    p.callback("EX28BB", "PA Response", "Favorable", **_approved(day(200) + "T23:59:59-04:00"))
    assert p.pa("EX28AA")["expires_at"] == day(100)
    assert p.pa("EX28BB")["expires_at"] == day(200)

    # months ahead: approved (to acknowledge), not expiring; nothing to announce
    assert p.worklist() == {"EX28AA": "approved", "EX28BB": "approved"}
    assert p.watch.scan() == 0
    p.acknowledge("EX28AA")
    p.acknowledge("EX28BB")
    assert p.worklist() == {}

    # 20 days before the end: "Expiring soon", saying what to do
    p.clock.t = at(80)
    cursor = p.app.get("/v1/pa").json()["cursor"]
    assert p.worklist() == {"EX28AA": "expiring"}
    item = p.item("EX28AA")["pa"]
    assert item["days_left"] == 20 and item["expires_at"] == day(100)
    assert "renewal" in item["next_step"] and item["label"] == "Approval ends soon"

    # announced once: a feed entry, a history entry, one signed pa.expiring webhook
    assert p.watch.scan() == 1
    assert p.watch.scan() == 0
    entries = p.feed(cursor)
    assert [(e["pa_id"], e["expiring"]) for e in entries] == [("EX28AA", True)]
    history = p.pa("EX28AA")["history"]
    assert history[-1]["source"] == "expiring" and day(100) in history[-1]["note"]
    p.app.services.outbox.drain_once()
    wait_until(lambda: len(expiring(hook)) == 1, what="the pa.expiring webhook")
    (req,) = expiring(hook)
    body = json.loads(req.body)
    assert req.headers["pa-bridge-event"] == "pa.expiring" == body["event"]
    assert verify(SECRET, req.body, req.headers["pa-bridge-signature"])
    assert body["pa_id"] == "EX28AA" and body["cursor"] == entries[0]["cursor"]
    assert body["change"]["source"] == "expiring" and body["pa"]["expiring"] is True
    assert body["pa"]["expires_at"] == day(100)
    doc = document()
    schema = {**doc["components"]["schemas"]["WebhookChange"], "components": doc["components"]}
    assert [e.message for e in jsonschema_rs.Draft202012Validator(schema).iter_errors(body)] == []

    # acknowledged like any other entry; back a week before the end
    p.acknowledge("EX28AA")
    assert p.worklist() == {}
    p.clock.t = at(92)
    assert p.worklist() == {}  # 8 days left: not yet
    p.clock.t = at(93)
    assert p.worklist() == {"EX28AA": "expiring"}
    page = p.app.get("/v1/console/pa/EX28AA").json()
    assert page["pa"]["attention"] == "expiring" and page["pa"]["acknowledged"] is None
    assert p.watch.scan() == 0  # announced once, not at the reminder

    # a renewal PA: linked both ways, and the entry closes
    p.callback(
        "EX28RR",
        "New",
        is_renewal="true",
        associated_requests={"request_being_renewed": {"id": "EX28AA", "href": "x"}},
    )
    renewal, renewed = p.pa("EX28RR"), p.pa("EX28AA")
    assert renewal["renewal_of"] == "EX28AA" and renewed["renewed_by"] == "EX28RR"
    assert renewed["expiring"] is False
    assert "EX28AA" not in p.worklist()
    page = p.app.get("/v1/console/pa/EX28AA").json()["pa"]
    assert page["renewed_by"] == "EX28RR" and page["attention"] is None
    assert p.app.get("/v1/console/pa/EX28RR").json()["pa"]["renewal_of"] == "EX28AA"

    # a new end date is announced again when it comes close in its turn
    p.clock.t = at(185)
    assert p.watch.scan() == 1  # EX28BB
    p.callback("EX28BB", "PA Response", "Favorable", **_approved(day(565)))
    assert p.pa("EX28BB")["expiring"] is False and p.pa("EX28BB")["expires_at"] == day(565)
    assert p.watch.scan() == 0
    p.clock.t = at(550)
    assert p.watch.scan() == 1
    p.app.services.outbox.drain_once()
    wait_until(lambda: len(expiring(hook)) == 3, what="two more pa.expiring webhooks")
    events = [json.loads(r.body)["pa_id"] for r in expiring(hook)]
    assert events == ["EX28AA", "EX28BB", "EX28BB"]


def test_what_is_not_announced(pharmacy: Pharmacy) -> None:
    """Denied, deleted, not approved yet, without an end date, or ended before the
    window: no "Expiring soon", no webhook."""
    p = pharmacy
    p.callback("EX28DD", "PA Response", "Unfavorable", **_approved(day(9)))
    p.callback("EX28PP", "PA Request", None, **_approved(day(9)))
    p.callback("EX28NN", "PA Response", "Favorable")  # no period
    p.callback("EX28XX", "PA Response", "Favorable", **_approved("not a date"))
    p.callback("EX28OO", "PA Response", "Favorable", **_approved(day(-40)))  # long ended
    p.callback(
        "EX28DL",
        "PA Response",
        "Favorable",
        events=[{"type": "DELETE", "time": "2027-05-01T10:00:00Z"}],
        **_approved(day(9)),
    )
    assert p.watch.scan() == 0
    assert "expiring" not in p.worklist().values()


def test_a_lapsed_approval_stays_until_acknowledged(pharmacy: Pharmacy) -> None:
    p = pharmacy
    p.callback("EX28LA", "PA Response", "Favorable", **_approved(day(9)))
    p.acknowledge("EX28LA")
    p.clock.t = at(14)  # ended 5 days ago, never announced (the daemon was down)
    assert p.worklist() == {"EX28LA": "expiring"}
    assert p.item("EX28LA")["pa"]["days_left"] == -5
    assert p.watch.scan() == 0  # no webhook for an approval that has already ended
    p.acknowledge("EX28LA")
    assert p.worklist() == {}


@pytest.mark.parametrize(
    ("value", "day"),
    [
        ("2027-06-15", "2027-06-15"),
        ("2027-06-15T23:59:59Z", "2027-06-15"),
        ("2027-06-15T00:00:00-05:00", "2027-06-15"),
        (" 6/5/2027 ", "2027-06-05"),
        ("06/15/2027", "2027-06-15"),
        ("2027-02-30", None),
        ("13/01/2027", None),
        ("", None),
        (None, None),
        (20270615, None),
        ("soon", None),
    ],
)
def test_the_end_date_as_the_service_may_write_it(value: Any, day: str | None) -> None:
    assert expiry_date(value) == day


def test_the_sandbox_renewal_reaches_a_daemon_and_links_both_ways(make_daemon: Any) -> None:
    d = make_daemon()
    from tests import builders as b

    api = httpx.Client(base_url=d.intake_server.url, timeout=20)
    try:
        claim = api.post(
            "/v1/claims",
            json={
                "request": b.request_bytes().decode("latin-1"),
                "response": b.response_bytes([b.REJECT_MR]).decode("latin-1"),
            },
        ).json()
        pa_id = api.post(f"/v1/claims/{claim['claim_id']}/pa").json()["pa_id"]
        wait_until(lambda: api.get(f"/v1/pa/{pa_id}").json()["expires_at"], what="approved")
        r = httpx.post(f"{d.sandbox.url}/sandbox/pas/{pa_id}/renew")
        assert r.status_code == 200
        renewal = r.json()["pa_id"]
        wait_until(lambda: api.get(f"/v1/pa/{pa_id}").json()["renewed_by"] == renewal,
                   what="the renewal's callback")  # fmt: skip
        assert api.get(f"/v1/pa/{renewal}").json()["renewal_of"] == pa_id
        assert httpx.post(f"{d.sandbox.url}/sandbox/pas/NOSUCH/renew").status_code == 404
    finally:
        api.close()


def test_the_upgrade_reads_the_end_date_of_approvals_kept_before(store: Any) -> None:
    """m008 fills ``expires_at`` from the period callbacks kept in ``details_json``; the
    two engines' steps (Python on SQLite, SQL on PostgreSQL) read the same dates."""
    from pa_bridge.store import now_iso, pas
    from pa_bridge.store.migrations import backfill_expires_at
    from pa_bridge.store.pg_migrations import PG_MIGRATIONS

    kept = {
        "UP28A": "2027-06-15T00:00:00-05:00",
        "UP28B": "06/15/2027",
        "UP28C": "6/5/2027",
        "UP28D": "soon",
        "UP28E": None,
    }

    def job(db: Any) -> None:
        for pa_id, end in kept.items():
            details = {"drug_name": "X"} if end is None else {"expiration_date": end}
            state: pas.CallbackState = {
                "workflow_status": "PA Response", "plan_outcome": "Favorable",
                "status_time": None, "events_json": "[]", "deleted": 0, "fax_failed": 0,
                "links_json": "{}", "urls_json": "[]", "details_json": json.dumps(details),
                "fax_failed_latest": 0, "news_seq": 0,
            }  # fmt: skip
            pas.insert_from_callback(db, pa_id, state, now=now_iso(), seq=store.next_seq(db))
        db.conn.execute("UPDATE pas SET expires_at = NULL")  # as before m008
        if store.dialect == "postgresql":
            (step,) = [sql for name, sql in PG_MIGRATIONS if name == "m008_reconcile_and_expiry"]
            db.conn.execute(step[-1])
        else:
            backfill_expires_at(db)

    store.write(job)
    got = {r["id"]: r["expires_at"] for r in store.query("SELECT id, expires_at FROM pas")}
    assert got == {
        "UP28A": "2027-06-15",
        "UP28B": "2027-06-15",
        "UP28C": "2027-06-05",
        "UP28D": None,
        "UP28E": None,
    }
