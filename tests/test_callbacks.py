"""The callback receiver at the level of its parts, in this process: its Flask app on a
loopback HTTPS server (a test CA from trustme) and the ingest on a temporary store of
each engine. The daemon's listener (its start and stop) is tests/test_callback_front.py."""

from __future__ import annotations

import functools
import json
import sqlite3
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import trustme
from flask.testing import FlaskClient

from pa_bridge.app import create_app, make_client
from pa_bridge.callbacks.ingest import (
    CallbackIntake,
    CallbackReceiver,
    UnauthorizedLog,
    parse_callback,
)
from pa_bridge.callbacks.receiver import create_callback_app
from pa_bridge.client import PaServiceClient
from pa_bridge.config import Settings, load_settings
from pa_bridge.metrics import Metrics
from pa_bridge.pa_rules import is_newer
from pa_bridge.service import UseCases
from pa_bridge.store import PgStore, Store
from pa_bridge.wsgi import DEFAULT_THREADS, WsgiServer, server_tls_context
from tests.builders import PATIENT_FIRST, PATIENT_LAST
from tests.real_shapes import callback_body, delete_event
from tests.support import NO_SERVICE, wait_until

AUTH = ("pa-service", "cb-secret-7731")


def _body(
    pa_id: str, status: str, outcome: str | None = None, at: str | None = None, **extra: Any
) -> bytes:
    req: dict[str, Any] = {
        "id": pa_id,
        "workflow_status": status,
        "plan_outcome": outcome,
        "events": [],
    }
    if at:
        req["updated_at"] = at
    req.update(extra)
    return json.dumps({"request": req}).encode()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


class Listener:
    """The callback receiver as the daemon runs it: its app and server on loopback with
    TLS, the receiver and ``CallbackIntake`` on a temporary store, and the intake app
    on the same store and metrics, to read PAs."""

    def __init__(self, settings: Settings, store: Store, verify: ssl.SSLContext) -> None:
        self.settings, self.store = settings, store
        self.metrics = Metrics()
        self._made: list[tuple[PaServiceClient, UseCases]] = []
        service = CallbackIntake(store, forward=False)  # forwarding: the daemon's test
        self.receiver = CallbackReceiver(service, self.metrics)
        cb = settings.callbacks
        app = create_callback_app(
            self.receiver,
            username=cb.username,
            password=settings.secret(cb.password) if cb.password else "",
            max_body_bytes=cb.max_body_bytes,
        )
        assert cb.tls_cert is not None and cb.tls_key is not None
        tls = server_tls_context(cb.tls_cert, cb.tls_key)
        self.server = WsgiServer(app, name="callbacks", ssl_context=tls).start()
        self.verify = verify
        self.http = httpx.Client(base_url=self.server.url, verify=verify, timeout=10)
        self.post, self.get, self.base_url = self.http.post, self.http.get, self.http.base_url

    @functools.cached_property
    def api(self) -> FlaskClient:
        """The intake app on the same store and metrics (built when a test reads PAs:
        its clients cost more than the rest of the set-up)."""
        client = make_client(self.settings)
        app = create_app(self.settings, store=self.store, client=client, metrics=self.metrics)
        self._made.append((client, app.extensions["pa_bridge"]))
        return app.test_client()

    @property
    def services(self) -> UseCases:
        self.api  # noqa: B018 - built on first use
        return self._made[0][1]

    def stop(self) -> None:
        """What the daemon's stop does for the listener: the server (its requests in
        flight finish), then the sum of a spell of 401s."""
        self.http.close()
        self.server.stop()
        self.receiver.unauthorized_log.flush()

    def close(self) -> None:
        self.stop()
        for client, services in self._made:
            services.close()
            client.close()


def _listener(ca: trustme.CA, tmp_path: Path, store: Store, **callbacks: Any) -> Iterator[Listener]:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    for extra in cert.cert_chain_pems[1:]:
        extra.write_to_path(str(cert_path), append=True)
    cert.private_key_pem.write_to_path(str(key_path))
    settings = load_settings(
        callbacks={
            "tls_cert": str(cert_path),
            "tls_key": str(key_path),
            "username": AUTH[0],
            "password": AUTH[1],
            "max_body_bytes": 4096,
            **callbacks,
        },
        sandbox={"enabled": False},
        service=NO_SERVICE,
        storage={"path": str(tmp_path / "unused.sqlite3")},  # the store is given
    )
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    listener = Listener(settings, store, ctx)
    try:
        yield listener
    finally:
        listener.close()


