"""Work that waits for store IT heals by itself (issue 27): a queue item refused for our
own credentials or configuration is held with its reason, never failed for good, and
tried again at the next start or reload; the dispensing system is told "queued".
Reload (SIGHUP) re-reads the stores, credentials, tokens and log level, and refuses a
change that needs a restart. Real daemons, a real sandbox on loopback, real files."""

from __future__ import annotations

import io
import json
import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pa_bridge.config import load_settings
from pa_bridge.logs import configure_logging
from pa_bridge.outbox import enqueue
from pa_bridge.runtime import Daemon
from pa_bridge.sandbox import (
    SANDBOX_API_KEY,
    SANDBOX_PASSWORD,
    SANDBOX_USERNAME,
    SandboxConfig,
    SandboxServer,
)
from pa_bridge.store import Status, Store, audit
from pa_bridge.store import outbox as queue_items
from tests import builders as b
from tests.support import Cli, DaemonProcess, fleet_key, wait_until

WRONG = "not-the-sandbox-password"
TOKEN_OLD = "token-before-the-reload-01"
TOKEN_NEW = "token-after-the-reload-002"


@pytest.fixture
def service() -> Iterator[SandboxServer]:
    """The PA service: a sandbox of its own (our config may be wrong, its is not)."""
    server = SandboxServer(SandboxConfig(step_seconds=60), host="127.0.0.1", port=0).start()
    try:
        yield server
    finally:
        server.stop()


def _service(sandbox: SandboxServer, password: str) -> dict[str, str]:
    return {
        "claim_url": f"{sandbox.url}/cmmimport/",
        "outcomes_url": f"{sandbox.url}/outcomes.json",
        "username": SANDBOX_USERNAME,
        "password": password,
        "api_key": SANDBOX_API_KEY,
    }


def _b2() -> dict[str, str]:
    return {"request": b.request_bytes(code="B2").decode("latin-1")}


def _b2s(sandbox: SandboxServer) -> list[dict[str, Any]]:
    calls = httpx.get(f"{sandbox.url}/sandbox/calls", timeout=5).json()["calls"]
    return [c for c in calls if c.get("transaction_code") == "B2"]


def test_a_reversal_refused_for_our_credentials_is_queued_held_and_sent_at_the_next_start(
    make_daemon: Any, service: SandboxServer, tmp_path: Path
) -> None:
    """Before: 422 reversal_refused and the item failed for good; after the password
    was fixed, every such item had to be found and `queue retry`'d by hand."""
    storage = {"path": str(tmp_path / "pa-bridge.sqlite3")}
    wrong = make_daemon(
        storage=storage, service=_service(service, WRONG), sandbox={"enabled": False}
    )
    with httpx.Client(base_url=wrong.intake_server.url, timeout=20) as api:
        r = api.post("/v1/reversals", json=_b2())
        assert r.status_code == 202, r.text  # queued: nothing for the dispensing system to do
        body = r.json()
        assert body["status"] == "pending" and "store IT" in body["message"]
        assert body["last_error"].startswith("credentials:")
        (item,) = wrong.use_cases.outbox.list()
        assert item["status"] == "held" and item["held_for"] == "configuration"
        health = api.get("/healthz").json()
        assert "queue_held_for_configuration" in health["degraded"]
        assert "queue_failed" not in health["degraded"]
        assert health["queue"]["held"] == 1
        assert health["queue_held_for"] == {"restore": 0, "configuration": 1, "pharmacy": 0}
        metrics = api.get("/metrics").text
        assert 'pa_bridge_queue_held{held_for="configuration"} 1.0' in metrics
    wrong.use_cases.outbox.drain_once()  # not retried by itself while nothing changed
    assert queue_items.state(wrong.store.reader(), item["id"]) == (
        Status.HELD,
        item["last_error"],
    )
    assert _b2s(service) == []  # the sandbox refused it: 403, nothing recorded
    wrong.stop()

    fixed = make_daemon(
        storage=storage,
        service=_service(service, SANDBOX_PASSWORD),
        sandbox={"enabled": False},
    )
    wait_until(
        lambda: fixed.use_cases.outbox.list()[0]["status"] == "delivered",
        what="the held reversal sent at start",
    )
    assert [c["username"] for c in _b2s(service)] == [SANDBOX_USERNAME]


