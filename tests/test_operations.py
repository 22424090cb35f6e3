"""Store IT's side (issue 13): the database's health told truly, the service's state on
/healthz and /metrics, doctor's credential check, the commands that need only the
storage path, config mistakes, restores and log event names."""

from __future__ import annotations

import io
import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from flask import Flask, request

from pa_bridge.cli import main
from pa_bridge.logs import configure_logging, log_event
from pa_bridge.store import Store, now_iso
from tests import builders as b
from tests.support import NO_SERVICE, Cli, free_port, wait_until

USER, PASSWORD, API_KEY = "pharmacy", "PW-ops-5521", "AK-ops-7713"


# ---- a small fake of the PA service, answering in the real shapes -----------------------
class FakeService:
    """The claim interface at /cmmimport/ (bare URL lines, HTML error pages), the
    dashboard login and the outcomes page. ``accept_password`` decides 403s."""

    def __init__(self) -> None:
        from pa_bridge.runtime import WsgiServer

        self.port = free_port()
        self.accept_password = PASSWORD
        self.claims: list[dict[str, str]] = []
        self.lock = threading.Lock()
        app = Flask("fake-pa-service")

        def page(status: int, text: str) -> tuple[str, int, dict[str, str]]:
            html = f"<html><head><title>Error</title></head><body><p>{text}</p></body></html>"
            return html, status, {"Content-Type": "text/html"}

        @app.post("/cmmimport/")
        def claim() -> tuple[str, int, dict[str, str]]:
            form = request.form.to_dict()
            missing = [
                k for k in ("username", "password", "api_key", "ncpdp_claim") if not form.get(k)
            ]
            if form.get("password") != self.accept_password:
                return page(403, "Invalid username or password")
            if missing:
                return page(404, "Missing POST variables: " + ", ".join(missing))
            with self.lock:
                self.claims.append(form)
                n = len(self.claims)
            url = f"http://127.0.0.1:{self.port}/request/view/FK{n:04d}?token_id=tok{n}"
            return url + "\n", 200, {"Content-Type": "text/html"}

        @app.post("/dashboard/login")
        def login() -> tuple[str, int, dict[str, str]]:
            if request.form.get("plaintext_password") != self.accept_password:
                return page(403, "Invalid username or password")
            return "dash-token-1", 200, {"Content-Type": "text/plain"}

        @app.get("/outcomes")
        def outcomes_page() -> tuple[str, int, dict[str, str]]:
            return "<html><body><p>outcomes</p></body></html>", 200, {"Content-Type": "text/html"}

        @app.post("/outcomes")
        def outcomes() -> tuple[str, int, dict[str, str]]:
            return (
                '{"button_label": "", "message": "unchanged"}',
                200,
                {"Content-Type": "application/json"},
            )

        self.server = WsgiServer(app, "127.0.0.1", self.port, name="fake-pa-service")

    def b2s(self) -> int:
        with self.lock:
            return sum(c["ncpdp_claim"].lstrip("\x02")[8:10] == "B2" for c in self.claims)

    def service(self, **over: Any) -> dict[str, Any]:
        base = f"http://127.0.0.1:{self.port}"
        return {
            "claim_url": f"{base}/cmmimport/",
            "outcomes_url": f"{base}/outcomes",
            "dashboard_url": f"{base}/dashboard",
            "username": USER,
            "password": PASSWORD,
            "api_key": API_KEY,
            **over,
        }

    def __enter__(self) -> FakeService:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


@pytest.fixture
def fake() -> Iterator[FakeService]:
    with FakeService() as f:
        yield f


def _api(d: Any) -> httpx.Client:
    return httpx.Client(base_url=d.intake_server.url, timeout=10)


