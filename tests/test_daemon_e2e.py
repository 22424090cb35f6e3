"""`pa-bridge serve` as a real process: the embedded default end to end, the PHI scan
of every log line, graceful stop, and the SIGKILL durability drill."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import httpx
import pytest

import ncpdp
from tests import builders as b
from tests.support import DaemonProcess, RecordingService, free_port, wait_until

pytestmark = pytest.mark.slow


def test_embedded_default_end_to_end_without_phi_in_logs(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path, env={"PA_BRIDGE_SANDBOX__STEP_SECONDS": "0.1"}).start()
    try:
        with httpx.Client(base_url=d.url, timeout=10) as api:
            r = api.post(
                "/v1/claims",
                json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75])),
            )
            claim = r.json()
            assert claim["message_source"] == "outcomes" and claim["button_label"]
            pa = api.post(f"/v1/claims/{claim['claim_id']}/pa").json()
            assert api.post(f"/v1/claims/{claim['claim_id']}/pa").json()["pa_id"] == pa["pa_id"]

            def favorable() -> bool:
                got = api.get(f"/v1/pa/{pa['pa_id']}").json()
                seen = [h["workflow_status"] for h in got["history"] if h["source"] == "callback"]
                return (
                    got["workflow_status"] == "PA Response"
                    and got["plan_outcome"] == "Favorable"
                    and {"New", "PA Request", "PA Response"} <= set(seen)
                )

            wait_until(favorable, what="New -> PA Request -> PA Response (Favorable)")

            paid = api.post(
                "/v1/claims", json=b.exchange_json(b.request_bytes(), b.response_bytes([b.PAID]))
            )
            assert paid.status_code == 200
            r = api.post(
                "/v1/reversals", json={"request": b.request_bytes(code="B2").decode("latin-1")}
            )
            assert r.status_code == 200
            wait_until(
                lambda: any(
                    e["type"] == "DELETE" for e in api.get(f"/v1/pa/{pa['pa_id']}").json()["events"]
                ),
                what="DELETE event",
            )
            # the sandbox itself deleted the PA
            started = [json.loads(x) for x in d.log_lines() if '"daemon.sandbox_started"' in x]
            sandbox_url = started[0]["url"]
            pas = httpx.get(f"{sandbox_url}/sandbox/pas").json()
            mine = [
                p
                for p in (pas.get("pas", pas) if isinstance(pas, dict) else pas)
                if p.get("id") == pa["pa_id"]
            ]
            assert mine and any(e.get("type") == "DELETE" for e in mine[0].get("events", []))

        assert d.terminate() == 0  # graceful stop on SIGTERM
        db = tmp_path / "var" / "pa-bridge.sqlite3"
        assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
    finally:
        d.terminate()
    lines = d.log_lines()
    assert any('"claim.accepted"' in x for x in lines)
    for secret in (
        b.PATIENT_FIRST,
        b.PATIENT_LAST,
        b.PATIENT_DOB,
        b.CARDHOLDER_ID,
        "sandbox-password",
    ):
        leaks = [x for x in lines if secret in x]
        assert not leaks, f"{secret!r} appears in the log: {leaks[:2]}"


def test_queued_reports_and_reversals_survive_sigkill(tmp_path: Path) -> None:
    svc_port = free_port()
    cfg = tmp_path / "pa-bridge.toml"
    cfg.write_text(
        f"""
[service]
claim_url = "http://127.0.0.1:{svc_port}/claim"
outcomes_url = "http://127.0.0.1:{svc_port}/outcomes"
dashboard_url = "http://127.0.0.1:{svc_port}/dashboard"
username = "u"
password = "p"
api_key = "k"
timeout_seconds = 2
[storage]
path = "{tmp_path / "db.sqlite3"}"
[queue]
poll_seconds = 0.2
backoff_base_seconds = 0.2
backoff_max_seconds = 0.5
"""
    )
    d = DaemonProcess(tmp_path, config=cfg).start()
    b2s = [b.request_bytes(code="B2", rxs=(b.Rx(rx_number=f"00000500000{i}"),)) for i in range(5)]
    try:
        with httpx.Client(base_url=d.url, timeout=10) as api:
            for i in range(5):
                rx = b.Rx(rx_number=f"00000400000{i}")
                r = api.post(
                    "/v1/claims",
                    json=b.exchange_json(b.request_bytes(rxs=(rx,)), b.response_bytes([b.PAID])),
                )
                assert r.status_code == 200
            for raw in b2s:
                r = api.post("/v1/reversals", json={"request": raw.decode("latin-1")})
                assert r.status_code == 202 and r.json()["status"] == "pending"
    finally:
        d.kill()

    with RecordingService(svc_port) as svc:
        d2 = DaemonProcess(tmp_path, config=cfg).start()
        try:
            wait_until(
                lambda: len(svc.claims) >= 5 and len(svc.outcomes) >= 5,
                timeout=30,
                what="redelivery",
            )
            sent = sorted(c["ncpdp_claim"].encode("latin-1") for c in svc.claims)
            assert sent == sorted(b"\x02" + raw + b"\x03" for raw in b2s)  # framed STX/ETX
            rx_numbers = sorted(o["prescription_reference_number"] for o in svc.outcomes)
            assert [x.lstrip("0") for x in rx_numbers] == [f"400000{i}" for i in range(5)]
            assert all(
                ncpdp.parse(c["ncpdp_claim"], strict=False).transaction_code == "B2"
                for c in svc.claims
            )
        finally:
            d2.terminate()


def test_sandbox_pa_links_still_open_after_a_restart(tmp_path: Path) -> None:
    """The embedded sandbox keeps a fixed port and its PAs on disk."""
    env = {
        "PA_BRIDGE_SANDBOX__LISTEN": f"127.0.0.1:{free_port()}",
        "PA_BRIDGE_SANDBOX__STEP_SECONDS": "0.05",
    }
    d = DaemonProcess(tmp_path, env=env).start()
    try:
        claim = httpx.post(
            f"{d.url}/v1/claims",
            json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75])),
        ).json()
        pa = httpx.post(f"{d.url}/v1/claims/{claim['claim_id']}/pa").json()
        assert httpx.get(pa["url"]).status_code == 200
    finally:
        assert d.terminate() == 0
    d2 = DaemonProcess(tmp_path, env=env).start()
    try:
        r = httpx.get(f"{d2.url}/v1/pa/{pa['pa_id']}/open", follow_redirects=True)
        assert r.status_code == 200 and pa["pa_id"] in r.text
        assert stat.S_IMODE(os.stat(tmp_path / "var" / "sandbox.sqlite3").st_mode) == 0o600
    finally:
        d2.terminate()


def test_a_fatal_signal_leaves_a_line_in_the_log(tmp_path: Path) -> None:
    """SIGBUS (what an unwritable -shm mapping raises in SQLite) kills the process in C;
    the journal still says what happened."""
    import signal

    d = DaemonProcess(tmp_path).start()
    assert d.proc is not None
    os.kill(d.proc.pid, signal.SIGBUS)
    d.proc.wait(20)
    text = d.log.read_text(errors="replace")
    assert "Bus error" in text and "Fatal Python error" in text
