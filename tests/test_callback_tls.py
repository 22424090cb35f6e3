"""The callback receiver over TLS (issue 32): under load, with slow handshakes beside
it, and with a certificate that has expired or soon will (trustme). A daemon in this
process, the receiver its second listener (decision 0045); the senders verify the
certificate as the PA service does."""

from __future__ import annotations

import datetime as dt
import json
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from tests.support import NO_SERVICE

AUTH = ("pa-service", "cb-secret-7731")


def _certificate(tmp_path: Path, ca: trustme.CA, days: float) -> dict[str, str]:
    now = dt.datetime.now(dt.UTC)
    leaf = ca.issue_cert(
        "127.0.0.1",
        not_before=now - dt.timedelta(days=400),
        not_after=now + dt.timedelta(days=days),
    )
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return {"tls_cert": str(cert), "tls_key": str(key)}


def _daemon(make_daemon: Any, tls: dict[str, str]) -> Any:
    return make_daemon(
        callbacks={**tls, "username": AUTH[0], "password": AUTH[1]},
        sandbox={"enabled": False},
        service={**NO_SERVICE, "probe_seconds": 0},
    )


def _trusting(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


@pytest.mark.slow
def test_callbacks_over_tls_under_load_with_stalled_handshakes_are_all_kept_once(
    tmp_path: Path, make_daemon: Any
) -> None:
    """16 senders post 2,000 distinct callbacks over TLS while 200 connections open
    the TLS port and never finish (or never start) their handshake: every callback is
    answered 200 and stored exactly once."""
    ca = trustme.CA()
    d = _daemon(make_daemon, _certificate(tmp_path, ca, days=365))
    url = f"{d.callback_server.url}/callbacks/pharmacy"
    assert url.startswith("https://")
    host, port = d.callback_server.url.removeprefix("https://").split(":")
    stalled: list[socket.socket] = []
    for n in range(200):
        s = socket.create_connection((host, int(port)), timeout=5)
        if n % 2:  # half send the start of a handshake and nothing more
            s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        stalled.append(s)
    total, senders = 2000, 16
    acked: list[list[str]] = [[] for _ in range(senders)]
    slowest = [0.0] * senders
    ctx = _trusting(ca)

    def send(k: int) -> None:
        with httpx.Client(verify=ctx, auth=AUTH, timeout=20) as c:
            for n in range(k, total, senders):
                key = f"tls-{n}"
                body = {"request": {"id": f"TLS{n % 300:03d}", "workflow_status": "New",
                                    "delivery_id": key}}  # fmt: skip
                t0 = time.monotonic()
                r = c.post(url, content=json.dumps(body))
                slowest[k] = max(slowest[k], time.monotonic() - t0)
                if r.status_code == 200:
                    acked[k].append(key)

    started = time.monotonic()
    threads = [threading.Thread(target=send, args=(k,)) for k in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    took = time.monotonic() - started
    for s in stalled:
        s.close()
    got = [key for keys in acked for key in keys]
    rows = d.store.query("SELECT dedupe_key, count(*) AS n FROM callbacks GROUP BY dedupe_key")
    stored = {r["dedupe_key"].removeprefix("delivery:"): r["n"] for r in rows}
    print(
        f"\ntls drill: {total} callbacks over TLS from {senders} senders beside 200 stalled"
        f" handshakes: {len(got)} acknowledged, {len(stored)} stored, in {took:.1f} s"
        f" ({total / took:.0f}/s); slowest answer {max(slowest):.2f} s"
    )
    assert len(got) == total
    assert set(got) <= stored.keys() and all(n == 1 for n in stored.values())


def test_an_expired_certificate_is_refused_by_the_service_and_said_by_the_daemon(
    tmp_path: Path, make_daemon: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The service refuses a certificate that has expired, so no callback arrives: the
    daemon says so in its log at start and in /healthz (degraded) while it lasts."""
    ca = trustme.CA()
    caplog.set_level("INFO", logger="pa_bridge")
    d = _daemon(make_daemon, _certificate(tmp_path, ca, days=-2))
    with (
        httpx.Client(verify=_trusting(ca), auth=AUTH, timeout=10) as service,
        pytest.raises(httpx.ConnectError, match="expired"),
    ):
        service.post(f"{d.callback_server.url}/callbacks/pharmacy", json={"request": {}})
    health = httpx.get(f"{d.intake_server.url}/healthz").json()
    assert health["status"] == "degraded"
    assert "callbacks_certificate_expired" in health["degraded"]
    assert health["callbacks_certificate_expires_at"] < dt.datetime.now(dt.UTC).isoformat()
    said = [r for r in caplog.records if getattr(r, "event", "") == "callbacks.certificate_expired"]
    assert said and said[0].levelname == "ERROR"


def test_a_certificate_about_to_expire_is_said_while_callbacks_still_arrive(
    tmp_path: Path, make_daemon: Any
) -> None:
    ca = trustme.CA()
    d = _daemon(make_daemon, _certificate(tmp_path, ca, days=10))
    with httpx.Client(verify=_trusting(ca), auth=AUTH, timeout=10) as service:
        body = {"request": {"id": "TLSEXP1", "workflow_status": "New"}}
        r = service.post(f"{d.callback_server.url}/callbacks/pharmacy", json=body)
        assert r.status_code == 200
    health = httpx.get(f"{d.intake_server.url}/healthz").json()
    assert health["status"] == "degraded"
    assert health["degraded"] == ["callbacks_certificate_expiring"]


def test_the_tap_listeners_expired_certificate_is_said_in_healthz_and_the_log(
    tmp_path: Path, make_daemon: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A dispensing system refuses an expired certificate on the tap (or inline)
    listener, so no copy arrives: said as the callback listener's is, under its name."""
    ca = trustme.CA()
    caplog.set_level("INFO", logger="pa_bridge")
    d = make_daemon(
        tap={"listen": "127.0.0.1:0", **_certificate(tmp_path, ca, days=-2)},
        sandbox={"enabled": False},
        service={**NO_SERVICE, "probe_seconds": 0},
    )
    health = httpx.get(f"{d.intake_server.url}/healthz").json()
    assert health["status"] == "degraded"
    assert "tap_certificate_expired" in health["degraded"]
    assert not any(r.startswith("callbacks_certificate") for r in health["degraded"])
    assert health["tap_certificate_expires_at"] < dt.datetime.now(dt.UTC).isoformat()
    assert "callbacks_certificate_expires_at" not in health
    said = [r for r in caplog.records if getattr(r, "event", "") == "tap.certificate_expired"]
    assert said and said[0].levelname == "ERROR"