@pytest.fixture
def listener(ca: trustme.CA, tmp_path: Path, store_url: str) -> Iterator[Listener]:
    """On each engine in turn."""
    if store_url.startswith("postgresql://"):  # the same short lock timeout
        store: Store = PgStore(store_url, lock_timeout_ms=200)
    else:  # a short busy timeout: the lock test's 503 comes at once
        store = Store(store_url, busy_timeout_ms=200)
    try:
        yield from _listener(ca, tmp_path, store)
    finally:
        store.close()


@pytest.fixture
def sqlite_listener(ca: trustme.CA, tmp_path: Path) -> Iterator[Listener]:
    """SQLite only: for what no engine changes (401s, concurrency) or what is about the
    file (its lock)."""
    with Store(tmp_path / "pa-bridge.sqlite3", busy_timeout_ms=200) as store:
        yield from _listener(ca, tmp_path, store)


def _count(listener: Listener, table: str) -> int:
    sql = f"SELECT count(*) AS n FROM {table}"  # noqa: S608 - a fixed table name from the test
    return int(listener.store.query(sql)[0]["n"])


def _pa(listener: Listener, pa_id: str) -> dict[str, Any]:
    return listener.services.pas.get_pa(pa_id).model_dump()


def test_tls_is_real_and_at_least_1_2(listener: Listener) -> None:
    assert listener.base_url.scheme == "https"
    r = listener.post("/callbacks/pharmacy", content=_body("AB12CD", "New"), auth=AUTH)
    assert r.status_code == 200
    with pytest.raises(httpx.ConnectError):  # a client that does not trust our test CA
        httpx.post(f"{listener.base_url}/callbacks/pharmacy", content=b"{}")
    # the listener's context refuses anything older than TLS 1.2 ...
    cb = listener.settings.callbacks
    assert cb.tls_cert is not None and cb.tls_key is not None
    context = server_tls_context(cb.tls_cert, cb.tls_key)
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    # ... and a real handshake negotiates 1.2 or newer
    import socket

    host, port = listener.server.address
    ctx = ssl.create_default_context(cafile=None)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((host, port), timeout=5) as raw, ctx.wrap_socket(raw) as tls:
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


@pytest.mark.parametrize("auth", [None, ("pa-service", "wrong"), ("other", "cb-secret-7731")])
def test_wrong_or_missing_credentials_get_401_and_nothing_is_stored(
    listener: Listener, auth: Any
) -> None:
    r = listener.post("/callbacks/pharmacy", content=_body("AB12CD", "New"), auth=auth)
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "unauthorized"
    assert _count(listener, "callbacks") == 0 and _count(listener, "dead_letters") == 0


def test_duplicate_is_acknowledged_and_stored_once(listener: Listener) -> None:
    body = _body("AB12CD", "PA Request", at="2026-11-23T10:00:01Z")
    for _ in range(3):
        r = listener.post("/callbacks/pharmacy", content=body, auth=AUTH)
        assert r.status_code == 200
    assert r.json()["status"] == "duplicate"
    assert _count(listener, "callbacks") == 1
    # same content in another key order is the same callback
    reordered = json.dumps({"request": dict(reversed(list(json.loads(body)["request"].items())))})
    assert (
        listener.post("/callbacks/pharmacy", content=reordered, auth=AUTH).json()["status"]
        == "duplicate"
    )
    # a delivery id, when the body has one, is the key
    for _ in range(2):
        listener.post(
            "/callbacks/pharmacy", content=_body("AB12CD", "New", delivery_id="d-1"), auth=AUTH
        )
    assert _count(listener, "callbacks") == 2