def test_a_restore_holds_items_held_for_the_configuration_for_review(tmp_path: Path) -> None:
    """A restored backup's held item may have been sent after the backup was taken: it
    is held for review like the rest, never released by a start or a reload."""
    with Store(tmp_path / "db.sqlite3") as store:
        item = store.write(lambda db: enqueue(db, "reversal", {"exchange_id": "x"}))
        store.write(
            lambda db: queue_items.record_attempt(
                db,
                item,
                status=Status.HELD,
                attempts=1,
                next_attempt_at=0,
                last_error="credentials: refused",
                now="2026-11-23T00:00:00.000000Z",
                payload_json="{}",
                held_for="configuration",
            )
        )
        assert queue_items.to_hold_after_restore(store.reader()) == 1  # what restore says
        assert store.write(lambda db: queue_items.hold_undelivered(db, "restored", 1.0)) == 1
        assert store.write(lambda db: queue_items.release_held(db, "configuration", 2.0)) == 0
        (row,) = queue_items.list_items(store.reader())
        assert (row["status"], row["held_for"], row["last_error"]) == (
            "held",
            "restore",
            "restored",
        )


def test_queue_list_names_the_pa_of_a_webhook_and_why_an_item_waits(
    cli: Cli, tmp_path: Path
) -> None:
    with Store(tmp_path / "var" / "pa-bridge.sqlite3") as store:
        store.write(lambda db: enqueue(db, "webhook", {"pa_id": "PA7Q2X", "change_seq": 3}))
        held = store.write(lambda db: enqueue(db, "reversal", {"exchange_id": "e1"}, claim_id="e1"))
        store.write(
            lambda db: queue_items.record_attempt(
                db,
                held,
                status=Status.HELD,
                attempts=1,
                next_attempt_at=0,
                last_error="unknown_pharmacy: pharmacy 2222222 is not configured here",
                now="2026-11-23T00:00:00.000000Z",
                payload_json='{"exchange_id": "e1"}',
                held_for="pharmacy:2222222",
            )
        )
    r = cli("queue", "list")
    assert r.exit_code == 0, r.output
    webhook = next(ln for ln in r.output.splitlines() if " webhook " in ln)
    assert "PA PA7Q2X" in webhook
    reversal = next(ln for ln in r.output.splitlines() if " reversal " in ln)
    assert "claim e1" in reversal and "by a daemon listing 2222222" in reversal
    items = json.loads(cli("queue", "list", "--json").output)
    assert [(i["kind"], i["pa_id"], i["held_for"]) for i in items] == [
        ("reversal", None, "pharmacy:2222222"),
        ("webhook", "PA7Q2X", None),
    ]


def test_queue_retry_of_an_unknown_item_says_where_it_looked(cli: Cli, tmp_path: Path) -> None:
    # run where no daemon ever ran, without --config (the issue's `queue retry 38`): the
    # full path looked at, and that no --config means the embedded default
    r = cli("queue", "retry", "38")
    assert r.exit_code == 1
    line = r.stderr.strip()
    assert line.startswith(f"error: no database at {tmp_path / 'var' / 'pa-bridge.sqlite3'} (")
    assert "no --config" in line and "--config /etc/pa-bridge/pa-bridge.toml" in line
    with Store(tmp_path / "var" / "pa-bridge.sqlite3"):
        pass
    r = cli("queue", "retry", "38")
    assert r.exit_code == 1
    line = r.stderr.strip()
    assert line.startswith("error: no undelivered queue item 38 in ")
    assert str(tmp_path / "var" / "pa-bridge.sqlite3") in line
    assert "no --config" in line and "--config /etc/pa-bridge/pa-bridge.toml" in line
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(f'[storage]\npath = "{tmp_path / "var" / "pa-bridge.sqlite3"}"\n')
    r = cli("queue", "drop", "38", "--config", str(cfg))
    assert r.exit_code == 1 and f"(storage in {cfg})" in r.stderr


def test_users_and_keys_commands_never_make_a_database(cli: Cli, tmp_path: Path) -> None:
    """`users` and `keys rotate` at a path where no daemon ran (a typo in storage.path,
    or no --config outside the daemon's directory) say where they looked; they made a
    new database there (and `users add` put the person in it, where no daemon reads)."""
    from pa_bridge.encryption import create_key_file

    key = tmp_path / "keys" / "pa.key"
    create_key_file(key)
    before = key.read_text()
    db = tmp_path / "typo" / "pa-bridge.sqlite3"
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(f'[storage]\npath = "{db}"\n[encryption]\nkey_file = "{key}"\n')
    for args in (
        ("users", "list"),
        ("users", "add", "pat", "--generate-password"),
        ("users", "disable", "pat"),
        ("users", "reset", "pat", "--generate-password"),
        ("keys", "rotate"),
    ):
        r = cli(*args, "--config", str(cfg))
        assert r.exit_code == 1, (args, r.output)
        assert f"error: no database at {db} (storage in {cfg})" in r.stderr, (args, r.stderr)
        assert not db.exists() and not db.parent.exists(), args
    assert key.read_text() == before  # no key added for a database that is not there
    r = cli("users", "list")  # no --config: the embedded default's, said so
    assert r.exit_code == 1 and "no --config" in r.stderr
    assert not (tmp_path / "var").exists()