# ---- the database's health ----------------------------------------------------------------
def test_another_process_closing_its_connection_leaves_the_wal(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite3"
    with Store(path) as store:
        store.write(
            lambda db: db.execute(
                "INSERT INTO audit (at, action) VALUES (?, 'before')", [now_iso()]
            )
        )
        code = "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute('SELECT 1 FROM audit'); c.close()"
        subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
        assert Path(f"{path}-wal").exists()
        assert store.problem() is None
        store.write(
            lambda db: db.execute("INSERT INTO audit (at, action) VALUES (?, 'after')", [now_iso()])
        )
    conn = sqlite3.connect(path)
    try:
        actions = {r[0] for r in conn.execute("SELECT action FROM audit")}
    finally:
        conn.close()
    assert {"before", "after"} <= actions


def test_a_failing_database_answers_503_and_the_log_names_it(
    make_daemon: Any, tmp_path: Path
) -> None:
    stream = io.StringIO()
    configure_logging("INFO", stream)
    try:
        d = make_daemon(storage={"busy_timeout_ms": 100})
        with _api(d) as api:
            assert api.get("/healthz").json()["status"] == "ok"
            other = sqlite3.connect(d.store.path, timeout=0, isolation_level=None)
            other.execute("BEGIN IMMEDIATE")  # a foreign write lock, held
            try:
                h = api.get("/healthz")
                assert h.status_code == 503
                body = h.json()
                assert body["database"] is False and body["status"] == "unavailable"
                assert "locked" in body["database_error"]
            finally:
                other.execute("ROLLBACK")
                other.close()
            assert api.get("/healthz").status_code == 200
            os.unlink(f"{d.store.path}-wal")  # what the old bug did to a serving daemon
            h = api.get("/healthz")
            assert h.status_code == 503
            # named: "...-wal was removed..." or SQLite's own "disk I/O error"
            assert any(w in h.json()["database_error"] for w in ("-wal", "I/O"))
    finally:
        logging.getLogger().handlers.clear()
    events = [json.loads(x) for x in stream.getvalue().splitlines()]
    bad = [e for e in events if e["event"] == "database.unhealthy"]
    assert bad and "locked" in bad[0]["error"]
    assert any(e["event"] == "database.recovered" for e in events)


# ---- the service's state ------------------------------------------------------------------
def _assert_health_matches_the_document(body: dict[str, Any], status: int) -> None:
    """An integrator validating /healthz against /openapi.json accepts this answer."""
    import jsonschema_rs

    from tests.support import document

    doc = document()
    declared = doc["paths"]["/healthz"]["get"]["responses"][str(status)]
    schema = {**declared["content"]["application/json"]["schema"], "components": doc["components"]}
    errors = [e.message for e in jsonschema_rs.Draft202012Validator(schema).iter_errors(body)]
    assert errors == [], errors


def test_unreachable_service_shows_on_healthz_and_metrics(make_daemon: Any) -> None:
    d = make_daemon(service={**NO_SERVICE, "probe_seconds": 0.2})
    with _api(d) as api:
        wait_until(
            lambda: api.get("/healthz").json()["service"]["reachable"] is False,
            what="the probe to find the service unreachable",
        )
        h = api.get("/healthz")
        assert h.status_code == 200  # the daemon itself works
        body = h.json()
        assert body["status"] == "degraded" and "service_unreachable" in body["degraded"]
        _assert_health_matches_the_document(body, h.status_code)
        assert body["service"]["last_failure"]["reason"] in ("unreachable", "timeout")
        # a reversal that cannot go out: its failure counted by kind and reason
        r = api.post(
            "/v1/reversals", json={"request": b.request_bytes(code="B2").decode("latin-1")}
        )
        assert r.status_code == 202
        wait_until(
            lambda: api.get("/healthz").json()["deliveries"]["failures"].get("reversal"),
            what="the reversal's failed delivery counted",
        )
        metrics = api.get("/metrics").text
    assert "pa_bridge_service_up 0.0" in metrics
    assert 'pa_bridge_delivery_failures_total{kind="reversal",reason="unreachable"}' in metrics
    assert "pa_bridge_queue_oldest_age_seconds" in metrics


def test_refused_credentials_show_on_healthz_and_metrics(
    make_daemon: Any, fake: FakeService
) -> None:
    fake.accept_password = "another"
    d = make_daemon(service=fake.service(probe_seconds=0.2))
    with _api(d) as api:
        wait_until(
            lambda: api.get("/healthz").json()["service"]["credentials"] == "refused",
            what="the probe to find the credentials refused",
        )
        body = api.get("/healthz").json()
        assert body["service"]["reachable"] is True
        assert "service_credentials_refused" in body["degraded"]
        assert "pa_bridge_service_credentials_refused 1.0" in api.get("/metrics").text
        fake.accept_password = PASSWORD  # fixed at the service: health follows
        wait_until(lambda: api.get("/healthz").json()["status"] == "ok", what="health back to ok")


def _doctor(tmp_path: Path, cli: Cli, service: dict[str, Any]) -> Result:
    cfg = tmp_path / "doctor.toml"
    body = "".join(f'{k} = "{v}"\n' for k, v in service.items())
    # ports picked at start: the listen checks are test_doctor_service.py's
    listen = '[intake]\nlisten = "127.0.0.1:0"\n[callbacks]\nlisten = "127.0.0.1:0"\n'
    cfg.write_text(f'[storage]\npath = "{tmp_path / "db.sqlite3"}"\n{listen}[service]\n{body}')
    return cli("doctor", "--config", str(cfg))


def test_doctor_detects_wrong_credentials_and_wrong_paths(
    tmp_path: Path, fake: FakeService, cli: Cli
) -> None:
    good = _doctor(tmp_path, cli, fake.service())
    assert good.exit_code == 0, good.stdout
    assert "credentials accepted" in good.stdout
    fake.accept_password = "another"
    bad = _doctor(tmp_path, cli, fake.service())
    assert bad.exit_code == 1
    assert "refused the credentials (HTTP 403)" in bad.stdout
    assert PASSWORD not in bad.stdout + bad.stderr and API_KEY not in bad.stdout + bad.stderr
    fake.accept_password = PASSWORD
    base = f"http://127.0.0.1:{fake.port}"
    wrong = _doctor(tmp_path, cli, fake.service(claim_url=f"{base}/nothing/here"))
    assert wrong.exit_code == 1
    line = next(ln for ln in wrong.stdout.splitlines() if "claim interface" in ln)
    assert line.startswith("FAIL") and "HTTP 404" in line and "reachable" not in line


# ---- commands that need only the storage path ---------------------------------------------
def _secret_file_config(tmp_path: Path, db: Path) -> Path:
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(
        f'[storage]\npath = "{db}"\n'
        "[service]\n"
        'claim_url = "https://claims.pa.invalid/cmmimport/"\n'
        'outcomes_url = "https://pa.invalid/outcomes"\n'
        'username = "u"\npassword_file = "service-password"\napi_key_file = "service-api-key"\n'
        '[callbacks]\nusername = "cb"\npassword_file = "callback-password"\n'
    )
    return cfg


def test_backup_and_queue_need_only_the_storage_path(tmp_path: Path) -> None:
    db = tmp_path / "state" / "pa-bridge.sqlite3"
    with Store(db) as store:
        from pa_bridge.outbox import enqueue

        store.write(lambda db_: enqueue(db_, "reversal", {"exchange_id": "x"}))
    cfg = _secret_file_config(tmp_path, db)  # its *_file secrets are not readable here
    env = {"CREDENTIALS_DIRECTORY": ""}
    runner = CliRunner()
    r = runner.invoke(
        main, ["backup", str(tmp_path / "copy.sqlite3"), "--config", str(cfg)], env=env
    )
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["queue", "list", "--config", str(cfg)], env=env)
    assert r.exit_code == 0, r.output
    assert "reversal" in r.output and "NEXT ATTEMPT" in r.output
    r = runner.invoke(main, ["queue", "retry", "1", "--config", str(cfg)], env=env)
    assert r.exit_code == 0 and "due now" in r.output