def test_out_of_order_never_moves_status_backwards(listener: Listener) -> None:
    post = lambda b: listener.post("/callbacks/pharmacy", content=b, auth=AUTH)  # noqa: E731
    assert (
        post(_body("ZZ99ZZ", "PA Response", "Favorable", at="2026-11-23T10:00:03Z")).status_code
        == 200
    )
    assert post(_body("ZZ99ZZ", "New", at="2026-11-23T10:00:01Z")).status_code == 200
    assert post(_body("ZZ99ZZ", "PA Request", at="2026-11-23T10:00:02Z")).status_code == 200
    pa = _pa(listener, "ZZ99ZZ")
    assert (pa["workflow_status"], pa["plan_outcome"]) == ("PA Response", "Favorable")
    assert pa["matched"] is False  # we did not start it: kept as unmatched, not refused
    arrival = [h["workflow_status"] for h in pa["history"]]
    assert arrival == ["PA Response", "New", "PA Request"]
    by_event = [h["workflow_status"] for h in sorted(pa["history"], key=lambda h: h["event_time"])]
    assert by_event == ["New", "PA Request", "PA Response"]


def test_delete_and_fax_failure_events_are_visible(listener: Listener) -> None:
    events = [{"type": "REQUEST_FAX_FAILED", "time": "2026-11-23T10:00:05Z"}]
    listener.post(
        "/callbacks/pharmacy", content=_body("QQ11QQ", "Sent to Plan", events=events), auth=AUTH
    )
    events.append(
        {"type": "DELETE", "time": "2026-11-23T10:00:09Z", "remote_user": {"display_name": "x"}}
    )
    listener.post(
        "/callbacks/pharmacy", content=_body("QQ11QQ", "Sent to Plan", events=events), auth=AUTH
    )
    pa = _pa(listener, "QQ11QQ")
    assert pa["fax_failed"] and pa["deleted"]
    assert [e["type"] for e in pa["events"]] == ["REQUEST_FAX_FAILED", "DELETE"]
    assert "remote_user" not in json.dumps(pa["events"])


def test_bare_object_and_added_fields_are_accepted(listener: Listener) -> None:
    bare = json.dumps({"id": "BARE01", "workflow_status": "New", "some_future_field": {"x": 1}})
    assert (
        listener.post("/callbacks/pharmacy", content=bare, auth=AUTH).json()["status"] == "stored"
    )
    assert _pa(listener, "BARE01")["workflow_status"] == "New"


@pytest.mark.parametrize(
    "body", [b"not json", b"[1,2]", b'{"request": {"workflow_status": "New"}}', b"\xff\xfe"]
)
def test_unexpected_bodies_are_dead_lettered_and_acknowledged(
    listener: Listener, body: bytes
) -> None:
    r = listener.post("/callbacks/pharmacy", content=body, auth=AUTH)
    assert r.status_code == 200 and r.json()["status"] == "dead_letter"
    rows = listener.store.query("SELECT body FROM dead_letters")
    assert [bytes(r["body"]) for r in rows] == [body]


def test_oversized_body_is_413(listener: Listener) -> None:
    r = listener.post("/callbacks/pharmacy", content=b"{" + b" " * 8000 + b"}", auth=AUTH)
    assert r.status_code == 413
    assert _count(listener, "callbacks") == 0


def test_uncommittable_write_gets_503_and_the_listener_stays_up(listener: Listener) -> None:
    """Another process holds the database past the busy timeout (200 ms here): SQLite's
    write lock, or on PostgreSQL the tables a callback writes, locked by another
    session. The callback is answered 503 (the service retries), nothing is half
    stored, and the retry lands once the lock is gone."""
    store = listener.store
    other: Any
    if store.dialect == "sqlite":
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
    else:
        other = psycopg.connect(store.url, autocommit=True)
        other.execute("BEGIN")
        other.execute("LOCK TABLE feed_clock, callbacks, pas IN EXCLUSIVE MODE")
    try:
        r = listener.post("/callbacks/pharmacy", content=_body("LOCK01", "New"), auth=AUTH)
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "storage_unavailable"
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert _count(listener, "callbacks") == 0
    r = listener.post("/callbacks/pharmacy", content=_body("LOCK01", "New"), auth=AUTH)
    assert r.status_code == 200 and r.json()["status"] == "stored"  # the retry lands
    assert _count(listener, "callbacks") == 1
    assert _pa(listener, "LOCK01")["workflow_status"] == "New"