# ---- reload ---------------------------------------------------------------------------
def _write_config(path: Path, sandbox: SandboxServer, password: str, **more: str) -> None:
    service = "".join(f'{k} = "{v}"\n' for k, v in _service(sandbox, password).items())
    path.write_text(
        f'[storage]\npath = "{path.parent / "pa-bridge.sqlite3"}"\n'
        f"[service]\n{service}"
        "[sandbox]\nenabled = false\n"
        f'[intake]\nlisten = "{more.get("intake", "127.0.0.1:0")}"\n'
        f'tokens = ["{more.get("token", TOKEN_OLD)}"]\n'
        '[callbacks]\nlisten = "127.0.0.1:0"\n'
        "[queue]\npoll_seconds = 0.1\n"
        f'[logging]\nlevel = "{more.get("level", "INFO")}"\n'
    )


@pytest.fixture
def daemon_on_file(tmp_path: Path) -> Iterator[Any]:
    started: list[Daemon] = []

    def start(cfg: Path) -> Daemon:
        d = Daemon(load_settings(cfg), config_path=cfg)
        started.append(d)
        d.start()
        return d

    yield start
    for d in started:
        d.stop()
    logging.getLogger().handlers.clear()


def test_reload_applies_credentials_and_tokens_and_sends_what_was_held(
    daemon_on_file: Any, service: SandboxServer, tmp_path: Path
) -> None:
    stream = io.StringIO()
    configure_logging("INFO", stream)
    cfg = tmp_path / "pa-bridge.toml"
    _write_config(cfg, service, WRONG)
    d = daemon_on_file(cfg)
    with httpx.Client(base_url=d.intake_server.url, timeout=20) as api:
        old = {"Authorization": f"Bearer {TOKEN_OLD}"}
        new = {"Authorization": f"Bearer {TOKEN_NEW}"}
        assert api.post("/v1/reversals", json=_b2(), headers=old).status_code == 202
        _write_config(cfg, service, SANDBOX_PASSWORD, token=TOKEN_NEW, level="WARNING")
        assert d.reload() is True
        wait_until(
            lambda: d.use_cases.outbox.list()[0]["status"] == "delivered",
            what="the held reversal sent after the reload",
        )
        assert len(_b2s(service)) == 1
        assert api.get("/v1/pa", headers=old).status_code == 401
        assert api.get("/v1/pa", headers=new).status_code == 200
        # POST /v1/claims, the hot path, takes the new token too
        claim = {
            "request": b.request_bytes().decode("latin-1"),
            "response": b.response_bytes([b.PAID]).decode("latin-1"),
        }
        assert api.post("/v1/claims", json=claim, headers=old).status_code == 401
        assert api.post("/v1/claims", json=claim, headers=new).status_code == 200
    assert logging.getLogger().level == logging.WARNING
    events = [json.loads(x) for x in stream.getvalue().splitlines()]
    (done,) = [e for e in events if e["event"] == "config.reloaded"]
    assert done["changed"] == ["intake.tokens", "logging.level", "service.password"]
    assert done["released"] == 1
    assert WRONG not in stream.getvalue() and SANDBOX_PASSWORD not in stream.getvalue()
    # a reload is an administrative action: in the audit trail (issue 29), chained
    actions = [e.action for e in audit.entries_since(d.store.reader(), "2000-01-01")]
    assert actions.count("config.reload") == 1
    assert audit.verify(d.store.reader()).problem is None


