"""The pharmacist console: its JSON over HTTP, and the page itself in headless Chromium
(the system browser, driven by Playwright) against an in-process daemon and sandbox."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pa_bridge import worklist
from tests import builders as b
from tests.support import wait_until

TOKEN = "console-test-token-1"
PHI = (b.PATIENT_FIRST, b.PATIENT_LAST, b.PATIENT_DOB, b.CARDHOLDER_ID)


def _claim(request: bytes, response: bytes) -> dict[str, Any]:
    return {"request": request.decode("latin-1"), "response": response.decode("latin-1")}


def _post_75(url: str, *, token: str | None = None, **req: Any) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = httpx.post(
        f"{url}/v1/claims",
        json=_claim(b.request_bytes(**req), b.response_bytes([b.REJECT_75])),
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
        json=_claim(b.request_bytes(), b.response_bytes([b.PAID])),
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
    assert worklist.claims_today(d.bridge, time.time() + 86_400) == []
    assert worklist.pas_today(d.bridge, time.time() + 86_400) == []


def test_several_transactions_give_one_row_per_pa_eligible_transaction(make_daemon: Any) -> None:
    d = make_daemon()
    url = d.intake_server.url
    req = b.request_bytes(rxs=(b.Rx(), b.Rx(rx_number="000001234568", product_id="00093505699")))
    body = httpx.post(
        f"{url}/v1/claims",
        json=_claim(req, b.response_bytes([b.PAID, b.REJECT_MR])),
        timeout=10,
    ).json()
    _wait_answer_recorded(d, body["claim_id"])
    rows = worklist.claims_today(d.bridge)
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

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("no system Chromium on PATH (`make browser` installs it with apt-get)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        br = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--no-first-run",
            ],
        )
        try:
            yield br
        finally:
            br.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    try:
        yield pg
    finally:
        context.close()


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
    button = page.get_by_role("button", name=answer["button_label"])
    expect(button).to_be_visible()
    for _ in range(6):
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
        expect(page.get_by_role("button", name=answer["button_label"])).to_be_visible()
        assert "token" not in page.url  # dropped from the address bar and history
        assert page.evaluate("sessionStorage.getItem('pa-bridge.intake-token')") == TOKEN
        expect(page.locator("#token-form")).to_be_hidden()
        # with a token, the link goes to the PA's own URL (a link cannot send the header)
        with ctx.expect_page() as popup:
            page.get_by_role("button", name=answer["button_label"]).click()
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
        json=_claim(
            b.request_bytes(rxs=(b.Rx(product_id="00000000000"),)),
            b.response_bytes([b.REJECT_MR]),
        ),
        timeout=10,
    ).json()
    page.goto(f"{url}/")
    button = page.get_by_role("button", name=body["button_label"])
    button.click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("was not submitted")
    expect(alert).to_contain_text("does not recognise the drug")
    expect(page.locator("#claims-body .row-error")).to_contain_text("does not recognise")
    # the button is still there to try again, and nothing was stored
    expect(page.get_by_role("button", name=body["button_label"])).to_be_visible()
    assert d.store.query("SELECT count(*) AS n FROM pas")[0]["n"] == 0