def test_ordering_rule() -> None:
    t1, t2 = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00+00:00"
    # workflow order first: a late New never hides a PA Response, whatever its time
    assert not is_newer((t2, "New", None), (t1, "PA Response", "Favorable"))
    assert not is_newer((None, "New", None), (None, "PA Request", None))
    assert is_newer((None, "PA Response", "Favorable"), (None, "PA Response", "Pending"))
    # then event times, on the same place in the workflow
    assert not is_newer((t1, "PA Response", "Pending"), (t2, "PA Response", "Pending"))
    assert is_newer((t2, "Sent to Plan", None), (t1, "Sent to Plan", None))
    # then arrival: the later one wins (no updated_at, no parseable time: the evidence)
    assert is_newer((None, "PA Response", "Pending"), (None, "PA Response", "Pending"))
    assert is_newer(("time", "Sent to Plan", None), (t1, "Sent to Plan", None))
    # a status we do not know is ordered by time and arrival only
    assert is_newer((None, "Some Future Status", None), (None, "Archived", "Favorable"))
    assert is_newer((None, "New", None), (None, None, None))


def test_the_real_body_is_accepted_and_a_callback_only_pa_opens_at_its_token_link(
    listener: Listener,
) -> None:
    """valid_request.json's shape: wrapped, strings, null outcome, events [], no
    updated_at, html_url, tokens, pdf_url, extra fields."""
    body = callback_body("CLRQ01", "New", None)
    r = listener.post("/callbacks/pharmacy", content=body, auth=AUTH)
    assert r.status_code == 200 and r.json()["status"] == "stored"
    pa = _pa(listener, "CLRQ01")
    token_link = "https://dashboard.example.test/requests/CLRQ01?token_id=tok0synthetic0a1b2c3"
    assert (pa["workflow_status"], pa["plan_outcome"], pa["matched"]) == ("New", None, False)
    assert pa["url"] == token_link and pa["urls"] == [token_link]
    assert pa["links"]["html_url"] == "https://dashboard.example.test/requests/CLRQ01"
    assert pa["links"]["pdf_url"].endswith("/api/requests/CLRQ01/download")
    opened = listener.api.get("/v1/pa/CLRQ01/open")
    console = listener.api.get("/v1/console/worklist").get_json()
    assert opened.status_code == 302 and opened.headers["location"] == token_link
    # the console's worklist links it too
    (row,) = [p for p in console["pas"] if p["pa_id"] == "CLRQ01"]
    assert row["url"] == token_link and row["open_url"] == "/v1/pa/CLRQ01/open"
    stored = listener.store.query("SELECT links_json FROM pas WHERE id = 'CLRQ01'")
    for phi in (PATIENT_FIRST, PATIENT_LAST):
        assert phi not in stored[0]["links_json"]


def test_the_real_bodies_move_a_pa_in_workflow_order_without_updated_at(
    listener: Listener,
) -> None:
    post = lambda b: listener.post("/callbacks/pharmacy", content=b, auth=AUTH)  # noqa: E731
    for status, outcome in [("PA Response", "Favorable"), ("New", None), ("PA Request", None)]:
        assert post(callback_body("ORD001", status, outcome)).status_code == 200
    pa = _pa(listener, "ORD001")
    assert (pa["workflow_status"], pa["plan_outcome"]) == ("PA Response", "Favorable")
    assert [h["workflow_status"] for h in pa["history"]] == ["PA Response", "New", "PA Request"]
    # the evidence's DELETE: same status, an event whose time is not a time
    assert post(callback_body("ORD001", "PA Response", "Favorable", events=[delete_event()]))
    pa = _pa(listener, "ORD001")
    assert pa["deleted"] and [e["type"] for e in pa["events"]] == ["DELETE"]
    assert (pa["workflow_status"], pa["plan_outcome"]) == ("PA Response", "Favorable")
    assert "SYN USER" not in json.dumps(pa)