def test_reload_refuses_a_change_that_needs_a_restart_and_keeps_running_as_before(
    daemon_on_file: Any, service: SandboxServer, tmp_path: Path
) -> None:
    stream = io.StringIO()
    configure_logging("INFO", stream)
    cfg = tmp_path / "pa-bridge.toml"
    _write_config(cfg, service, SANDBOX_PASSWORD)
    d = daemon_on_file(cfg)
    url = d.intake_server.url
    # a new token together with a new listen address: all or nothing
    _write_config(cfg, service, SANDBOX_PASSWORD, token=TOKEN_NEW, intake="127.0.0.1:1")
    assert d.reload() is False
    cfg.write_text(cfg.read_text().replace("[queue]", "[queue]\nbatch_size = 0"))
    assert d.reload() is False
    with httpx.Client(base_url=url, timeout=10) as api:
        assert (
            api.get("/v1/pa", headers={"Authorization": f"Bearer {TOKEN_OLD}"}).status_code == 200
        )
        assert (
            api.get("/v1/pa", headers={"Authorization": f"Bearer {TOKEN_NEW}"}).status_code == 401
        )
    events = [json.loads(x) for x in stream.getvalue().splitlines()]
    refused = [e for e in events if e["event"] == "config.reload_refused"]
    assert refused[0]["key"] == "intake.listen" and "restart" in refused[0]["reason"]
    assert len(refused) == 2 and "queue.batch_size" in refused[1]["problem"]
    assert not any(e["event"] == "config.reloaded" for e in events)
    assert TOKEN_NEW not in stream.getvalue()
    actions = [e.action for e in audit.entries_since(d.store.reader(), "2000-01-01")]
    assert actions.count("config.reload_refused") == 2