def test_storage_only_commands_print_the_storage_problem_and_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-url-file"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[storage]\nurl_file = "{missing}"\n')
    runner = CliRunner()
    for args in (
        ["queue", "list"],
        ["queue", "retry", "1"],
        ["backup", str(tmp_path / "copy")],
        ["restore", str(tmp_path / "copy"), "--yes"],
    ):
        r = runner.invoke(main, [*args, "--config", str(cfg)])
        assert r.exit_code == 2, (args, r.output)
        assert f"config error: storage.url_file: cannot read {missing}" in r.output, r.output
        assert "Traceback" not in r.output
    assert not (tmp_path / "copy").exists()


def test_queue_commands_never_create_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "pa-bridge.sqlite3"
    runner = CliRunner()
    for args in (["queue", "list"], ["queue", "retry", "1"], ["backup", str(tmp_path / "c")]):
        r = runner.invoke(main, args, env={"PA_BRIDGE_STORAGE__PATH": str(missing)})
        assert r.exit_code == 1, r.output
        assert "no database at" in r.output
        assert "the queue is empty" not in r.output
    assert not missing.exists() and not missing.parent.exists()


def test_queue_list_statuses_times_and_next_attempt(tmp_path: Path) -> None:
    from pa_bridge.config import QueueSettings
    from pa_bridge.outbox import DeliveryFailed, Outbox, enqueue

    db = tmp_path / "pa-bridge.sqlite3"
    with Store(db) as store:
        for kind in ("retried", "refused", "waiting"):
            store.write(lambda d, k=kind: enqueue(d, k, {}))  # type: ignore[misc]

        def retried(_p: dict[str, Any]) -> None:
            raise DeliveryFailed("down")

        def refused(_p: dict[str, Any]) -> None:
            raise DeliveryFailed("refused for good", retryable=False)

        ob = Outbox(store, {"retried": retried, "refused": refused}, QueueSettings())
        ob.deliver(1)
        ob.deliver(2)
    runner = CliRunner()
    env = {"PA_BRIDGE_STORAGE__PATH": str(db)}
    r = runner.invoke(main, ["queue", "list", "--status", "failed", "--json"], env=env)
    assert r.exit_code == 0, r.output
    items = {i["kind"]: i for i in json.loads(r.output)}
    assert set(items) == {"retried", "refused"}
    assert items["retried"]["retrying"] and items["retried"]["next_attempt_at"].endswith("Z")
    assert items["refused"]["next_attempt_at"] is None
    for it in items.values():  # one time format: UTC ISO 8601
        for key in ("created_at", "updated_at"):
            assert it[key][:4].isdigit() and it[key].endswith("Z")
    r = runner.invoke(main, ["queue", "list", "--status", "pending", "--json"], env=env)
    assert [i["kind"] for i in json.loads(r.output)] == ["waiting"]
    table = runner.invoke(main, ["queue", "list"], env=env).output
    header, *rows = table.splitlines()
    assert "NEXT ATTEMPT" in header
    refused_row = next(x for x in rows if "refused" in x)
    assert "by hand" in refused_row and "failed" in refused_row
    retried_row = next(x for x in rows if " retried " in x)
    assert items["retried"]["next_attempt_at"] in retried_row


