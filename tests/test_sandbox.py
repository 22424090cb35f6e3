"""The sandbox PA service: its test payer table, callbacks, persistence and CLI.
Real HTTP on 127.0.0.1; waits are conditions with deadlines, never sleeps."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trustme

from pa_bridge.client import OUTCOME_VARIABLES, PaServiceClient, outcome_variables, pa_id_from_url
from pa_bridge.sandbox import (
    SANDBOX_API_KEY,
    SANDBOX_PASSWORD,
    SANDBOX_USERNAME,
    SandboxConfig,
    SandboxServer,
)
from pa_bridge.wsgi import server_tls_context

from .builders import (
    CARDHOLDER_ID,
    PATIENT_DOB,
    PATIENT_FIRST,
    PATIENT_LAST,
    REJECT_75,
    Claim,
    Rx,
    request,
    request_bytes,
    response,
)
from .fakes import CallbackReceiver, wait_until

FAST = {"step_seconds": 0.05, "retry_base_seconds": 0.02, "retry_max_seconds": 0.2}
FINAL = [("New", None), ("PA Request", None)]


def creds(**kw: str) -> dict[str, str]:
    return {
        "username": SANDBOX_USERNAME,
        "password": SANDBOX_PASSWORD,
        "api_key": SANDBOX_API_KEY,
        **kw,
    }


def claim_form(claim: Claim | None = None, **kw: str) -> dict[str, str]:
    return creds(ncpdp_claim=request_bytes(claim or Claim()).decode("latin-1"), **kw)


@pytest.fixture
def receiver() -> Iterator[CallbackReceiver]:
    with CallbackReceiver() as r:
        yield r


@pytest.fixture
def sandbox(receiver: CallbackReceiver) -> Iterator[SandboxServer]:
    with SandboxServer(SandboxConfig(callback_url=receiver.url, **FAST)) as sb:  # type: ignore[arg-type]
        yield sb


def post_claim(sb: SandboxServer, suffix: str = "", **form: str) -> httpx.Response:
    """POST to the claim interface; ``suffix``: "" (default format), "json", "empty"."""
    return httpx.post(sb.url + "/cmmimport/" + suffix, data=form)


def links(r: httpx.Response) -> list[str]:
    """The PA links of a default-format answer: one bare URL per line."""
    assert r.status_code == 200, r.text
    return r.text.split()


def ids(r: httpx.Response) -> list[str]:
    return [str(pa_id_from_url(u)) for u in links(r)]


def pas(sb: SandboxServer) -> list[dict[str, Any]]:
    data = httpx.get(sb.url + "/sandbox/pas").json()
    return list(data["pas"])


# --------------------------------------------------------------------------- basics


def test_ping(sandbox: SandboxServer) -> None:
    r = httpx.get(sandbox.url + "/_ping")
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_missing_variables_are_each_named(sandbox: SandboxServer) -> None:
    r = post_claim(sandbox, username=SANDBOX_USERNAME)
    assert r.status_code == 404 and r.headers["content-type"].startswith("text/html")
    paragraphs = re.findall(r"<p>([^<]*)</p>", r.text)
    assert paragraphs == [
        f"Missing POST variable: {v}" for v in ("password", "api_key", "ncpdp_claim")
    ]


@pytest.mark.parametrize("field", ["username", "password", "api_key"])
def test_wrong_credentials_are_403(sandbox: SandboxServer, field: str) -> None:
    r = post_claim(sandbox, **claim_form(None, **{field: "wrong"}))
    assert r.status_code == 403
    assert SANDBOX_PASSWORD not in r.text and "wrong" not in r.text
    assert pas(sandbox) == []


def test_unparseable_claim_is_500_with_the_parse_error(sandbox: SandboxServer) -> None:
    raw = request_bytes().decode("latin-1")
    broken = raw[:60] + "\x1e\x1e" + raw[60:]
    r = post_claim(sandbox, **creds(ncpdp_claim=broken))
    assert r.status_code == 500
    assert "byte offset" in re.findall(r"<p>([^<]*)</p>", r.text)[0]
    r = post_claim(sandbox, **creds(ncpdp_claim="garbage"))
    assert r.status_code == 500


def test_unknown_ndc_is_422(sandbox: SandboxServer) -> None:
    r = post_claim(sandbox, **claim_form(Claim(rxs=(Rx(product_id="00000000000"),))))
    assert r.status_code == 422
    assert pas(sandbox) == []


def test_three_formats(sandbox: SandboxServer) -> None:
    lines = post_claim(sandbox, "", **claim_form(Claim(rxs=(Rx(rx_number="1"),))))
    assert lines.status_code == 200 and "text/html" in lines.headers["content-type"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/request/view/\w{6}\?token_id=\S+\r\n", lines.text)
    assert "<" not in lines.text  # bare URL lines, no markup
    js = post_claim(sandbox, "json", **claim_form(Claim(rxs=(Rx(rx_number="2"),))))
    assert js.status_code == 200 and js.headers["content-type"] == "application/json"
    item = js.json()["transactions"][0]["prior_auth"]
    assert (
        len(item["key"]) == 6
        and f"/request/view/{item['key']}?token_id=" in item["open_in_browser"]
    )
    empty = post_claim(sandbox, "empty", **claim_form(Claim(rxs=(Rx(rx_number="3"),))))
    assert empty.status_code == 200 and empty.content == b""
    assert "location" not in empty.headers
    assert len(pas(sandbox)) == 3
    # the claim interface without its trailing slash answers alike
    bare = httpx.post(sandbox.url + "/cmmimport", data=claim_form(Claim(rxs=(Rx(rx_number="4"),))))
    assert bare.status_code == 200 and "/request/view/" in bare.text


def test_framed_and_unframed_claims_are_accepted_and_recorded(sandbox: SandboxServer) -> None:
    raw = request_bytes(Claim(rxs=(Rx(rx_number="21"),))).decode("latin-1")
    framed = post_claim(sandbox, **creds(ncpdp_claim="\x02" + raw + "\x03"))
    bare = post_claim(sandbox, **claim_form(Claim(rxs=(Rx(rx_number="22"),))))
    assert len(ids(framed)) == 1 and len(ids(bare)) == 1
    seen = httpx.get(sandbox.url + "/sandbox/claims").json()["claims"]
    assert [c["framed"] for c in seen] == [True, False]


def test_several_transactions_make_several_pas(sandbox: SandboxServer) -> None:
    claim = Claim(rxs=(Rx(rx_number="11"), Rx(rx_number="12")))
    r = post_claim(sandbox, **claim_form(claim))
    assert len(set(ids(r))) == 2 and r.text.count("\r\n") == 2


def test_pa_page_needs_its_token(sandbox: SandboxServer) -> None:
    url = links(post_claim(sandbox, **claim_form()))[0]
    page = httpx.get(url)
    assert page.status_code == 200 and "Status:" in page.text
    assert httpx.get(url.split("?")[0] + "?token_id=nope").status_code == 403
    assert httpx.get(sandbox.url + "/request/view/NOSUCH?token_id=x").status_code == 404


# --------------------------------------------------------------------------- duplicates


def test_duplicate_b1_returns_the_original_pa(sandbox: SandboxServer) -> None:
    first = post_claim(sandbox, **claim_form())
    again = post_claim(sandbox, **claim_form())
    # answered exactly alike: HTTP 200 and the same link; nothing marks the duplicate
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert len(pas(sandbox)) == 1
    # Another fill of the same Rx is another PA.
    refill = post_claim(sandbox, **claim_form(Claim(rxs=(Rx(fill_number="01"),))))
    assert ids(refill) != ids(first) and len(pas(sandbox)) == 2


# --------------------------------------------------------------------------- callbacks


@pytest.mark.parametrize(
    ("group", "override", "outcome"),
    [
        ("SYNDENY01", None, "Unfavorable"),
        ("SYNPEND01", None, "Pending"),
        ("SYNGRP01", None, "Favorable"),
        ("SYNGRP01", "XDENYX", "Unfavorable"),  # the group_id POST variable wins
    ],
)
def test_status_moves_with_one_callback_per_change(
    sandbox: SandboxServer,
    receiver: CallbackReceiver,
    group: str,
    override: str | None,
    outcome: str,
) -> None:
    extra = {"group_id": override} if override else {}
    pa_id = ids(post_claim(sandbox, **claim_form(Claim(group_id=group), **extra)))[0]
    expected = [*FINAL, ("PA Response", outcome)]
    wait_until(lambda: len(receiver.statuses(pa_id)) >= 3, what="three callbacks")
    assert receiver.statuses(pa_id) == expected
    calls = receiver.for_pa(pa_id)
    # shaped like the real request object (the evidence's valid_request.json)
    assert all("updated_at" not in c and c["events"] == [] for c in calls)
    assert len({c["created_at"] for c in calls}) == 1
    last = calls[-1]
    assert last["is_epa"] is True and last["urgent"] == "false"
    assert last["payer"]["group_id"] == (override or group)
    assert last["tokens"][0]["request_id"] == pa_id
    assert last["tokens"][0]["html_url"].endswith(
        f"/request/view/{pa_id}?token_id={last['tokens'][0]['id']}"
    )
    assert last["html_url"].endswith(f"/request/view/{pa_id}")
    assert last["pdf_url"].endswith(f"/requests/{pa_id}/download")
    assert last["prescription"]["ndc"] == "00093505601"
    assert last["prescription"]["quantity"] == "30" and last["prescription"]["days_supply"] == "30"
    assert len(last["prescription"]["drug_id"]) == 6  # a drug id, not the NDC
    history = next(p for p in pas(sandbox) if p["id"] == pa_id)["history"]
    assert [(h["workflow_status"], h["plan_outcome"]) for h in history] == expected


def test_callbacks_carry_no_patient_data(
    sandbox: SandboxServer, receiver: CallbackReceiver
) -> None:
    pa_id = ids(post_claim(sandbox, **claim_form()))[0]
    wait_until(lambda: len(receiver.statuses(pa_id)) >= 3)
    text = str(receiver.for_pa(pa_id)) + str(pas(sandbox))
    for value in (PATIENT_FIRST, PATIENT_LAST, PATIENT_DOB, CARDHOLDER_ID):
        assert value not in text


def test_callbacks_are_retried_until_delivered_in_order() -> None:
    with (
        CallbackReceiver(fail_first=3) as receiver,
        SandboxServer(SandboxConfig(callback_url=receiver.url, **FAST)) as sb,  # type: ignore[arg-type]
    ):
        pa_id = ids(post_claim(sb, **claim_form()))[0]
        wait_until(lambda: len(receiver.statuses(pa_id)) >= 3, what="delivery after retries")
        assert receiver.statuses(pa_id) == [*FINAL, ("PA Response", "Favorable")]
        assert receiver.attempts == 6
        wait_until(lambda: pas(sb)[0]["callbacks"] == {"attempts": 6, "delivered": 3})


def test_callbacks_to_an_unreachable_target_are_retried() -> None:
    with CallbackReceiver() as receiver:
        url = receiver.url
    # The receiver is gone: deliveries fail with connection errors until it is back.
    with SandboxServer(SandboxConfig(callback_url=url, **FAST)) as sb:  # type: ignore[arg-type]
        post_claim(sb, **claim_form())
        wait_until(lambda: pas(sb)[0]["callbacks"]["attempts"] >= 2)
        with CallbackReceiver() as second:
            httpx.post(sb.url + "/sandbox/callback-url", json={"url": second.url})
            wait_until(lambda: len(second.statuses()) >= 3)
            assert second.statuses() == [*FINAL, ("PA Response", "Favorable")]


def test_callback_basic_credentials() -> None:
    with (
        CallbackReceiver(username="cb-user", password="cb-pass") as receiver,
        SandboxServer(SandboxConfig(**FAST)) as sb,  # type: ignore[arg-type]
    ):
        r = httpx.post(
            sb.url + "/sandbox/callback-url",
            data={"url": receiver.url, "username": "cb-user", "password": "cb-pass"},
        )
        assert r.status_code == 200 and "cb-pass" not in r.text
        post_claim(sb, **claim_form())
        wait_until(lambda: len(receiver.statuses()) >= 3)
        assert receiver.auth_failures == 0


def test_https_callback_target(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_path, key_path, ca_path = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca.pem"
    cert.cert_chain_pems[0].write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    ca.cert_pem.write_to_path(str(ca_path))
    context = server_tls_context(cert_path, key_path)
    with CallbackReceiver(ssl_context=context) as receiver:
        assert receiver.url.startswith("https://")
        config = SandboxConfig(callback_url=receiver.url, callback_verify=str(ca_path), **FAST)  # type: ignore[arg-type]
        with SandboxServer(config) as sb:
            post_claim(sb, **claim_form())
            wait_until(lambda: len(receiver.statuses()) >= 3)


def test_b2_deletes_with_a_delete_event_callback(
    sandbox: SandboxServer, receiver: CallbackReceiver
) -> None:
    pa_id = ids(post_claim(sandbox, **claim_form()))[0]
    wait_until(lambda: len(receiver.statuses(pa_id)) >= 3)
    b2 = post_claim(sandbox, **claim_form(Claim(code="B2")))
    assert ids(b2) == [pa_id]
    wait_until(lambda: len(receiver.for_pa(pa_id)) >= 4, what="DELETE callback")
    last = receiver.for_pa(pa_id)[-1]
    assert [e["type"] for e in last["events"]] == ["DELETE"]
    assert last["events"][0]["time"] >= last["created_at"]
    assert httpx.get(links(b2)[0]).status_code == 404
    # A repeated B2 answers for the original PA and sends no second DELETE.
    again = post_claim(sandbox, **claim_form(Claim(code="B2")))
    assert ids(again) == [pa_id]
    assert [e["type"] for e in pas(sandbox)[0]["events"]] == ["DELETE"]
    # After deletion, the same B1 starts a new PA.
    new = post_claim(sandbox, **claim_form())
    assert ids(new)[0] != pa_id


def test_b2_mid_workflow_stops_the_steps(
    sandbox: SandboxServer, receiver: CallbackReceiver
) -> None:
    # Deleted right after creation, before the status steps are done.
    pa_id = ids(post_claim(sandbox, **claim_form()))[0]
    post_claim(sandbox, **claim_form(Claim(code="B2")))
    wait_until(lambda: any(c["events"] for c in receiver.for_pa(pa_id)), what="DELETE callback")
    final = next(p for p in pas(sandbox) if p["id"] == pa_id)
    assert final["deleted"] is True


def test_b2_for_an_unknown_claim(sandbox: SandboxServer) -> None:
    r = post_claim(sandbox, **claim_form(Claim(code="B2")))
    assert r.status_code == 200 and links(r) == []


# --------------------------------------------------------------------------- outcomes


def outcome_form(**kw: str) -> dict[str, str]:
    v = outcome_variables(request(), response([REJECT_75]), api_key=SANDBOX_API_KEY)
    v.update(kw)
    return v


def test_outcomes_json_text_and_page(sandbox: SandboxServer) -> None:
    js = httpx.post(sandbox.url + "/outcomes.json", data=outcome_form())
    assert js.status_code == 200 and js.json()["button_label"] == "Submit PA"
    txt = httpx.post(sandbox.url + "/outcomes.txt", data=outcome_form(rejection_code="70"))
    label, message = txt.text.split(";", 1)
    assert label == "Submit PA" and "not covered" in message
    other = httpx.post(
        sandbox.url + "/outcomes.txt",
        data=outcome_form(rejection_code="MR", rejection_message="NOT ON FORMULARY"),
    )
    assert other.text == ";NOT ON FORMULARY"
    page = httpx.get(sandbox.url + "/outcomes")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for name in OUTCOME_VARIABLES:
        assert name in page.text


def test_outcomes_errors(sandbox: SandboxServer) -> None:
    form = outcome_form()
    del form["prescriber_fax"], form["patient_age"]
    r = httpx.post(sandbox.url + "/outcomes.json", data=form)
    assert r.status_code == 404
    assert re.findall(r"<p>([^<]*)</p>", r.text) == [
        "Missing POST variable: patient_age",
        "Missing POST variable: prescriber_fax",
    ]
    r = httpx.post(sandbox.url + "/outcomes.json", data=outcome_form(api_key="bad"))
    assert r.status_code == 403 and "<p>Unknown api_key" in r.text
    r = httpx.post(sandbox.url + "/outcomes.json", data=outcome_form(bin="999997"))
    assert r.status_code == 500 and "<p>Outcomes drill" in r.text


def test_trickle_drill_really_trickles() -> None:
    config = SandboxConfig(trickle_seconds=0.3)
    with SandboxServer(config) as sb, httpx.Client() as c:
        chunks = []
        with c.stream("POST", sb.url + "/outcomes.json", data=outcome_form(bin="999996")) as r:
            chunks = list(r.iter_raw())
        assert len(chunks) > 10  # many small pieces, not one answer
        assert b"".join(chunks).startswith(b'{"button_label"')


def test_stopping_wakes_a_stalled_drill() -> None:
    # A stall drill in flight must not hold up stop(): the handler waits on the
    # sandbox's stop event, and the client's deadline has long returned.
    sb = SandboxServer(SandboxConfig()).start()
    with PaServiceClient(**sb.client_kwargs()) as c:
        result = c.outcomes(outcome_form(bin="999998"), budget_ms=200, fallback_message="f")
        assert result.source == "fallback"
        sb.stop()


# --------------------------------------------------------------------------- dashboard


def test_dashboard(sandbox: SandboxServer) -> None:
    r = httpx.post(
        sandbox.url + "/dashboard/login",
        data={"username": SANDBOX_USERNAME, "plaintext_password": SANDBOX_PASSWORD},
    )
    assert r.status_code == 200
    token = r.text
    post_claim(sandbox, **claim_form())
    page = httpx.get(sandbox.dashboard_url, params={"token": token})
    assert page.status_code == 200 and "/request/view/" in page.text
    assert httpx.get(sandbox.dashboard_url, params={"token": "x"}).status_code == 403
    bad = httpx.post(
        sandbox.url + "/dashboard/login",
        data={"username": SANDBOX_USERNAME, "plaintext_password": "no"},
    )
    assert bad.status_code == 403
    missing = httpx.post(sandbox.url + "/dashboard/login", data={"username": "x"})
    assert missing.status_code == 404 and "plaintext_password" in missing.text


# --------------------------------------------------------------------------- persistence, CLI


def test_sqlite_keeps_pas_across_restarts(tmp_path: Path) -> None:
    db = str(tmp_path / "sandbox.sqlite3")
    with SandboxServer(SandboxConfig(db_path=db, step_seconds=0.05)) as sb:
        first = ids(post_claim(sb, **claim_form()))[0]
    with SandboxServer(SandboxConfig(db_path=db, step_seconds=0.05)) as sb:
        again = post_claim(sb, **claim_form())
        assert ids(again) == [first]
        # An unfinished workflow resumes after the restart.
        wait_until(lambda: pas(sb)[0]["workflow_status"] == "PA Response")


def test_pas_kept_by_an_older_sandbox_get_links_on_this_ones_address(tmp_path: Path) -> None:
    db = str(tmp_path / "sandbox.sqlite3")
    with SandboxServer(SandboxConfig(db_path=db, step_seconds=0.05)) as sb:
        first = ids(post_claim(sb, **claim_form()))[0]
    conn = sqlite3.connect(db)  # an older sandbox kept no portal with its PAs
    (data,) = conn.execute("SELECT data FROM pa WHERE id = ?", (first,)).fetchone()
    old = {k: v for k, v in json.loads(data).items() if k != "portal"}
    with conn:
        conn.execute("UPDATE pa SET data = ? WHERE id = ?", (json.dumps(old), first))
    conn.close()
    with SandboxServer(SandboxConfig(db_path=db, step_seconds=0.05)) as sb:
        (link,) = links(post_claim(sb, **claim_form()))
        assert link.startswith(sb.url + f"/request/view/{first}?token_id=")
        assert httpx.get(link).status_code == 200


@pytest.mark.slow
def test_cli_runs_until_sigterm() -> None:
    exe = Path(sys.executable).parent / "pa-bridge"
    proc = subprocess.Popen(
        [str(exe), "sandbox", "--port", "0", "--step-seconds", "0.05"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("pa-bridge sandbox listening on http://127.0.0.1:")
        url = first.rsplit(" ", 1)[1].strip()
        assert httpx.get(url + "/_ping").json()["status"] == "ok"
        rest = []
        for _ in range(7):
            rest.append(proc.stdout.readline())
        assert any(SANDBOX_API_KEY in line for line in rest)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert "stopped" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_client_end_to_end_against_the_sandbox(
    sandbox: SandboxServer, receiver: CallbackReceiver
) -> None:
    with PaServiceClient(**sandbox.client_kwargs()) as c:
        result = c.submit_claim(request_bytes(Claim(group_id="GRPPEND")))
        wait_until(lambda: len(receiver.statuses(result.pa_id)) >= 3)
        assert receiver.statuses(result.pa_id)[-1] == ("PA Response", "Pending")
        outcome = c.outcomes(outcome_form(), fallback_message="orig")
        assert outcome.source == "outcomes" and outcome.button_label == "Submit PA"