def test_a_reload_says_systemd_credentials_are_read_at_start_only(
    daemon_on_file: Any, service: SandboxServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the unit as shipped, secrets come by LoadCredential=: systemd copies them
    into $CREDENTIALS_DIRECTORY when the service starts, and (before systemd 260) not
    again at `systemctl reload`. Store IT who fixed /etc/pa-bridge/credentials/... and
    reloaded saw `changed: []` and the items held again; the line now says to restart."""
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "service-password").write_text(WRONG)  # systemd's copy, made at start
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(creds))
    stream = io.StringIO()
    configure_logging("INFO", stream)
    cfg = tmp_path / "pa-bridge.toml"

    def write(level: str) -> None:
        _write_config(cfg, service, "", level=level)
        cfg.write_text(
            cfg.read_text().replace('password = ""', 'password_file = "service-password"')
        )

    write("INFO")
    d = daemon_on_file(cfg)
    write("DEBUG")  # store IT changed the config, and (they think) the password
    assert d.reload() is True
    events = [json.loads(x) for x in stream.getvalue().splitlines()]
    (done,) = [e for e in events if e["event"] == "config.reloaded"]
    assert done["changed"] == ["logging.level"] and done["level"] == "warning"
    assert "$CREDENTIALS_DIRECTORY" in done["note"]
    assert "systemctl restart pa-bridge" in done["note"]
    # a credential that did change (a directory systemd does not manage): no note
    (creds / "service-password").write_text(SANDBOX_PASSWORD)
    assert d.reload() is True
    events = [json.loads(x) for x in stream.getvalue().splitlines()]
    done = [e for e in events if e["event"] == "config.reloaded"][-1]
    assert done["changed"] == ["service.password"] and "note" not in done


@pytest.mark.slow
def test_sighup_reloads_a_serving_daemon(service: SandboxServer, tmp_path: Path) -> None:
    """`systemctl reload pa-bridge` is `kill -HUP $MAINPID` (the unit's ExecReload=)."""
    secret = tmp_path / "service-password"
    secret.write_text(WRONG)
    cfg = tmp_path / "pa-bridge.toml"
    service_keys = {**_service(service, ""), "password_file": str(secret)}
    del service_keys["password"]
    cfg.write_text(
        "[service]\n"
        + "".join(f'{k} = "{v}"\n' for k, v in service_keys.items())
        + "[sandbox]\nenabled = false\n[queue]\npoll_seconds = 0.2\n"
    )
    d = DaemonProcess(tmp_path, config=cfg).start()
    try:
        with httpx.Client(base_url=d.url, timeout=20) as api:
            assert api.post("/v1/reversals", json=_b2()).status_code == 202
            secret.write_text(SANDBOX_PASSWORD)  # store IT fixes the password file
            assert d.proc is not None
            d.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: len(_b2s(service)) == 1, what="the B2 sent after SIGHUP")
            assert api.get("/healthz").json()["status"] == "ok"
    finally:
        assert d.terminate() == 0
    events = [json.loads(x) for x in d.log_lines() if x.startswith("{")]
    assert any(e["event"] == "config.reloaded" for e in events)


# ---- a chain's rolling change, two daemons on one PostgreSQL database -------------------
X, Y = "1111111", "2222222"  # synthetic NCPDP provider ids
STORES = {
    X: ("store-x", "store-x-password-1", "store-x-key-1"),
    Y: ("store-y", "store-y-pw-2", "store-y-key-2"),
}


def _pharmacies_toml(*pids: str) -> str:
    out = ""
    for pid in pids:
        user, pw, key = STORES[pid]
        out += (
            f'[[pharmacies]]\nprovider_id = "{pid}"\nusername = "{user}"\n'
            f'password = "{pw}"\napi_key = "{key}"\n'
        )
    return out


def _paid(provider: str) -> dict[str, str]:
    req = b.request_bytes(provider_id=provider, provider_qualifier="07")
    return {
        "request": req.decode("latin-1"),
        "response": b.response_bytes([b.PAID]).decode("latin-1"),
    }


def test_a_rolling_change_leaves_a_stores_reports_to_a_daemon_that_lists_it(
    pg_url: str, tmp_path: Path, make_daemon: Any, daemon_on_file: Any
) -> None:
    """Daemon A lists stores X and Y, daemon B only X (not rolled out to yet). B takes
    Y's queued outcome reports (A's queue is paused so that it must): before, it failed
    them for good (`unknown_pharmacy`); now it holds them for Y, A sends them once it
    drains again, and B sends them itself once a reload adds Y."""
    from pa_bridge.sandbox import SandboxPharmacy

    sandbox = SandboxServer(
        SandboxConfig(
            step_seconds=60,
            pharmacies=tuple(SandboxPharmacy(*STORES[p], provider_id=p) for p in (X, Y)),
        ),
        host="127.0.0.1",
        port=0,
    ).start()
    service = {
        "claim_url": f"{sandbox.url}/cmmimport/",
        "outcomes_url": f"{sandbox.url}/outcomes.json",
    }
    key = fleet_key(pg_url)  # one key for the fleet's daemons (decision 0033)
    common = {
        "storage": {"url": pg_url},
        "encryption": {"key_file": str(key)},
        "service": service,
        "sandbox": {"enabled": False},
        "queue": {"poll_seconds": 0.1},
    }
    b_cfg = tmp_path / "b.toml"

    def write_b(*pids: str) -> None:
        b_cfg.write_text(
            f'[storage]\nurl = "{pg_url}"\n[encryption]\nkey_file = "{key}"\n[service]\n'
            + "".join(f'{k} = "{v}"\n' for k, v in service.items())
            + '[sandbox]\nenabled = false\n[intake]\nlisten = "127.0.0.1:0"\n'
            '[callbacks]\nlisten = "127.0.0.1:0"\n[queue]\npoll_seconds = 0.1\n'
            + _pharmacies_toml(*pids)
        )

    def reports_for_y() -> list[dict[str, Any]]:
        calls = httpx.get(f"{sandbox.url}/sandbox/calls", timeout=5).json()["calls"]
        return [c for c in calls if c["interface"] == "outcomes" and c["username"] == STORES[Y][0]]

    def statuses(d: Daemon | None = None) -> list[str]:
        return sorted(i["status"] for i in (d or a).use_cases.outbox.list(limit=1000))

    try:
        a = make_daemon(
            **common,
            pharmacies=[
                dict(
                    zip(("username", "password", "api_key"), STORES[p], strict=True), provider_id=p
                )
                for p in (X, Y)
            ],
        )
        write_b(X)
        daemon_b = daemon_on_file(b_cfg)
        a.use_cases.outbox.stop()  # A's queue paused: B is the one to take Y's reports
        with httpx.Client(base_url=a.intake_server.url, timeout=20) as api:
            for _ in range(20):
                assert api.post("/v1/claims", json=_paid(Y)).status_code == 200
            wait_until(lambda: statuses() == ["held"] * 20, what="B to hold Y's 20 reports")
            held = a.use_cases.outbox.list(limit=1000)
            assert {i["held_for"] for i in held} == {f"pharmacy:{Y}"}
            assert reports_for_y() == []  # B sent nothing for Y
            a.use_cases.outbox.start()  # A drains again: it lists Y
            wait_until(lambda: statuses() == ["delivered"] * 20, what="A to send them")
            assert len(reports_for_y()) == 20  # each once, with Y's own credentials

            a.use_cases.outbox.stop()
            for _ in range(10):
                assert api.post("/v1/claims", json=_paid(Y)).status_code == 200
        wait_until(lambda: statuses().count("held") == 10, what="B to hold the next 10")
        a.stop()  # only B is left, still without Y: they stay held
        write_b(X, Y)  # the rolling change reaches B
        assert daemon_b.reload() is True
        wait_until(
            lambda: statuses(daemon_b) == ["delivered"] * 30, what="B to send them after its reload"
        )
        assert len(reports_for_y()) == 30
    finally:
        sandbox.stop()