# ---- config mistakes ------------------------------------------------------------------------
def test_a_bad_log_level_fails_at_start_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[storage]\npath = "{tmp_path / "db.sqlite3"}"\n[logging]\nlevel = "LOUD"\n')
    r = CliRunner().invoke(main, ["serve", "--config", str(cfg)])
    assert r.exit_code == 2
    assert "logging.level" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "db.sqlite3").exists()
    d = CliRunner().invoke(main, ["doctor", "--config", str(cfg)])
    assert d.exit_code == 1 and "logging.level" in d.output


def test_the_environment_wins_over_a_password_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pa_bridge.config import load_settings

    (tmp_path / "pw").write_text("from-the-file\n")
    cfg = _secret_file_config(tmp_path, tmp_path / "db.sqlite3")
    cfg.write_text(
        cfg.read_text()
        .replace('password_file = "service-password"', f'password_file = "{tmp_path / "pw"}"')
        .replace('api_key_file = "service-api-key"', 'api_key = "k"')
        .replace('password_file = "callback-password"', 'password = "cbpw-long-enough"')
    )
    assert load_settings(cfg).service.password.get_secret_value() == "from-the-file"  # type: ignore[union-attr]
    monkeypatch.setenv("PA_BRIDGE_SERVICE__PASSWORD", "from-the-environment")
    s = load_settings(cfg)
    assert s.service.password is not None
    assert s.service.password.get_secret_value() == "from-the-environment"
    # an environment file beats the file's value too
    monkeypatch.delenv("PA_BRIDGE_SERVICE__PASSWORD")
    (tmp_path / "pw2").write_text("from-env-file")
    monkeypatch.setenv("PA_BRIDGE_SERVICE__PASSWORD_FILE", str(tmp_path / "pw2"))
    cfg.write_text(
        cfg.read_text().replace(f'password_file = "{tmp_path / "pw"}"', 'password = "in-file"')
    )
    assert load_settings(cfg).service.password.get_secret_value() == "from-env-file"  # type: ignore[union-attr]