def test_string_and_number_values_are_read_either_way() -> None:
    doc = json.loads(callback_body("NUM001", "New"))
    doc["request"]["id"] = 123456
    doc["request"]["is_epa"] = "true"
    doc["request"]["attachments_included"] = "1"
    doc["request"]["plan_outcome"] = "null"
    cb = parse_callback(json.dumps(doc).encode())
    assert (cb.pa_id, cb.workflow_status, cb.plan_outcome, cb.event_time) == (
        "123456",
        "New",
        None,
        None,
    )
    assert cb.links["token_urls"] and cb.match == {
        "bin": "610014",
        "pcn": "SYNPCN",
        "group_id": "SYNGRP01",
    }


def test_dedupe_key_prefers_delivery_id() -> None:
    a = parse_callback(_body("X", "New", delivery_id="7"))
    b = parse_callback(_body("X", "PA Request", delivery_id="7"))
    assert a.dedupe_key == b.dedupe_key == "delivery:7"
    assert parse_callback(_body("X", "New")).dedupe_key.startswith("sha256:")


def test_callback_metrics(listener: Listener) -> None:
    listener.post("/callbacks/pharmacy", content=_body("MM11MM", "New"), auth=AUTH)
    listener.post("/callbacks/pharmacy", content=_body("MM11MM", "New"), auth=AUTH)
    listener.post("/callbacks/pharmacy", content=b"nope", auth=AUTH)
    listener.post("/callbacks/pharmacy", content=b"{}", auth=None)
    text = listener.api.get("/metrics").get_data(as_text=True)
    for result in ("stored", "duplicate", "dead_letter", "unauthorized"):
        assert f'pa_bridge_callbacks_total{{result="{result}"}} 1.0' in text
    assert "pa_bridge_dead_letters 1.0" in text


def test_forward_webhook_is_called_through_the_queue(make_daemon: Any) -> None:
    """The dispensing system's webhook gets each change, retried until it answers 2xx."""
    from flask import Flask, request

    from pa_bridge.runtime import WsgiServer
    from tests.support import wait_until

    got: list[dict[str, Any]] = []
    answers = iter([500])  # the first delivery fails; the queue retries

    hook = Flask("dispensing-webhook")

    @hook.post("/hook")
    def receive() -> tuple[str, int]:
        status = next(answers, 200)
        if status == 200:
            got.append(request.get_json())
        return "", status

    server = WsgiServer(hook, name="hook")
    server.start()
    try:
        d = make_daemon(
            callbacks={"forward_url": f"{server.url}/hook"},
            sandbox={"enabled": False},
            service=NO_SERVICE,
        )
        url = f"{d.callback_server.url}/callbacks/pharmacy"
        assert (
            httpx.post(url, content=_body("WH01AA", "PA Response", "Favorable")).status_code == 200
        )
        wait_until(lambda: got, what="webhook delivery")
        pa = got[0]["pa"]
        assert (pa["pa_id"], pa["workflow_status"], pa["plan_outcome"]) == (
            "WH01AA",
            "PA Response",
            "Favorable",
        )
        # the daemon marks the item delivered once it has read the webhook's answer
        items = wait_until(
            lambda: [i for i in d.use_cases.outbox.list() if i["status"] == "delivered"],
            what="queue item marked delivered",
        )
        assert items[0]["kind"] == "webhook"
        assert items[0]["attempts"] == 2
    finally:
        server.stop()


def test_event_times_are_compared_as_instants_not_strings() -> None:
    """Issue 19: compared as text, these moved a PA back (and lost its outcome)."""
    cur = ("2026-01-01T10:00:00.500Z", "Sent to Plan", None)
    # half a second earlier, written without fractions: older, although "Z" > "."
    assert not is_newer(("2026-01-01T10:00:00Z", "Sent to Plan", None), cur)
    # 14:00 at +05:00 is 09:00Z: older, although "14" > "10"
    assert not is_newer(
        ("2026-01-01T14:00:00+05:00", "Sent to Plan", None),
        ("2026-01-01T10:00:00Z", "Sent to Plan", None),
    )
    # +00:00 and Z: the same instant, so arrival decides
    assert is_newer(
        ("2026-01-01T10:00:00+00:00", "Sent to Plan", None),
        ("2026-01-01T10:00:00Z", "Sent to Plan", None),
    )
    # and a later instant written with an offset is newer
    assert is_newer(
        ("2026-01-01T06:00:01-04:00", "Sent to Plan", None),
        ("2026-01-01T10:00:00Z", "Sent to Plan", None),
    )


