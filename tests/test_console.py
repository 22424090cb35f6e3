"""The pharmacist console: its JSON over HTTP, and the page itself in headless Chromium
(the system browser, driven by Playwright) against an in-process daemon and sandbox."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import httpx

from pa_bridge import worklist
from tests import builders as b
from tests.support import NO_SERVICE, wait_until

TOKEN = "console-test-token-1"
PHI = (b.PATIENT_FIRST, b.PATIENT_LAST, b.PATIENT_DOB, b.CARDHOLDER_ID)


def _post_75(url: str, *, token: str | None = None, **req: Any) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = httpx.post(
        f"{url}/v1/claims",
        json=b.exchange_json(b.request_bytes(**req), b.response_bytes([b.REJECT_75])),
        headers=headers,
        timeout=10,
    )
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    assert body["message_source"] == "outcomes" and body["button_label"]
    return body


def _wait_answer_recorded(daemon: Any, claim_id: str) -> None:
    wait_until(
        lambda: daemon.store.query("SELECT answer_json FROM exchanges WHERE id = ?", [claim_id])[0][
            "answer_json"
        ],
        what="answer recorded",
    )


# ---- the worklist JSON, no browser --------------------------------------------------------


def test_worklist_lists_todays_pa_rejections_without_phi(make_daemon: Any) -> None:
    d = make_daemon()
    url = d.intake_server.url
    answer = _post_75(url)
    httpx.post(
        f"{url}/v1/claims",
        json=b.exchange_json(b.request_bytes(), b.response_bytes([b.PAID])),
        timeout=10,
    )
    _wait_answer_recorded(d, answer["claim_id"])
    r = httpx.get(f"{url}/v1/console/worklist", timeout=10)
    assert r.status_code == 200 and r.headers["Cache-Control"] == "no-store"
    data = r.json()
    assert len(data["claims"]) == 1  # the paid claim is not on the worklist
    row = data["claims"][0]
    assert row["claim_id"] == answer["claim_id"]
    assert row["message"] == answer["message"] and row["button_label"] == answer["button_label"]
    assert row["rx_number"] == "1234567" and row["product_id"] == "00093505601"
    assert row["reject_codes"] == ["75"] and row["pa"] is None
    for word in PHI:
        assert word not in r.text

    pa = httpx.post(f"{url}/v1/claims/{answer['claim_id']}/pa", timeout=10).json()
    data = httpx.get(f"{url}/v1/console/worklist", timeout=10).json()
    assert data["claims"][0]["pa"]["pa_id"] == pa["pa_id"]
    assert [p["pa_id"] for p in data["pas"]] == [pa["pa_id"]]
    assert data["pas"][0]["rx_number"] == "1234567"

    # tomorrow, yesterday's claims are off the list
    assert worklist.claims_today(d.use_cases, time.time() + 86_400) == []
    assert worklist.pas_today(d.use_cases, time.time() + 86_400) == []


def test_several_transactions_give_one_row_per_pa_eligible_transaction(make_daemon: Any) -> None:
    d = make_daemon()
    url = d.intake_server.url
    req = b.request_bytes(rxs=(b.Rx(), b.Rx(rx_number="000001234568", product_id="00093505699")))
    body = httpx.post(
        f"{url}/v1/claims",
        json=b.exchange_json(req, b.response_bytes([b.PAID, b.REJECT_MR])),
        timeout=10,
    ).json()
    _wait_answer_recorded(d, body["claim_id"])
    rows = worklist.claims_today(d.use_cases)
    assert [(r["transaction_index"], r["rx_number"], r["product_id"]) for r in rows] == [
        (1, "1234568", "00093505699")
    ]
    assert rows[0]["message"] == "PRODUCT NOT ON FORMULARY"


def test_page_and_assets_are_public_but_the_json_needs_the_token(make_daemon: Any) -> None:
    d = make_daemon(intake={"tokens": [TOKEN]})
    url = d.intake_server.url
    page = httpx.get(f"{url}/", timeout=10)
    assert page.status_code == 200 and "text/html" in page.headers["Content-Type"]
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    for asset in ("console.js", "console.css"):
        assert httpx.get(f"{url}/console/static/{asset}", timeout=10).status_code == 200
    assert httpx.get(f"{url}/openapi.json", timeout=10).status_code == 200
    r = httpx.get(f"{url}/v1/console/worklist", timeout=10)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    ok = httpx.get(
        f"{url}/v1/console/worklist", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    )
    assert ok.status_code == 200
    # nothing on the page is fetched from elsewhere
    for text in (page.text, httpx.get(f"{url}/console/static/console.js", timeout=10).text):
        assert "http://" not in text and "https://" not in text


# ---- the page, in Chromium --------------------------------------------------------------------


def _watch_requests(page: Any, origin: str) -> list[str]:
    """Every URL the console page itself asks for (its popups are other pages)."""
    seen: list[str] = []
    page.on("request", lambda req: seen.append(req.url))
    assert origin.startswith("http://127.0.0.1:")
    return seen


def test_console_shows_the_claim_submits_the_pa_and_follows_its_status(
    make_daemon: Any, page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    d = make_daemon(sandbox={"step_seconds": 0.5})
    url = d.intake_server.url
    answer = _post_75(url)
    requests = _watch_requests(page, url)
    page.goto(f"{url}/")

    expect(page.get_by_role("heading", level=1)).to_have_text("PA worklist")
    claims = page.locator("#claims-body")
    row = claims.locator("tr", has_text="1234567")
    expect(row).to_have_count(1)
    expect(row).to_contain_text(answer["message"])
    expect(row).to_contain_text("00093505601")
    button = row.get_by_role("button", name=answer["button_label"])
    expect(button).to_be_visible()
    expect(page.locator("#pas-empty")).to_be_visible()
    page.screenshot(path=str(tmp_path / "console-before.png"), full_page=True)

    with page.context.expect_page() as popup:
        button.click()
    opened = popup.value  # the PA opens in a new tab
    pas = page.locator("#pas-body tr")
    expect(pas).to_have_count(1)
    pa_id = d.store.query("SELECT id FROM pas")[0]["id"]
    assert opened.url.startswith(d.sandbox.url) and pa_id in opened.url
    expect(pas.first).to_contain_text(pa_id)
    expect(page.locator("#status")).to_contain_text(pa_id)
    # the sandbox's callbacks move it along: New, PA Request, PA Response (Favorable)
    expect(pas.first.locator("td").nth(2)).to_have_text("PA Response", timeout=20_000)
    expect(pas.first.locator("td").nth(3)).to_have_text("Favorable")
    expect(page.locator("#status")).to_contain_text("PA Response", timeout=10_000)
    link = row.get_by_role("link", name=f"Open PA {pa_id}")
    expect(link).to_have_attribute("href", f"/v1/pa/{pa_id}/open")
    expect(link).to_have_attribute("target", "_blank")
    expect(row.get_by_role("button")).to_have_count(0)  # no second submit from the page
    page.screenshot(path=str(tmp_path / "console.png"), full_page=True)
    if os.environ.get("PA_BRIDGE_SCREENSHOT_DIR"):
        shutil.copy(tmp_path / "console.png", os.environ["PA_BRIDGE_SCREENSHOT_DIR"])

    content = page.content()
    for word in PHI:
        assert word not in content
    assert all(u.startswith(url) for u in requests), requests
    assert d.store.query("SELECT count(*) AS n FROM pas")[0]["n"] == 1


def test_keyboard_tab_to_the_button_and_enter_submits(make_daemon: Any, page: Any) -> None:
    from playwright.sync_api import expect

    d = make_daemon(sandbox={"step_seconds": 0.2})
    url = d.intake_server.url
    answer = _post_75(url)
    page.goto(f"{url}/")
    # the worklist's button comes first in the page
    button = page.locator("#groups").get_by_role("button", name=answer["button_label"])
    expect(button).to_be_visible()
    for _ in range(12):
        page.keyboard.press("Tab")
        if button.evaluate("el => el === document.activeElement"):
            break
    expect(button).to_be_focused()
    # the focus is visible: an outline drawn by :focus-visible
    outline = button.evaluate("el => getComputedStyle(el).outlineStyle")
    assert outline not in ("none", ""), outline
    with page.context.expect_page():
        page.keyboard.press("Enter")
    pa_id = wait_until(lambda: d.store.query("SELECT id FROM pas"), what="PA stored")[0]["id"]
    link = page.get_by_role("link", name=f"Open PA {pa_id}").first
    expect(link).to_be_visible()
    expect(page.locator("#claims-body a")).to_be_focused()  # focus moves to the new PA's link
    expect(page.locator("#pas-body tr")).to_contain_text("PA Response", timeout=20_000)


def test_token_from_the_url_is_kept_for_the_tab_and_the_form_asks_otherwise(
    make_daemon: Any, browser: Any
) -> None:
    from playwright.sync_api import expect

    d = make_daemon(intake={"tokens": [TOKEN]})
    url = d.intake_server.url
    answer = _post_75(url, token=TOKEN)

    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.set_default_timeout(15_000)
        page.goto(f"{url}/?token={TOKEN}")
        claims = page.locator("#claims-body")
        expect(claims.get_by_role("button", name=answer["button_label"])).to_be_visible()
        assert "token" not in page.url  # dropped from the address bar and history
        assert page.evaluate("sessionStorage.getItem('pa-bridge.intake-token')") == TOKEN
        expect(page.locator("#token-form")).to_be_hidden()
        # with a token, the link goes to the PA's own URL (a link cannot send the header)
        with ctx.expect_page() as popup:
            claims.get_by_role("button", name=answer["button_label"]).click()
        assert popup.value.url.startswith(d.sandbox.url)
        pa_url = json.loads(d.store.query("SELECT urls_json FROM pas")[0]["urls_json"])[0]
        expect(page.locator("#claims-body a")).to_have_attribute("href", pa_url)
    finally:
        ctx.close()

    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        page.set_default_timeout(15_000)
        page.goto(f"{url}/")
        expect(page.get_by_role("alert")).to_contain_text("intake token")
        field = page.get_by_label("Intake token")
        expect(field).to_be_visible()
        field.fill("wrong-token")
        page.get_by_role("button", name="Use this token").click()
        expect(page.get_by_role("alert")).to_contain_text("not accepted")
        field.fill(TOKEN)
        field.press("Enter")
        expect(page.locator("#claims-body tr")).to_have_count(1)
        expect(page.locator("#token-form")).to_be_hidden()
        expect(page.get_by_role("alert")).to_be_hidden()
    finally:
        ctx.close()


def test_a_failed_submit_is_explained_in_plain_words(make_daemon: Any, page: Any) -> None:
    from playwright.sync_api import expect

    d = make_daemon()
    url = d.intake_server.url
    body = httpx.post(
        f"{url}/v1/claims",
        json=b.exchange_json(
            b.request_bytes(rxs=(b.Rx(product_id="00000000000"),)),
            b.response_bytes([b.REJECT_MR]),
        ),
        timeout=10,
    ).json()
    page.goto(f"{url}/")
    button = page.locator("#claims-body").get_by_role("button", name=body["button_label"])
    button.click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("was not submitted")
    expect(alert).to_contain_text("does not recognise the drug")
    expect(page.locator("#claims-body .row-error")).to_contain_text("does not recognise")
    # the button is still there to try again, and nothing was stored
    expect(button).to_be_visible()
    assert d.store.query("SELECT count(*) AS n FROM pas")[0]["n"] == 0


# ---- issue 16: the worklist of what needs the pharmacist ------------------------------------

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "console"


def _shot(page: Any, tmp_path: Path, name: str, full_page: bool = False) -> None:
    """A screenshot kept as a test artifact: under pytest's tmp dir and in the
    git-ignored ``test-artifacts/console/`` of the worktree."""
    page.screenshot(path=str(tmp_path / name), full_page=full_page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(tmp_path / name, ARTIFACTS / name)


def _post_mr(url: str, rx: str, *, group: str = "SYNGRP01", token: str | None = None) -> str:
    """A claim rejected MR (answered at once, no outcomes call); its claim id."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = b.request_bytes(group_id=group, rxs=(b.Rx(rx_number=rx),))
    r = httpx.post(
        f"{url}/v1/claims",
        json=b.exchange_json(req, b.response_bytes([b.REJECT_MR])),
        headers=headers,
        timeout=10,
    )
    assert r.status_code == 200, r.text
    claim_id: str = r.json()["claim_id"]
    return claim_id