# ---- restore ------------------------------------------------------------------------------
def test_restore_holds_stale_queued_work_and_the_cursor_moves_on(
    make_daemon: Any, fake: FakeService, tmp_path: Path
) -> None:
    db = tmp_path / "live.sqlite3"
    down = {**NO_SERVICE, "probe_seconds": 0}
    b2 = {"request": b.request_bytes(code="B2").decode("latin-1")}
    cb_pa = "RST001"

    # 1. the service is down: the B2 waits in the queue; a backup is taken then
    d1 = make_daemon(storage={"path": str(db)}, service=down)
    with _api(d1) as api:
        assert api.post("/v1/reversals", json=b2).status_code == 202
    d1.stop()
    backup = tmp_path / "nightly.sqlite3"
    r = CliRunner().invoke(main, ["backup", str(backup)], env={"PA_BRIDGE_STORAGE__PATH": str(db)})
    assert r.exit_code == 0, r.output

    # 2. the service is back: the B2 is delivered; a callback moves a PA; a client
    #    reads the feed and keeps its cursor
    d2 = make_daemon(storage={"path": str(db)}, service=fake.service(probe_seconds=0))
    wait_until(lambda: fake.b2s() == 1, what="the B2 delivered")
    cb = f"{d2.callback_server.url}/callbacks/pharmacy"
    httpx.post(cb, json={"request": {"id": cb_pa, "workflow_status": "PA Request", "events": []}})
    with _api(d2) as api:
        feed = api.get("/v1/pa").json()
    assert any(p["pa_id"] == cb_pa for p in feed["pas"])
    cursor = feed["cursor"]
    d2.stop()

    # 3. disaster: the database is lost and the nightly backup restored
    env = {"PA_BRIDGE_STORAGE__PATH": str(db)}
    r = CliRunner().invoke(main, ["restore", str(backup), "--yes"], env=env)
    assert r.exit_code == 0, r.output
    assert "held for review when the daemon starts: 1" in r.output
    assert list(tmp_path.glob("live.sqlite3.before-restore-*"))  # moved aside, not deleted

    d3 = make_daemon(storage={"path": str(db)}, service=fake.service(probe_seconds=0))
    with _api(d3) as api:
        h = api.get("/healthz").json()
        assert "queue_held_after_restore" in h["degraded"] and h["queue"]["held"] == 1
        threading.Event().wait(1.0)  # several poll intervals
        assert fake.b2s() == 1, "the restored B2 was sent again"
        # a change after the restore sorts after the cursor handed out before it
        httpx.post(
            f"{d3.callback_server.url}/callbacks/pharmacy",
            json={"request": {"id": "RST002", "workflow_status": "New", "events": []}},
        )
        later = api.get("/v1/pa", params={"since": cursor}).json()
        assert [p["pa_id"] for p in later["pas"]] == ["RST002"]
    held = CliRunner().invoke(main, ["queue", "list", "--status", "held", "--json"], env=env)
    items = json.loads(held.output)
    assert len(items) == 1 and items[0]["kind"] == "reversal"
    assert "restored from the backup" in items[0]["last_error"]
    dropped = CliRunner().invoke(main, ["queue", "drop", str(items[0]["id"])], env=env)
    assert dropped.exit_code == 0, dropped.output
    with _api(d3) as api:
        assert api.get("/healthz").json()["status"] == "ok"