def _pieces(data: bytes, size: int = 1000) -> Any:
    """A body httpx sends with ``Transfer-Encoding: chunked`` (no Content-Length)."""
    for i in range(0, len(data), size):
        yield data[i : i + size]


def test_chunked_body_over_the_limit_is_413_and_nothing_is_stored(listener: Listener) -> None:
    # issue 19: cut at the limit, dead-lettered and answered 200 before; the service
    # never retried and the status change was lost. Over the limit is 413 however framed.
    big = _body("CH11CH", "PA Response", "Favorable", notes="x" * 8000)
    r = listener.post("/callbacks/pharmacy", content=_pieces(big), auth=AUTH)
    assert r.request.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in r.request.headers
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "body_too_large"
    assert set(r.json()["error"]) == {"code", "message", "detail"}
    assert _count(listener, "callbacks") == 0 and _count(listener, "dead_letters") == 0
    # the same client, on a new connection, is served normally afterwards
    small = _body("CH11CH", "PA Response", "Favorable")
    r = listener.post("/callbacks/pharmacy", content=_pieces(small, 10), auth=AUTH)
    assert r.status_code == 200 and r.json() == {"status": "stored", "pa_id": "CH11CH"}
    assert _pa(listener, "CH11CH")["plan_outcome"] == "Favorable"


def _unauthorized_lines(caplog: pytest.LogCaptureFixture) -> list[Any]:
    return [r for r in caplog.records if getattr(r, "event", "").startswith("callback.unauth")]


def test_unauthenticated_attempts_are_logged_once_then_summed(
    sqlite_listener: Listener, caplog: pytest.LogCaptureFixture
) -> None:
    # issue 19: each attempt wrote a warning line, so a flood filled the journal;
    # now the first is logged, then one summary line per interval; metrics count all.
    # Nothing is stored for a 401, so one engine is enough.
    listener = sqlite_listener
    caplog.set_level("INFO", logger="pa_bridge")
    started = time.monotonic()
    for _ in range(1000):
        assert listener.post("/callbacks/pharmacy", content=b"{}").status_code == 401
    assert time.monotonic() - started < 60  # within one interval (60 s)
    lines = _unauthorized_lines(caplog)
    assert [r.event for r in lines] == ["callback.unauthorized"]
    assert lines[0].levelname == "WARNING" and lines[0].fields["remote"] == "127.0.0.1"
    text = listener.api.get("/metrics").get_data(as_text=True)
    assert 'pa_bridge_callbacks_total{result="unauthorized"} 1000.0' in text
    listener.stop()  # a graceful stop writes the sum of the spell under way
    lines = _unauthorized_lines(caplog)
    assert [r.event for r in lines] == ["callback.unauthorized", "callback.unauthorized_repeated"]
    assert lines[1].fields["count"] == 999 and lines[1].fields["remotes"] == ["127.0.0.1"]


