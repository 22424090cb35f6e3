"""`pa-bridge doctor` against a real sandbox and real sockets (issue 27): each store's
own credentials tried and named on its line, a 404 read for what it is, unreadable
secrets blamed on themselves, the listen addresses free or held by this daemon, and
the dispensing system's webhook reachable."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import Result

from pa_bridge.sandbox import (
    SANDBOX_API_KEY,
    SANDBOX_PASSWORD,
    SANDBOX_USERNAME,
    SandboxConfig,
    SandboxPharmacy,
    SandboxServer,
)
from tests.support import Cli, RecordingService, free_port

A, B, C = "1111111", "2222222", "3333333"  # synthetic NCPDP provider ids
CREDS = {
    A: ("store-a", "store-a-password-1", "store-a-api-key-1"),
    B: ("store-b", "store-b-password-2", "store-b-api-key-2"),
    C: ("store-c", "store-c-password-3", "store-c-api-key-3"),
}


@pytest.fixture
def service() -> Iterator[SandboxServer]:
    stores = tuple(SandboxPharmacy(*CREDS[p], provider_id=p) for p in (A, B, C))
    server = SandboxServer(SandboxConfig(step_seconds=60, pharmacies=stores), port=0).start()
    try:
        yield server
    finally:
        server.stop()


def _config(tmp_path: Path, service: SandboxServer, body: str) -> Path:
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(
        f'[storage]\npath = "{tmp_path / "db" / "pa.sqlite3"}"\n'
        "[service]\n"
        f'claim_url = "{service.url}/cmmimport/"\n'
        f'outcomes_url = "{service.url}/outcomes"\n'
        f'dashboard_url = "{service.url}/dashboard"\n' + body
    )
    return cfg


def _store(pid: str, password: str | None = None, **extra: str) -> str:
    user, pw, key = CREDS[pid]
    keys = {"provider_id": pid, "username": user, "api_key": key, **extra}
    if "password_file" not in extra:
        keys["password"] = password or pw
    return "[[pharmacies]]\n" + "".join(f'{k} = "{v}"\n' for k, v in keys.items())


def _line(r: Result, start: str) -> str:
    return next(ln for ln in r.stdout.splitlines() if start in ln)


def test_doctor_tries_each_stores_own_credentials_and_names_whose(
    tmp_path: Path, service: SandboxServer, cli: Cli
) -> None:
    """Before: only the first store's were tried, and "0 FAIL" with B's password wrong."""
    cfg = _config(
        tmp_path, service, _store(A) + _store(B, password="not-store-b-password") + _store(C)
    )
    r = cli("doctor", "--config", str(cfg))
    assert r.exit_code == 1, r.stdout
    bad = _line(r, f"service claim interface (pharmacy {B})")
    assert bad.startswith("FAIL") and "refused the credentials (HTTP 403)" in bad
    assert "[[pharmacies]] entry" in bad
    assert _line(r, f"service dashboard login (pharmacy {B})").startswith("FAIL")
    for pid in (A, C):
        line = _line(r, f"service claim interface (pharmacy {pid})")
        assert line.startswith("ok") and "credentials accepted" in line
        assert _line(r, f"service dashboard login (pharmacy {pid})").startswith("ok")
    assert "not-store-b-password" not in r.output and CREDS[A][1] not in r.output


def test_unreadable_secrets_are_blamed_not_the_dashboard_url(
    tmp_path: Path, service: SandboxServer, cli: Cli
) -> None:
    """Before: "credentials accepted" on the claim interface (the 404 named the claim
    among the missing variables) and "check service.dashboard_url" for the login."""
    cfg = _config(
        tmp_path,
        service,
        f'username = "{SANDBOX_USERNAME}"\npassword_file = "{tmp_path / "nope"}"\n'
        f'api_key = "{SANDBOX_API_KEY}"\n',
    )
    r = cli("doctor", "--config", str(cfg))
    assert r.exit_code == 1
    assert "credentials accepted" not in r.stdout
    assert "service.dashboard_url" not in r.stdout
    assert "FAIL  secret service.password: missing: cannot read" in r.stdout
    line = _line(r, "service credentials ([service])")
    assert line.startswith("warn") and "not tried: password missing" in line


def test_a_wrong_password_is_refused_before_missing_variables_are_named(
    service: SandboxServer,
) -> None:
    """The sandbox checks credentials as the service does: 403 before any 404."""
    form = {"username": SANDBOX_USERNAME, "password": "wrong-password", "api_key": SANDBOX_API_KEY}
    assert httpx.post(f"{service.url}/cmmimport/", data=form).status_code == 403
    right = {**form, "password": SANDBOX_PASSWORD}
    r = httpx.post(f"{service.url}/cmmimport/", data=right)
    assert r.status_code == 404 and "ncpdp_claim" in r.text and "password" not in r.text
    login = {"username": SANDBOX_USERNAME, "plaintext_password": "wrong-password"}
    assert httpx.post(f"{service.url}/dashboard/login", data=login).status_code == 403
    assert httpx.post(f"{service.url}/outcomes.json", data={"api_key": "x"}).status_code == 403


def test_doctor_reads_a_404_for_what_it_is(tmp_path: Path, cli: Cli) -> None:
    """A 404 naming only the claim: credentials taken; naming a credential: it went
    empty; naming nothing: a wrong address."""
    from flask import Flask

    from pa_bridge.runtime import WsgiServer

    answers: dict[str, str] = {}
    app = Flask("claim-404s")

    @app.post("/cmmimport/")
    def claim() -> tuple[str, int]:
        return answers["body"], 404

    port = free_port()
    server = WsgiServer(app, "127.0.0.1", port, name="claim-404s")
    server.start()
    try:
        cfg = tmp_path / "c.toml"
        cfg.write_text(
            f'[storage]\npath = "{tmp_path / "db.sqlite3"}"\n[service]\n'
            f'claim_url = "http://127.0.0.1:{port}/cmmimport/"\n'
            f'outcomes_url = "http://127.0.0.1:{port}/outcomes"\n'
            'username = "u"\npassword = "p"\napi_key = "k"\n'
        )

        def line(body: str) -> str:
            answers["body"] = body
            return _line(cli("doctor", "--config", str(cfg)), "service claim interface")

        assert line("<p>Missing POST variable: ncpdp_claim</p>").startswith("ok")
        asked = line("<p>Missing POST variable: api_key</p><p>Missing: ncpdp_claim</p>")
        assert asked.startswith("FAIL") and "asks for api_key, sent empty" in asked
        nothing = line("<h1>Not Found</h1>")
        assert nothing.startswith("FAIL") and "nothing answers at service.claim_url" in nothing
    finally:
        server.stop()


# ---- listeners and the webhook ---------------------------------------------------------------
def _listen_config(tmp_path: Path, intake: str, callbacks: str, extra: str = "") -> Path:
    cfg = tmp_path / "listen.toml"
    cfg.write_text(
        f'[storage]\npath = "{tmp_path / "pa-bridge.sqlite3"}"\n'
        f'[intake]\nlisten = "{intake}"\n'
        f'[callbacks]\nlisten = "{callbacks}"\n{extra}'
        '[sandbox]\nlisten = "127.0.0.1:0"\n'
    )
    return cfg


def test_doctor_names_a_listen_address_another_program_holds(tmp_path: Path, cli: Cli) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        taken = f"127.0.0.1:{busy.getsockname()[1]}"
        free = f"127.0.0.1:{free_port()}"
        r = cli("doctor", "--config", str(_listen_config(tmp_path, free, taken)))
    finally:
        busy.close()
    assert r.exit_code == 1
    assert _line(r, "listen intake.listen").startswith(
        f"ok    listen intake.listen: {free} is free"
    )
    line = _line(r, "listen callbacks.listen")
    assert line.startswith("FAIL") and f"{taken} is in use by another program" in line
    assert "set callbacks.listen to a free port" in line


def test_doctor_says_a_running_daemon_holds_its_own_addresses(
    tmp_path: Path, make_daemon: Any, cli: Cli
) -> None:
    d = make_daemon(
        storage={"path": str(tmp_path / "pa-bridge.sqlite3")}, tap={"listen": "127.0.0.1:0"}
    )
    intake = f"127.0.0.1:{d.intake_server.address[1]}"
    callbacks = f"127.0.0.1:{d.callback_server.address[1]}"
    tap = f'[tap]\nlisten = "127.0.0.1:{d.wire.tap_address[1]}"\n'
    r = cli("doctor", "--config", str(_listen_config(tmp_path, intake, callbacks, tap)))
    for key in ("intake.listen", "callbacks.listen", "tap.listen"):
        line = _line(r, f"listen {key}")
        assert line.startswith("ok") and "held by this pa-bridge (daemon " in line, line


def test_doctor_checks_the_webhook_answers(tmp_path: Path, cli: Cli) -> None:
    port = free_port()
    hook = f'forward_url = "http://127.0.0.1:{port}/claim"\n'
    cfg = _listen_config(tmp_path, "127.0.0.1:0", "127.0.0.1:0", hook)
    down = _line(cli("doctor", "--config", str(cfg)), "webhook callbacks.forward_url")
    assert down.startswith("FAIL") and "unreachable: connection refused" in down
    with RecordingService(port):
        up = _line(cli("doctor", "--config", str(cfg)), "webhook callbacks.forward_url")
    assert up.startswith("ok") and f"http://127.0.0.1:{port} answers (HTTP 405" in up


def test_doctor_counts_items_held_for_the_configuration(tmp_path: Path, cli: Cli) -> None:
    from pa_bridge.outbox import enqueue
    from pa_bridge.store import Status, Store
    from pa_bridge.store import outbox as queue_items

    db = tmp_path / "pa-bridge.sqlite3"
    with Store(db) as store:
        for held_for in ("configuration", "pharmacy:2222222", "restore"):
            item = store.write(lambda d: enqueue(d, "reversal", {"exchange_id": "x"}))
            store.write(
                lambda d, item=item, held_for=held_for: queue_items.record_attempt(
                    d,
                    item,
                    status=Status.HELD,
                    attempts=1,
                    next_attempt_at=0,
                    last_error="held",
                    now="2026-11-23T00:00:00.000000Z",
                    payload_json="{}",
                    held_for=held_for,
                )
            )
    cfg = _listen_config(tmp_path, "127.0.0.1:0", "127.0.0.1:0")
    queue = [
        ln for ln in cli("doctor", "--config", str(cfg)).stdout.splitlines() if " queue:" in ln
    ]
    assert queue == [
        "warn  queue: 2 item(s) held for pa-bridge's configuration (credentials, an address, a"
        " store not in [[pharmacies]]) -> `pa-bridge queue list --status held` says why; fix"
        " it, then `systemctl reload pa-bridge` sends them (`systemctl restart pa-bridge`"
        " after changing a LoadCredential= file)",
        "warn  queue: 1 item(s) held after a restore, for review -> `pa-bridge queue list"
        " --status held`, then `pa-bridge queue retry ID` or `pa-bridge queue drop ID`",
    ]


# ---- tap and inline (issue 30): their listen addresses and the switch ----------------------
def test_doctor_checks_the_tap_and_inline_listeners_and_the_switch(
    tmp_path: Path, cli: Cli
) -> None:
    import ssl

    import trustme

    from pa_bridge.sandbox.switch import SandboxSwitch

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken, free = f"127.0.0.1:{busy.getsockname()[1]}", f"127.0.0.1:{free_port()}"
    nothing = f"127.0.0.1:{free_port()}"  # no switch there

    def wire(switch: str, tls: str = "switch_tls = false\n") -> Path:
        extra = (
            f'[tap]\nlisten = "{taken}"\n'
            f'[inline]\nlisten = "{free}"\nswitch = ["{switch}", "{nothing}"]\n{tls}'
        )
        return _listen_config(tmp_path, "127.0.0.1:0", "127.0.0.1:0", extra)

    ca, other_ca = trustme.CA(), trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    ca_pem, other_pem = tmp_path / "ca.pem", tmp_path / "other.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    other_ca.cert_pem.write_to_path(str(other_pem))
    try:
        with SandboxSwitch() as plain, SandboxSwitch(ssl_context=server_ctx) as secure:
            r = cli("doctor", "--config", str(wire(plain.address)))
            tls_ok = cli(
                "doctor",
                "--config",
                str(wire(secure.address, f'switch_tls = true\nswitch_ca_file = "{ca_pem}"\n')),
            )
            tls_bad = cli(
                "doctor",
                "--config",
                str(wire(secure.address, f'switch_tls = true\nswitch_ca_file = "{other_pem}"\n')),
            )
    finally:
        busy.close()
    assert r.exit_code == 1
    tap = _line(r, "listen tap.listen")
    assert tap.startswith("FAIL") and f"{taken} is in use by another program" in tap
    assert _line(r, "listen inline.listen").startswith(
        f"ok    listen inline.listen: {free} is free"
    )
    up = _line(r, f"switch {plain.address}")
    assert up.startswith("ok") and "reachable (plain TCP" in up, up
    down = _line(r, f"switch {nothing}")
    assert down.startswith("FAIL") and "unreachable: connection refused" in down, down
    good = _line(tls_ok, f"switch {secure.address}")
    assert good.startswith("ok") and "TLS" in good and "certificate verified" in good, good
    bad = _line(tls_bad, f"switch {secure.address}")
    assert bad.startswith("FAIL") and "certificate" in bad and "switch_ca_file" in bad, bad