def test_restore_refuses_while_a_daemon_serves(make_daemon: Any, tmp_path: Path) -> None:
    db = tmp_path / "live.sqlite3"
    make_daemon(storage={"path": str(db)})
    copy = tmp_path / "copy.sqlite3"
    env = {"PA_BRIDGE_STORAGE__PATH": str(db)}
    assert CliRunner().invoke(main, ["backup", str(copy)], env=env).exit_code == 0
    r = CliRunner().invoke(main, ["restore", str(copy), "--yes"], env=env)
    assert r.exit_code == 1 and "stop it first" in r.output


# ---- logs -----------------------------------------------------------------------------------
def test_log_events_are_stable_identifiers_with_free_text_apart() -> None:
    stream = io.StringIO()
    configure_logging("INFO", stream)
    try:
        logging.getLogger("some.library").warning("connection %s reset", "#3")
        log_event("claim.accepted", claim_id="c1")
    finally:
        logging.getLogger().handlers.clear()
    lib, ours = (json.loads(x) for x in stream.getvalue().splitlines())
    assert lib["event"] == "log.some.library" and lib["message"] == "connection #3 reset"
    assert ours["event"] == "claim.accepted" and "message" not in ours


def test_log_lines_redact_phi_and_secrets_whatever_the_field_order() -> None:
    stream = io.StringIO()
    configure_logging("INFO", stream)
    try:
        log_event("a.plain", claim_id="c1", elapsed_ms=1.5, codes=["75"])
        log_event("a.phi", claim_id="c2", cardholder_id="ZQX1", Service_API_Key="k")
        log_event("a.nested", claim_id="c3", detail={"date_of_birth": "19610407", "n": 1})
        logging.getLogger("pa_bridge").info("free %s", "text")
    finally:
        logging.getLogger().handlers.clear()
    plain, phi, nested, free = (json.loads(x) for x in stream.getvalue().splitlines())
    assert plain["claim_id"] == "c1" and plain["codes"] == ["75"] and plain["elapsed_ms"] == 1.5
    assert phi["cardholder_id"] == "[redacted]" and phi["Service_API_Key"] == "[redacted]"
    assert nested["detail"] == {"date_of_birth": "[redacted]", "n": 1}
    assert free["message"] == "free text" and free["event"] == "log.pa_bridge"
    assert "ZQX1" not in stream.getvalue() and "19610407" not in stream.getvalue()
    assert plain["ts"].endswith("Z") and len(plain["ts"]) == len("2026-01-01T00:00:00.000Z")


def test_a_service_echoing_our_form_never_reaches_the_answer_or_the_log(
    make_daemon: Any,
) -> None:
    """A service error page that quotes the posted form (password, api_key, the claim
    with the patient's name and date of birth) is cut down to its own words (issue 19)."""
    from pa_bridge.runtime import WsgiServer

    app = Flask("echoing-service")

    @app.post("/cmmimport/")
    def echo() -> tuple[str, int, dict[str, str]]:
        quoted = " ".join(f"{k}={v}" for k, v in request.form.items())
        page = f"<html><body><p>Could not process claim: {quoted}</p></body></html>"
        return page, 500, {"Content-Type": "text/html"}

    stream = io.StringIO()
    configure_logging("INFO", stream)
    server = WsgiServer(app, "127.0.0.1", 0, name="echo").start()
    try:
        base = server.url
        d = make_daemon(
            service={
                "claim_url": f"{base}/cmmimport/",
                "outcomes_url": "http://127.0.0.1:9/outcomes",
                "username": USER,
                "password": PASSWORD,
                "api_key": API_KEY,
                "probe_seconds": 0,
            }
        )
        with _api(d) as api:
            claim = api.post(
                "/v1/claims",
                json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75])),
            ).json()
            r = api.post(f"/v1/claims/{claim['claim_id']}/pa")
    finally:
        server.stop()
        logging.getLogger().handlers.clear()
    assert r.status_code >= 400
    assert "Could not process claim" in json.dumps(r.json())  # the service's own words stay
    everything = r.text + stream.getvalue()
    for secret in (
        PASSWORD,
        API_KEY,
        b.PATIENT_LAST,
        b.PATIENT_FIRST,
        b.PATIENT_DOB,
        b.CARDHOLDER_ID,
    ):
        assert secret not in everything, secret