def test_the_daemon_serves_tls_and_credentials_and_its_stop_sums_the_401s(
    ca: trustme.CA, make_daemon: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon's wiring of the same parts: the receiver gets the TLS files and the
    credentials, counts on the intake's metrics, and ``Daemon.stop`` writes the sum of
    a spell of 401s."""
    cert = ca.issue_cert("127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    d = make_daemon(
        callbacks={
            "tls_cert": str(tmp_path / "cert.pem"),
            "tls_key": str(tmp_path / "key.pem"),
            "username": AUTH[0],
            "password": AUTH[1],
        },
        sandbox={"enabled": False},
        service=NO_SERVICE,
    )
    caplog.set_level("INFO", logger="pa_bridge")
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    assert d.callback_server.url.startswith("https://")
    with httpx.Client(base_url=d.callback_server.url, verify=ctx, timeout=10) as c:
        r = c.post("/callbacks/pharmacy", content=_body("DW11DW", "New"), auth=AUTH)
        assert r.status_code == 200 and r.json() == {"status": "stored", "pa_id": "DW11DW"}
        for _ in range(3):
            assert c.post("/callbacks/pharmacy", content=b"{}").status_code == 401
    text = httpx.get(f"{d.intake_server.url}/metrics").text
    assert 'pa_bridge_callbacks_total{result="stored"} 1.0' in text
    assert 'pa_bridge_callbacks_total{result="unauthorized"} 3.0' in text
    assert [r.event for r in _unauthorized_lines(caplog)] == ["callback.unauthorized"]
    d.stop()
    lines = _unauthorized_lines(caplog)
    assert [r.event for r in lines] == ["callback.unauthorized", "callback.unauthorized_repeated"]
    assert lines[1].fields["count"] == 2


def test_unauthorized_log_sums_a_spell_when_its_interval_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="pa_bridge")
    log = UnauthorizedLog(interval_s=0.3)
    for k in range(30):
        log.attempt(f"192.0.2.{k}")

    def events() -> list[Any]:
        return [r for r in caplog.records if getattr(r, "event", "").startswith("callback.unauth")]

    wait_until(lambda: len(events()) == 2, timeout=5, what="the summary line")
    first, summary = events()
    assert first.event == "callback.unauthorized" and first.fields["remote"] == "192.0.2.0"
    assert summary.event == "callback.unauthorized_repeated" and summary.fields["count"] == 29
    assert len(summary.fields["remotes"]) == UnauthorizedLog.MAX_REMOTES
    log.attempt("192.0.2.99")  # a new spell starts with a line of its own
    assert events()[-1].event == "callback.unauthorized"
    log.flush()
    assert len(events()) == 3  # nothing was summed in it


def test_the_listener_answers_other_paths_and_methods_in_the_error_shape(
    listener: Listener,
) -> None:
    r = listener.get("/callbacks/pharmacy", auth=AUTH)
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert r.headers["allow"] == "POST"
    r = listener.post("/elsewhere", content=b"{}", auth=AUTH)
    assert r.status_code == 404 and set(r.json()["error"]) == {"code", "message", "detail"}
    assert listener.get("/healthz").json() == {"status": "ok"}
    for header in ("Basic !!!notbase64", "Bearer x", "Basic " + "cGEtc2VydmljZQ==", ""):
        r = listener.post(
            "/callbacks/pharmacy", content=_body("HD11HD", "New"), headers={"Authorization": header}
        )
        assert r.status_code == 401, header
        assert r.headers["www-authenticate"].startswith("Basic")
    assert _count(listener, "callbacks") == 0 and _count(listener, "dead_letters") == 0


def test_more_concurrent_callbacks_than_the_receiver_has_threads_all_commit(
    sqlite_listener: Listener,
) -> None:
    # the receiver runs DEFAULT_THREADS callbacks at once; three times as many senders
    # at once must all be answered 200 after their commit: the rest wait their turn,
    # none is refused
    listener = sqlite_listener
    senders, each = 3 * DEFAULT_THREADS, 5
    statuses: list[int] = []
    start = threading.Barrier(senders)

    def send(k: int) -> None:
        with httpx.Client(
            base_url=listener.base_url, verify=listener.verify, auth=AUTH, timeout=30
        ) as c:
            start.wait()
            for n in range(each):
                body = _body(f"PT{k}", "New", delivery_id=f"t-{k}-{n}")
                statuses.append(c.post("/callbacks/pharmacy", content=body).status_code)

    threads = [threading.Thread(target=send, args=(k,)) for k in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert statuses == [200] * (senders * each)
    assert _count(listener, "callbacks") == senders * each


def test_a_callback_that_fails_gets_a_500_and_the_receiver_keeps_serving(
    tmp_path: Path,
) -> None:
    with Store(tmp_path / "db.sqlite3") as store:
        # a damaged schema makes applying a callback fail with an error that is not
        # the database being unavailable; a dead letter does not touch that table
        store.write(lambda db: db.execute("DROP TABLE pa_history"))
        receiver = CallbackReceiver(CallbackIntake(store, forward=False), Metrics())
        failed = receiver.receive(_body("PF4", "New", delivery_id="d-1"), "application/json")
        kept = receiver.receive(b"not json", "text/plain")
        assert failed[0] == 500 and json.loads(failed[1])["error"]["code"] == "internal_error"
        assert kept == (200, json.dumps({"status": "dead_letter", "pa_id": None}).encode())
        assert store.query("SELECT count(*) AS n FROM dead_letters")[0]["n"] == 1
        assert store.query("SELECT count(*) AS n FROM callbacks")[0]["n"] == 0


def test_a_deeply_nested_callback_is_a_dead_letter_and_spares_its_batch(tmp_path: Path) -> None:
    """About 1,000 levels used to fail the JSON decoder with RecursionError: 500 for
    it forever, and for the good callbacks committed with it (issue 19)."""
    deep = b'{"request": ' + b"[" * 1000 + b"]" * 1000 + b"}"
    with Store(tmp_path / "db.sqlite3") as store:
        service = CallbackIntake(store, forward=False)
        results = service.receive_many(
            [
                (_body("PN1", "New", delivery_id="n-1"), "application/json"),
                (deep, "application/json"),
                (_body("PN2", "New", delivery_id="n-2"), "application/json"),
            ]
        )
        assert [getattr(r, "outcome", r) for r in results] == ["stored", "dead_letter", "stored"]
        assert store.query("SELECT count(*) AS n FROM dead_letters")[0]["n"] == 1
        assert {r["id"] for r in store.query("SELECT id FROM pas")} == {"PN1", "PN2"}


# ---- a commit batch of callbacks (one job, one statement keeps them all) --------------
def test_a_batch_naming_one_pa_twice_merges_the_second_with_the_first(store: Any) -> None:
    service = CallbackIntake(store, forward=False)
    ev1 = [{"type": "REQUEST_FAX_FAILED", "time": "2026-11-23T10:00:05Z"}]
    ev2 = [{"type": "DELETE", "time": "2026-11-23T10:00:09Z"}]
    results = service.receive_many(
        [
            (_body("TWICE1", "New", events=ev1), None),
            (_body("OTHER1", "New"), None),
            (_body("TWICE1", "PA Request", events=ev2), None),
            (_body("OTHER1", "New"), None),  # the same body again: a duplicate
            (b"not json", None),
        ]
    )
    assert [getattr(r, "outcome", r) for r in results] == [
        "stored", "stored", "stored", "duplicate", "dead_letter",
    ]  # fmt: skip
    row = store.query("SELECT * FROM pas WHERE id = 'TWICE1'")[0]
    assert row["workflow_status"] == "PA Request"
    assert [e["type"] for e in json.loads(row["events_json"])] == ["REQUEST_FAX_FAILED", "DELETE"]
    assert row["fax_failed"] == 1 and row["deleted"] == 1
    history = store.query(
        "SELECT workflow_status FROM pa_history WHERE pa_id = 'TWICE1' ORDER BY id"
    )
    assert [h["workflow_status"] for h in history] == ["New", "PA Request"]
    seqs = store.query("SELECT id, change_seq FROM pas ORDER BY change_seq")
    assert [r["id"] for r in seqs] == ["OTHER1", "TWICE1"]  # the later change, the later position
    assert store.query("SELECT count(*) AS n FROM callbacks")[0]["n"] == 3


def test_a_callback_that_fails_in_a_batch_fails_alone(store: Any) -> None:
    """One PA's stored events are unreadable (a bug's effect): its callback fails, the
    others of the same commit batch are stored all the same."""
    service = CallbackIntake(store, forward=False)
    assert service.receive_many([(_body("BROKEN", "New"), None)])[0].outcome == "stored"
    store.write(lambda db: db.execute("UPDATE pas SET events_json = '{' WHERE id = 'BROKEN'"))
    ev = [{"type": "DELETE", "time": "2026-11-23T10:00:09Z"}]
    results = service.receive_many(
        [(_body("FINE01", "New"), None), (_body("BROKEN", "PA Request", events=ev), None),
         (_body("FINE02", "New"), None)]
    )  # fmt: skip
    assert results[0].outcome == "stored" and results[2].outcome == "stored"
    assert isinstance(results[1], ValueError)
    ids = {r["id"] for r in store.query("SELECT id FROM pas")}
    assert ids == {"BROKEN", "FINE01", "FINE02"}
    assert store.query("SELECT count(*) AS n FROM callbacks")[0]["n"] == 3