def _submit(url: str, claim_id: str, *, token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = httpx.post(f"{url}/v1/claims/{claim_id}/pa", headers=headers, timeout=10)
    assert r.status_code in (200, 201), r.text
    pa: dict[str, Any] = r.json()
    return pa


def _callback(d: Any, body: dict[str, Any]) -> None:
    r = httpx.post(
        f"{d.callback_server.url}/callbacks/pharmacy", json={"request": body}, timeout=10
    )
    assert r.status_code in (200, 201), r.text


def _worklist(url: str, token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = httpx.get(f"{url}/v1/console/worklist", headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def _groups(data: dict[str, Any]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for it in data["items"]:
        ident = it["pa"]["pa_id"] if it["pa"] else it["claim"]["rx_number"]
        out.setdefault(it["attention"], []).append(ident)
    return out


def _pa_status(d: Any, pa_id: str) -> tuple[str | None, str | None]:
    row = d.store.query("SELECT workflow_status, plan_outcome FROM pas WHERE id = ?", [pa_id])
    return (row[0]["workflow_status"], row[0]["plan_outcome"]) if row else (None, None)


def test_worklist_groups_what_needs_the_pharmacist_until_acknowledged(
    make_daemon: Any, daemon_storage: dict[str, Any]
) -> None:
    d = make_daemon(storage=daemon_storage)
    url = d.intake_server.url
    _post_mr(url, "000000000101")  # rejected, never submitted
    denied = _submit(url, _post_mr(url, "000000000102", group="DENYGRP"))["pa_id"]
    approved = _submit(url, _post_mr(url, "000000000103"))["pa_id"]
    pending = _submit(url, _post_mr(url, "000000000104", group="PENDGRP"))["pa_id"]
    for pa_id, outcome in ((denied, "Unfavorable"), (approved, "Favorable"), (pending, "Pending")):
        wait_until(lambda p=pa_id, o=outcome: _pa_status(d, p) == ("PA Response", o), what=pa_id)
    _callback(
        d,
        {
            "id": "FAXF01",
            "workflow_status": "Sent to Plan",
            "plan_outcome": None,
            "is_epa": "false",
            "events": [{"type": "REQUEST_FAX_FAILED", "time": "2026-11-24T08:00:00Z"}],
        },
    )
    _callback(
        d,
        {
            "id": "DELT01",
            "workflow_status": "PA Request",
            "events": [{"type": "DELETE", "time": "2026-11-24T08:01:00Z"}],
        },
    )
    data = _worklist(url)
    groups = _groups(data)
    assert groups == {
        "not_submitted": ["101"],
        "denied": [denied],
        "fax_failed": ["FAXF01"],
        "deleted": ["DELT01"],
        "approved": [approved],
    }, groups
    assert [i["attention"] for i in data["items"]] == [
        "not_submitted", "denied", "fax_failed", "deleted", "approved",
    ]  # fmt: skip
    assert data["counts"] == {
        "not_submitted": 1, "denied": 1, "fax_failed": 1, "deleted": 1, "failed": 0,
        "pending_too_long": 0, "approved": 1, "expiring": 0, "total": 5,
    }  # fmt: skip
    by_pa = {i["pa"]["pa_id"]: i["pa"] for i in data["items"] if i["pa"]}
    ok = by_pa[approved]
    assert ok["label"] == "Approved" and "Send the claim again" in ok["next_step"]
    assert ok["expiration_date"] and ok["expiration_date"] > data["generated_at"]
    assert ok["drug_name"] == "Sandboxin (test drug) 10 MG" and ok["rx_number"] == "103"
    assert by_pa[denied]["tone"] == "bad" and "denied" in by_pa[denied]["meaning"]
    assert "fax" in by_pa["FAXF01"]["meaning"]
    # every status of both workflows has words
    statuses = {(g["workflow_status"], g["plan_outcome"]) for g in data["guide"]}
    for pair in (("PA Response", "Favorable"), ("Sent to Plan", None), ("Archived", "Unsent"),
                 ("Question Response", "N/A"), ("Shared \\ Accessed Online", None),
                 ("Appealed", "Cancelled"), ("Failure", None), ("Expired", None)):  # fmt: skip
        assert pair in statuses, pair
    for word in PHI:
        assert word not in json.dumps(data)

    # a PA without a decision 72 hours after it was started is waiting too long
    later = worklist.needs_action(d.use_cases, time.time() + 73 * 3600)
    assert [i["pa"]["pa_id"] for i in later if i["attention"] == "pending_too_long"] == [pending]

    # acknowledging takes it off the list, records who and when
    r = httpx.post(f"{url}/v1/pa/{approved}/acknowledge", timeout=10)
    assert r.status_code == 200, r.text
    ack = r.json()["acknowledged"]
    assert ack["by"] == "console" and ack["attention"] == "approved"
    audit = d.store.query(
        "SELECT actor, at, detail FROM audit WHERE action = 'pa.acknowledged' AND object_id = ?",
        [approved],
    )
    assert len(audit) == 1 and audit[0]["actor"] == "console" and audit[0]["at"] == ack["at"]
    assert approved not in _groups(_worklist(url)).get("approved", [])
    # a change that is not a new reason leaves it off; a new reason brings it back
    _callback(d, {"id": approved, "workflow_status": "PA Response", "plan_outcome": "Favorable",
                  "memo": "again"})  # fmt: skip
    assert approved not in json.dumps(_groups(_worklist(url)))
    _callback(d, {"id": approved, "workflow_status": "PA Response", "plan_outcome": "Favorable",
                  "events": [{"type": "DELETE", "time": "2026-11-24T09:00:00Z"}]})  # fmt: skip
    assert approved in _groups(_worklist(url))["deleted"]

    assert httpx.post(f"{url}/v1/pa/NOSUCH/acknowledge", timeout=10).status_code == 404


def test_acknowledgement_names_the_intake_token(
    make_daemon: Any, daemon_storage: dict[str, Any]
) -> None:
    d = make_daemon(storage=daemon_storage, intake={"tokens": ["first-token-aaaaaaaa", TOKEN]})
    url = d.intake_server.url
    _callback(d, {"id": "DENY01", "workflow_status": "PA Response", "plan_outcome": "Unfavorable"})
    assert httpx.post(f"{url}/v1/pa/DENY01/acknowledge", timeout=10).status_code == 401
    r = httpx.post(
        f"{url}/v1/pa/DENY01/acknowledge", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    )
    assert r.status_code == 200 and r.json()["acknowledged"]["by"] == "token#2"
    assert _worklist(url, TOKEN)["counts"]["denied"] == 0


def test_a_pas_own_read_model(make_daemon: Any, daemon_storage: dict[str, Any]) -> None:
    d = make_daemon(storage=daemon_storage)
    url = d.intake_server.url
    answer = _post_75(url)
    pa_id = _submit(url, answer["claim_id"])["pa_id"]
    wait_until(lambda: _pa_status(d, pa_id) == ("PA Response", "Favorable"), what="approved")
    r = httpx.get(f"{url}/v1/console/pa/{pa_id}", timeout=10)
    assert r.status_code == 200 and r.headers["Cache-Control"] == "no-store"
    page = r.json()
    assert page["pa"]["pa_id"] == pa_id and page["pa"]["label"] == "Approved"
    assert page["pa"]["expiration_date"] and page["pa"]["url"].startswith(d.sandbox.url)
    claim = page["claim"]
    assert claim["rx_number"] == "1234567" and claim["product_id"] == "00093505601"
    assert claim["claim_id"] == answer["claim_id"] and claim["reject_codes"] == ["75"]
    assert page["pa"]["drug_name"] == "Sandboxin (test drug) 10 MG"
    assert [h["workflow_status"] for h in page["history"]][-1] == "PA Response"
    assert page["events"] == [] and page["acknowledgements"] == []
    for word in PHI:
        assert word not in r.text
    missing = httpx.get(f"{url}/v1/console/pa/NOSUCH", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_pa"
    shell = httpx.get(f"{url}/console/pa/{pa_id}", timeout=10)
    assert shell.status_code == 200 and "text/html" in shell.headers["Content-Type"]


# ---- issue 16: the defects, in Chromium -----------------------------------------------------


def _polls(page: Any) -> int:
    return int(page.evaluate("Number(document.body.getAttribute('data-polls') || 0)"))


def _wait_polls(page: Any, n: int) -> None:
    """Wait until the page has finished ``n`` more polls than now."""
    target = _polls(page) + n
    page.wait_for_function(
        "(t) => Number(document.body.getAttribute('data-polls') || 0) >= t",
        arg=target,
        timeout=15_000,
    )


def test_a_resent_claim_gets_the_same_pa_and_the_button_does_not_stick(
    make_daemon: Any, page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    d = make_daemon(sandbox={"step_seconds": 30})
    url = d.intake_server.url
    first = _post_75(url)
    second = _post_75(url)  # the same exchange sent again: another claim id, same claim key
    popups: list[Any] = []
    page.context.on("page", lambda p: popups.append(p))
    page.goto(f"{url}/")
    rows = page.locator("#claims-body tr")
    expect(rows).to_have_count(2)
    first_row = page.locator(f'#claims-body tr[data-key="{first["claim_id"]}:0"]')
    second_row = page.locator(f'#claims-body tr[data-key="{second["claim_id"]}:0"]')
    first_row.get_by_role("button").click()
    pa_id = wait_until(lambda: d.store.query("SELECT id FROM pas"), what="PA")[0]["id"]
    expect(first_row.get_by_role("link", name=f"Open PA {pa_id}")).to_be_visible()
    # the second copy shows the same PA (the service answers it for the same claim key)
    expect(second_row.get_by_role("link", name=f"Open PA {pa_id}")).to_be_visible()
    expect(second_row).to_contain_text("same claim sent earlier")
    expect(second_row.get_by_role("button")).to_have_count(0)
    expect(page.get_by_text("Submitting…")).to_have_count(0)
    wait_until(lambda: len(popups) == 1, what="one tab opened")
    _wait_polls(page, 2)
    assert len(popups) == 1  # nothing else opened a tab
    assert d.store.query("SELECT count(*) AS n FROM pas")[0]["n"] == 1
    _shot(page, tmp_path, "resent-claim.png", full_page=True)


def test_a_resent_claim_submitted_before_the_page_knows_shows_the_pa_not_submitting(
    make_daemon: Any, page: Any, tmp_path: Path
) -> None:
    """The defect as seen: the PA exists for the first copy, the page still offers the
    button on the second; clicking it must end with the PA's link, not "Submitting..."."""
    from playwright.sync_api import expect

    d = make_daemon(sandbox={"step_seconds": 30})
    url = d.intake_server.url
    first = _post_75(url)
    page.goto(f"{url}/")
    expect(page.locator("#claims-body tr")).to_have_count(1)
    pa_id = _submit(url, first["claim_id"])["pa_id"]
    second = _post_75(url)
    row = page.locator(f'#claims-body tr[data-key="{second["claim_id"]}:0"]')
    expect(row).to_have_count(1)
    buttons = row.get_by_role("button")
    if buttons.count():
        with page.context.expect_page():
            buttons.first.click()
    expect(row.get_by_role("link", name=f"Open PA {pa_id}")).to_be_visible()
    expect(row).not_to_contain_text("Submitting")
    expect(row.get_by_role("button")).to_have_count(0)
    _shot(page, tmp_path, "resent-claim-late.png")


def test_the_green_line_never_contradicts_the_red_box(make_daemon: Any, page: Any) -> None:
    from playwright.sync_api import expect

    d = make_daemon(intake={"tokens": [TOKEN]})
    url = d.intake_server.url
    page.goto(f"{url}/")
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("intake token")
    page.get_by_label("Intake token").fill("wrong-token-xxxxxxxx")
    page.get_by_role("button", name="Use this token").click()
    expect(alert).to_contain_text("not accepted")
    _wait_polls(page, 0)
    expect(page.locator("#status")).to_have_text("")  # not "Token saved"

    page.get_by_label("Intake token").fill(TOKEN)
    page.get_by_role("button", name="Use this token").click()
    expect(alert).to_be_hidden()
    # a failed submit: the red box says why, the green line does not say "Submitting"
    body = httpx.post(
        f"{url}/v1/claims",
        json=b.exchange_json(
            b.request_bytes(rxs=(b.Rx(product_id="00000000000"),)),
            b.response_bytes([b.REJECT_MR]),
        ),
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=10,
    ).json()
    button = page.locator("#claims-body").get_by_role("button", name=body["button_label"])
    button.click()
    expect(alert).to_contain_text("was not submitted")
    _wait_polls(page, 1)
    expect(page.locator("#status")).to_have_text("")
    expect(button).to_have_text(body["button_label"] + " for Rx 1234567")


def test_nothing_loaded_never_says_no_claims(make_daemon: Any, page: Any, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    d = make_daemon(intake={"tokens": [TOKEN]})
    page.goto(f"{d.intake_server.url}/")
    expect(page.get_by_role("alert")).to_be_visible()
    expect(page.get_by_text("No claims have been rejected for PA today.")).to_be_hidden()
    expect(page.get_by_text("Nothing needs you right now.")).to_be_hidden()
    expect(page.locator("#worklist-loading")).to_have_text("Sign in to see the worklist.")
    _shot(page, tmp_path, "not-loaded.png")


def test_the_fallback_note_says_what_the_stored_answer_says(
    make_daemon: Any, page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    d = make_daemon()
    url = d.intake_server.url
    # the outcomes service answers HTTP 500 for BIN 999997 in the sandbox
    body = b.exchange_json(b.request_bytes(bin="999997"), b.response_bytes([b.REJECT_75]))
    answer = httpx.post(f"{url}/v1/claims", json=body, timeout=10).json()
    assert answer["message_source"] == "fallback"
    page.goto(f"{url}/")
    note = page.locator("#claims-body .fallback")
    expect(note).to_have_count(1)
    if "fallback_reason" in answer:  # once the backend records why
        expect(note).to_contain_text("HTTP 500")
    else:
        expect(note).to_contain_text("replacement message was not available")
    expect(note).not_to_contain_text("did not answer in time")
    said = page.evaluate(
        """() => ["timeout", "refused", "unreadable", "http_500", {kind: "http", status: 502},
                  null].map(r => window.PaConsole.fallbackNote(r))"""
    )
    assert "did not answer in time" in said[0]
    assert "could not be reached" in said[1]
    assert "could not be read" in said[2]
    assert "HTTP 500" in said[3] and "HTTP 502" in said[4]
    assert "not available" in said[5] and "in time" not in said[5]
    _shot(page, tmp_path, "fallback-note.png")


def test_the_success_message_stays(make_daemon: Any, page: Any) -> None:
    from playwright.sync_api import expect

    d = make_daemon(sandbox={"step_seconds": 30})  # the PA stays New: no real change comes
    url = d.intake_server.url
    _post_75(url)
    page.goto(f"{url}/")
    with page.context.expect_page():
        page.locator("#claims-body").get_by_role("button").click()
    status = page.locator("#status")
    expect(status).to_contain_text("created")
    expect(page.locator("#pas-body tr")).to_have_count(1)
    _wait_polls(page, 2)
    expect(status).to_contain_text("created")  # not "PA ... : New." half a second later


def test_no_sideways_scroll_at_800_px(browser: Any, make_daemon: Any, tmp_path: Path) -> None:
    d = make_daemon(sandbox={"step_seconds": 0.05})
    url = d.intake_server.url
    for i in range(6):
        _post_75(url, rxs=(b.Rx(rx_number=f"00000000{i:04d}"),))
    pa_id = _submit(url, _post_mr(url, "000000009999"))["pa_id"]
    wait_until(lambda: _pa_status(d, pa_id)[0] == "PA Response", what="approved")
    # what made the old page 45-96 px too wide: long statuses with both event badges,
    # four reject codes and a message with a long unbroken word
    events = [
        {"type": "DELETE", "time": "2026-11-24T08:00:00Z"},
        {"type": "REQUEST_FAX_FAILED", "time": "2026-11-24T08:00:00Z"},
    ]
    for j, (status, outcome) in enumerate(
        (
            ("Shared \\ Accessed Online", None),
            ("Cancel Request Sent", None),
            ("Appeal Response", "Unfavorable"),
        )
    ):
        _callback(
            d,
            {"id": f"LONGPA{j:04d}", "workflow_status": status, "plan_outcome": outcome,
             "events": events},
        )  # fmt: skip
    long_message = "CALL THE HELP DESK OR SEE HTTPS://EXAMPLE.INVALID/PRIOR-AUTHORIZATION-RULES"
    outcome = b.Outcome(status="R", reject_codes=("75", "76", "MR", "AG"), messages=(long_message,))
    httpx.post(
        f"{url}/v1/claims",
        json=b.exchange_json(
            b.request_bytes(rxs=(b.Rx(rx_number="000009999998"),)), b.response_bytes([outcome])
        ),
        timeout=10,
    )
    ctx = browser.new_context(viewport={"width": 800, "height": 900})
    try:
        page = ctx.new_page()
        page.set_default_timeout(15_000)
        for shot, path, ready in (
            ("worklist", "/", "#pas-body tr[data-key=LONGPA0002]"),
            ("pa-page", f"/console/pa/{pa_id}", "#history tr"),
            ("pa-page-events", "/console/pa/LONGPA0000", "#events li"),
        ):
            page.goto(url + path)
            page.locator(ready).first.wait_for()
            over = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert over <= 0, f"{path}: {over} px of sideways scroll at 800 px"
            _shot(page, tmp_path, f"800px-{shot}.png", full_page=True)
    finally:
        ctx.close()


def test_the_pages_have_a_favicon_and_nothing_is_missing(make_daemon: Any, page: Any) -> None:
    from playwright.sync_api import expect

    d = make_daemon()
    url = d.intake_server.url
    _post_75(url)
    failed: list[str] = []
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.goto(f"{url}/")
    expect(page.locator("#claims-body tr")).to_have_count(1)
    href = page.locator('link[rel="icon"]').get_attribute("href")
    assert href
    icon = httpx.get(url + href, timeout=10)
    assert icon.status_code == 200 and icon.headers["Content-Type"].startswith("image/svg+xml")
    _wait_polls(page, 1)
    assert failed == []


def _in_view(page: Any, locator: Any) -> bool:
    box = locator.bounding_box()
    vp = page.viewport_size
    return bool(box) and box["y"] >= 0 and box["y"] + box["height"] <= vp["height"]


def test_a_busy_day_what_is_above_the_fold(make_daemon: Any, page: Any, tmp_path: Path) -> None:
    """40 claims: 25 waiting for a submit, 15 submitted (5 denied, 7 approved, 3 with the
    plan). At 1280 x 800 the pharmacist sees, without scrolling, the counts of every
    group and the first rejected claims with their Submit buttons."""
    from playwright.sync_api import expect

    d = make_daemon(sandbox={"step_seconds": 0.05})
    url = d.intake_server.url
    submitted = []
    for i in range(40):
        group = "DENYGRP" if i < 5 else "PENDGRP" if i < 8 else "SYNGRP01"
        claim_id = _post_mr(url, f"0000000{i + 1000:05d}", group=group)
        if i < 15:
            submitted.append(_submit(url, claim_id)["pa_id"])
    wait_until(
        lambda: all(_pa_status(d, p)[0] == "PA Response" for p in submitted), what="PA answers"
    )
    data = _worklist(url)
    assert (data["counts"]["not_submitted"], data["counts"]["denied"]) == (25, 5)
    assert data["counts"]["approved"] == 7 and data["counts"]["total"] == 37

    page.goto(f"{url}/")
    expect(page.locator("#claims-body tr")).to_have_count(40)
    counts = page.locator("#counts button")
    expect(counts).to_have_count(9)
    expect(counts.first).to_have_text("37 All")
    for i in range(9):
        assert _in_view(page, counts.nth(i)), counts.nth(i).inner_text()
    expect(page.locator("#counts [data-filter=denied]")).to_have_text("5 Denied")
    assert _in_view(page, page.get_by_role("heading", name="Needs you"))
    first_items = page.locator("#groups .group[data-group=not_submitted] li")
    expect(first_items).to_have_count(25)
    for i in range(4):
        item = first_items.nth(i)
        assert _in_view(page, item), i
        assert _in_view(page, item.get_by_role("button", name="Submit PA"))
    # the newest claim is first
    expect(first_items.first).to_contain_text("Rx 1039")
    assert not _in_view(page, page.locator("#claims-heading"))  # the day's table is below
    _shot(page, tmp_path, "busy-day-fold.png")
    _shot(page, tmp_path, "busy-day-full.png", full_page=True)

    # the counts filter: only the denied ones, all five above the fold
    page.locator("#counts [data-filter=denied]").click()
    expect(page.locator("#counts [data-filter=denied]")).to_have_attribute("aria-pressed", "true")
    denied = page.locator("#groups li")
    expect(denied).to_have_count(5)
    for i in range(5):
        assert _in_view(page, denied.nth(i)), i
    expect(denied.first).to_contain_text("Denied")
    expect(denied.first).to_contain_text("Next:")
    _shot(page, tmp_path, "busy-day-denied.png")
    # find by Rx number
    page.locator("#counts [data-filter=all]").click()
    page.get_by_label("Find Rx number or PA").fill("1003")
    expect(page.locator("#groups li")).to_have_count(1)
    expect(page.locator("#groups li")).to_contain_text("Rx 1003")


def test_acknowledge_from_the_worklist_and_the_pas_own_page(
    make_daemon: Any, page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    d = make_daemon(sandbox={"step_seconds": 0.05})
    url = d.intake_server.url
    answer = _post_75(url)
    pa_id = _submit(url, answer["claim_id"])["pa_id"]
    wait_until(lambda: _pa_status(d, pa_id) == ("PA Response", "Favorable"), what="approved")
    denied = _submit(url, _post_mr(url, "000000002222", group="DENYGRP"))["pa_id"]
    wait_until(lambda: _pa_status(d, denied)[1] == "Unfavorable", what="denied")
    page.goto(f"{url}/")
    item = page.locator(f'#groups li[data-key="pa:{pa_id}"]')
    expect(item).to_contain_text("Approved")
    expect(item).to_contain_text("Approved until")
    expect(item).to_contain_text("Sandboxin (test drug) 10 MG")
    expect(item.get_by_role("link", name=f"Open PA {pa_id}")).to_have_attribute(
        "href", f"/v1/pa/{pa_id}/open"
    )
    _shot(page, tmp_path, "worklist-approved.png")
    item.get_by_role("button", name=f"Acknowledge PA {pa_id}").click()
    expect(item).to_have_count(0)
    expect(page.locator("#status")).to_contain_text(f"PA {pa_id} acknowledged")
    expect(page.locator("#counts [data-filter=approved]")).to_have_text(
        "0 Approved or not required: not yet acknowledged"
    )
    row = d.store.query(
        "SELECT actor FROM audit WHERE action = 'pa.acknowledged' AND object_id = ?", [pa_id]
    )
    assert [r["actor"] for r in row] == ["console"]

    # the denied PA's own page
    page.locator(f'#groups li[data-key="pa:{denied}"]').get_by_role("link", name="Details").click()
    expect(page).to_have_url(f"{url}/console/pa/{denied}")
    expect(page.get_by_role("heading", level=1)).to_have_text(f"PA {denied} for Rx 2222")
    expect(page.locator("#pa-badge")).to_have_text("Denied")
    expect(page.locator("#pa-next")).to_contain_text("appeal")
    facts = page.locator("#claim")
    expect(facts).to_contain_text("2222")
    expect(facts).to_contain_text("Sandboxin (test drug) 10 MG")
    expect(facts).to_contain_text("00093505601")
    expect(page.locator("#history tr")).to_have_count(4)  # submit, New, PA Request, PA Response
    expect(page.locator("#no-events")).to_be_visible()
    link = page.get_by_role("link", name=f"Open PA {denied}")
    expect(link).to_have_attribute("target", "_blank")
    _shot(page, tmp_path, "pa-page-denied.png", full_page=True)
    page.get_by_role("button", name=f"Acknowledge PA {denied}").click()
    expect(page.locator("#pa-ack")).to_contain_text("Acknowledged by console")
    expect(page.locator("#acks li")).to_have_count(1)
    for word in PHI:
        assert word not in page.content()

    # events on the page: a deletion
    _callback(d, {"id": denied, "workflow_status": "PA Response", "plan_outcome": "Unfavorable",
                  "events": [{"type": "DELETE", "time": "2026-11-24T09:00:00Z"}]})  # fmt: skip
    expect(page.locator("#events li")).to_have_count(1, timeout=15_000)
    expect(page.locator("#events")).to_contain_text("Deleted")
    expect(page.locator("#pa-badge")).to_have_text("Deleted")
    expect(page.get_by_role("button", name=f"Acknowledge PA {denied}")).to_be_visible()
    _shot(page, tmp_path, "pa-page-deleted.png", full_page=True)


def test_lost_contact_then_connected_again_never_beside_a_problem(
    make_daemon: Any, page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    from tests.support import free_port

    d = make_daemon(intake={"listen": f"127.0.0.1:{free_port()}"})
    url = d.intake_server.url
    _post_75(url)
    page.goto(f"{url}/")
    expect(page.locator("#claims-body tr")).to_have_count(1)
    alert, status = page.get_by_role("alert"), page.locator("#status")
    d.intake_server.stop()  # pa-bridge's API goes away
    expect(alert).to_contain_text("Lost contact")
    expect(status).to_have_text("")
    expect(page.locator("#claims-body tr")).to_have_count(1)  # what was shown stays
    _shot(page, tmp_path, "lost-contact.png")
    d.intake_server.start()  # and comes back on the same port
    expect(status).to_have_text("Connected to pa-bridge again.")
    expect(alert).to_be_hidden()


def test_a_chains_console_picks_one_pharmacy_and_submits_with_its_credentials(
    make_daemon: Any, page: Any, tmp_path: Path
) -> None:
    """``[[pharmacies]]`` with two stores: the selector shows both; choosing one shows
    its claims only (and keeps it in the address); its submit goes to the service with
    that store's credentials (the embedded sandbox tells whose)."""
    from playwright.sync_api import expect

    stores = [
        {"provider_id": pid, "name": name, "username": user, "password": f"{user}-password",
         "api_key": f"{user}-api-key"}
        for pid, name, user in (("1111111", "Store 11", "store-11"),
                                ("2222222", "Store 22", "store-22"))
    ]  # fmt: skip
    d = make_daemon(pharmacies=stores)
    url = d.intake_server.url
    _post_75(url, provider_id="1111111", provider_qualifier="07",
             rxs=(b.Rx(rx_number="000001111"),))  # fmt: skip
    _post_75(url, provider_id="2222222", provider_qualifier="07",
             rxs=(b.Rx(rx_number="000002222"),))  # fmt: skip
    page.goto(f"{url}/")
    claims = page.locator("#claims-body tr")
    expect(claims).to_have_count(2)
    select = page.get_by_label("Pharmacy")
    expect(select).to_be_visible()
    expect(select.locator("option")).to_have_text(
        ["All pharmacies", "Store 11 (1111111)", "Store 22 (2222222)"]
    )
    select.select_option("2222222")
    expect(claims).to_have_count(1)
    expect(claims.first).to_contain_text("2222")
    expect(page).to_have_url(f"{url}/?pharmacy=2222222")
    _shot(page, tmp_path, "console-one-pharmacy.png")
    with page.context.expect_page():
        claims.first.get_by_role("button").click()
    expect(page.locator("#pas-body tr")).to_have_count(1)
    calls = httpx.get(f"{d.sandbox.url}/sandbox/calls", timeout=5).json()["calls"]
    assert [(c["username"], c["provider_id"]) for c in calls if c["interface"] == "claim"] == [
        ("store-22", "2222222")
    ]
    page.reload()  # the choice stays with the address
    expect(select).to_have_value("2222222")
    expect(claims).to_have_count(1)


def test_an_expiring_approval_and_its_renewal_on_the_page(
    make_daemon: Any, page: Any, tmp_path: Path
) -> None:
    """Issue 28: "Expiring soon" with the days left and what to do; the renewal PA and
    the PA it renews link to each other's page, and the renewal closes the entry."""
    import datetime as dt

    from playwright.sync_api import expect

    d = make_daemon(sandbox={"enabled": False}, service=NO_SERVICE)
    url = d.intake_server.url
    end = (dt.date.today() + dt.timedelta(days=10)).isoformat()
    _callback(d, {"id": "EXPG01", "workflow_status": "PA Response", "plan_outcome": "Favorable",
                  "authorization_period": {"expiration_date": end}})  # fmt: skip
    page.goto(f"{url}/")
    item = page.locator('#groups .group[data-group=expiring] li[data-key="pa:EXPG01"]')
    expect(item).to_contain_text("Approval ends soon")
    expect(item).to_contain_text("The approval ends in 10 days.")
    expect(item).to_contain_text("renewal PA")
    expect(page.locator("#counts [data-filter=expiring]")).to_have_text("1 Expiring soon")
    _shot(page, tmp_path, "worklist-expiring.png")

    _callback(d, {"id": "EXPG02", "workflow_status": "New", "is_renewal": "true",
                  "associated_requests": {"request_being_renewed": {"id": "EXPG01"}}})  # fmt: skip
    expect(item).to_have_count(0)  # the renewal closed the entry
    page.goto(f"{url}/console/pa/EXPG02")
    expect(page.locator("#pa-renewal")).to_contain_text("Renews PA EXPG01")
    page.locator("#renewal-of").click()
    expect(page).to_have_url(f"{url}/console/pa/EXPG01")
    expect(page.locator("#pa-renewal")).to_contain_text("Renewed by PA EXPG02")
    expect(page.locator("#renewed-by")).to_have_attribute("href", "/console/pa/EXPG02")
    _shot(page, tmp_path, "pa-page-renewed.png", full_page=True)


# ---- issue 26: the truth after any sequence, as the page shows it ---------------------------

#: Every word of these elements (text nodes split at blanks) that the browser broke
#: across lines. A word's range with line boxes at two heights is broken.
_BROKEN_WORDS = """(selectors) => {
  const broken = [];
  for (const el of document.querySelectorAll(selectors)) {
    if (!el.getClientRects().length) { continue; }  // not shown
    const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) {
      const re = /\\S+/g;
      for (let m = re.exec(node.data); m; m = re.exec(node.data)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set(Array.from(range.getClientRects())
          .filter((r) => r.width > 0).map((r) => Math.round(r.top)));
        if (tops.size > 1) { broken.push(m[0]); }
      }
    }
  }
  return broken;
}"""

#: Where the console shows identifiers (Rx numbers, NDCs, PA ids) and the tables'
#: headers; the messages may break a long URL anywhere, so they are left out.
_IDENTIFIERS = ", ".join(
    [
        "#claims thead th",
        "#pas thead th",
        "#claims-body tr > :nth-child(1)",
        "#claims-body tr > :nth-child(2)",
        "#claims-body tr > :nth-child(6) .note",
        "#pas-body tr > :nth-child(1)",
        "#pas-body tr > :nth-child(2)",
        "#pas-body tr > :nth-child(3)",
        "#pas-body tr > :nth-child(8)",
        "#groups .item-head",
        "#groups .actions a",
    ]
)


def _long_message_claim(url: str, rx: str, ndc: str) -> None:
    """A claim rejected with a long payer message (what squeezes the table's columns)."""
    message = (
        "PRIOR AUTHORIZATION REQUIRED. PRESCRIBER MUST CALL THE PLAN'S CLINICAL REVIEW LINE "
        "OR SUBMIT THE PLAN'S FORM; QUANTITY LIMITS AND STEP THERAPY APPLY TO THIS PRODUCT"
    )
    outcome = b.Outcome(status="R", reject_codes=("75", "MR"), messages=(message,))
    r = httpx.post(
        f"{url}/v1/claims",
        json=b.exchange_json(
            b.request_bytes(rxs=(b.Rx(rx_number=rx, product_id=ndc),)),
            b.response_bytes([outcome]),
        ),
        timeout=10,
    )
    assert r.status_code == 200, r.text


def test_identifiers_never_wrap_at_1280_and_400_px_even_after_a_failed_submit(
    browser: Any, make_daemon: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    d = make_daemon(sandbox={"step_seconds": 30})
    url = d.intake_server.url
    for i in range(5):
        _long_message_claim(url, f"00000719990{i}", f"0037818011{i}")
    pa_ids = [_submit(url, _post_mr(url, f"00000719980{i}"))["pa_id"] for i in range(2)]
    failing = httpx.post(
        f"{url}/v1/claims",
        json=b.exchange_json(
            b.request_bytes(rxs=(b.Rx(rx_number="000007199777", product_id="00000000000"),)),
            b.response_bytes([b.REJECT_MR]),
        ),
        timeout=10,
    ).json()
    for width, height in ((1280, 800), (400, 900)):
        ctx = browser.new_context(viewport={"width": width, "height": height})
        try:
            page = ctx.new_page()
            page.set_default_timeout(15_000)
            page.goto(f"{url}/")
            expect(page.locator("#claims-body tr")).to_have_count(8)
            expect(page.locator("#pas-body tr")).to_have_count(2)
            assert page.evaluate(_BROKEN_WORDS, _IDENTIFIERS) == [], f"{width} px"
            _shot(page, tmp_path, f"identifiers-{width}px.png", full_page=True)
            # a failed submit puts its reason in the row: the table must not fold up
            row = page.locator(f'#claims-body tr[data-key="{failing["claim_id"]}:0"]')
            row.get_by_role("button").click()
            expect(page.get_by_role("alert")).to_contain_text("was not submitted")
            expect(row.locator(".row-error")).to_be_visible()
            assert page.evaluate(_BROKEN_WORDS, _IDENTIFIERS) == [], f"{width} px, failed submit"
            over = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert over <= 0, f"{over} px of sideways scroll at {width} px"
            _shot(page, tmp_path, f"identifiers-{width}px-failed-submit.png", full_page=True)
            page.goto(f"{url}/console/pa/{pa_ids[0]}")
            expect(page.locator("#history tr").first).to_be_visible()
            assert page.evaluate(_BROKEN_WORDS, "h1, #claim dd, #pa-links a") == [], width
        finally:
            ctx.close()


def test_the_notes_say_each_thing_once_and_a_deleted_pa_is_not_approved(
    make_daemon: Any, page: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    d = make_daemon()
    url = d.intake_server.url
    fax = {"type": "REQUEST_FAX_FAILED", "time": "2026-11-24T08:00:00Z"}
    gone = {"type": "DELETE", "time": "2026-11-24T09:00:00Z"}
    period = {"effective_date": "2026-11-27", "expiration_date": "2027-11-27"}
    _callback(d, {"id": "NOTE01", "workflow_status": "PA Request", "events": [gone, fax]})
    _callback(d, {"id": "NOTE02", "workflow_status": "Sent to Plan", "events": [fax]})
    _callback(d, {"id": "NOTE03", "workflow_status": "PA Response", "plan_outcome": "Favorable",
                  "authorization_period": period})  # fmt: skip
    _callback(d, {"id": "NOTE03", "workflow_status": "PA Response", "plan_outcome": "Favorable",
                  "events": [gone]})  # fmt: skip
    _callback(d, {"id": "NOTE04", "workflow_status": "Sent to Plan", "events": [fax]})
    _callback(d, {"id": "NOTE04", "workflow_status": "Sent to Plan", "plan_outcome": "Unfavorable"})
    page.goto(f"{url}/")
    notes = {
        pa_id: page.locator(f'#pas-body tr[data-key="{pa_id}"] > :nth-child(6)')
        for pa_id in ("NOTE01", "NOTE02", "NOTE03", "NOTE04")
    }
    expect(notes["NOTE01"]).to_have_text("Deleted")
    expect(notes["NOTE02"]).to_have_text("Fax failed")
    expect(notes["NOTE03"]).to_have_text("Deleted")
    expect(notes["NOTE04"]).to_have_text(
        "DeniedA fax to the plan failed earlier; the PA has moved on since."
    )
    deleted = page.locator('#groups li[data-key="pa:NOTE03"]')
    expect(deleted).to_contain_text("Deleted")
    expect(deleted).not_to_contain_text("Approved")
    expect(page.locator('#groups li[data-key="pa:NOTE04"]')).to_contain_text("Denied")
    expect(page.locator("#groups .group[data-group=denied] li")).to_have_count(1)
    _shot(page, tmp_path, "notes-once.png", full_page=True)
    page.goto(f"{url}/console/pa/NOTE03")
    expect(page.locator("#pa-badge")).to_have_text("Deleted")
    expect(page.locator("#pa-expires")).to_be_hidden()
    expect(page.locator("main")).not_to_contain_text("Approved until")


def test_every_link_on_a_pas_page_says_what_it_opens(make_daemon: Any, page: Any) -> None:
    from playwright.sync_api import expect

    from tests.real_shapes import request_object

    d = make_daemon(sandbox={"step_seconds": 0.05})
    url = d.intake_server.url
    pa = _submit(url, _post_mr(url, "000000004444"))
    pa_id = pa["pa_id"]
    wait_until(lambda: _pa_status(d, pa_id)[0] == "PA Response", what="answered")
    # the real service's token link is the request page with another token: a second link
    portal = pa["url"].split("/request/view/")[0]
    _callback(d, request_object(pa_id, "PA Response", "Favorable", portal=portal))
    wait_until(
        lambda: len(httpx.get(f"{url}/v1/pa/{pa_id}", timeout=10).json()["urls"]) > 1,
        what="a second link",
    )
    page.goto(f"{url}/console/pa/{pa_id}")
    links = page.locator("#pa-links a")
    expect(links.first).to_be_visible()
    names = [links.nth(i).inner_text() for i in range(links.count())]
    assert len(names) >= 3 and len(set(names)) == len(names), names
    for name in names:
        assert pa_id in name and "Other link" not in name, names
    assert any(f"PA {pa_id} as PDF" in n for n in names), names


def test_a_bookmarked_provisional_id_opens_the_pa_under_its_own_id(
    make_daemon: Any, page: Any, sandbox: Any
) -> None:
    """Submit PA in the service's empty format answers ``pending-...``; after the first
    callback the PA is ``17NSTY``. The page opened by the old id shows the PA, and the
    address says its id now."""
    from playwright.sync_api import expect

    from tests.real_shapes import request_object

    d = make_daemon(
        sandbox={"enabled": False},
        service={
            "claim_url": sandbox.claim_url + "empty",
            "outcomes_url": sandbox.outcomes_url,
            "username": sandbox.config.username,
            "password": sandbox.config.password,
            "api_key": sandbox.config.api_key,
        },
    )
    url = d.intake_server.url
    rx = "000000005555"
    pending = _submit(url, _post_mr(url, rx))["pa_id"]
    assert pending.startswith("pending-")
    body = request_object(
        "17NSTY",
        "PA Request",
        prescription={"drug_id": "085705", "ndc": b.Rx().product_id, "prescription_reference": rx},
    )
    _callback(d, body)
    assert httpx.get(f"{url}/v1/pa/{pending}", timeout=10).json()["pa_id"] == "17NSTY"
    page.goto(f"{url}/console/pa/{pending}")
    expect(page.get_by_role("heading", level=1)).to_have_text("PA 17NSTY for Rx 5555")
    expect(page).to_have_url(f"{url}/console/pa/17NSTY")
    expect(page.get_by_role("link", name="Open PA 17NSTY")).to_be_visible()
