"""A person signs in to the console in Chromium with a password and a TOTP code, opens
a PA (the sandbox sees who: ``remote_user``), is signed out after the idle time on a
moved clock, and signs out (issue 29)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pyotp
import pytest

from pa_bridge.config import load_settings
from pa_bridge.runtime import Daemon
from tests import builders as b
from tests.support import wait_until

pytestmark = pytest.mark.slow


class Clock:
    """Real time, plus what the test moves it by."""

    def __init__(self) -> None:
        import time

        self._time = time.time
        self.offset = 0.0

    def __call__(self) -> float:
        return self._time() + self.offset


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Daemon, Clock]]:
    clock = Clock()
    settings = load_settings(
        storage={"path": str(tmp_path / "pa.sqlite3")},
        intake={"listen": "127.0.0.1:0"},
        callbacks={"listen": "127.0.0.1:0"},
        sandbox={"step_seconds": 0.2, "listen": "127.0.0.1:0", "persist": False},
        console={"totp": "required", "phone_number": "555-0100", "fax_number": "555-0101"},
    )
    d = Daemon(settings, clock=clock)
    d.start()
    try:
        yield d, clock
    finally:
        d.stop()


def _code(secret: str, clock: Clock) -> str:
    return pyotp.TOTP(secret).at(datetime.fromtimestamp(clock(), tz=UTC))


def _sign_in(page: Any, url: str, password: str, secret: str, clock: Clock) -> None:
    from playwright.sync_api import expect

    page.goto(f"{url}/")
    expect(page).to_have_url(re.compile(r"/console/sign-in\?next=/$"))
    page.get_by_label("Name").fill("pat")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_label("Code")).to_be_visible()
    page.get_by_label("Code").fill(_code(secret, clock))
    page.get_by_role("button", name="Continue").click()
    expect(page).to_have_url(f"{url}/")
    expect(page.locator("#who")).to_contain_text("Signed in as Pat Q. Pharmacist")


def test_sign_in_with_totp_open_a_pa_idle_log_off_and_sign_out(
    daemon: tuple[Daemon, Clock],
    browser: Any,
    cli: Any,
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    d, clock = daemon
    assert d.intake_server is not None and d.sandbox is not None and d.store is not None
    url = d.intake_server.url
    cfg = tmp_path / "ops.toml"
    cfg.write_text(f'[storage]\npath = "{d.store.path}"\n[console]\ntotp = "required"\n')
    added = cli(
        "users", "add", "pat", "--display-name", "Pat Q. Pharmacist", "--generate-password",
        "--config", str(cfg),
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    password = re.search(r"password: (\S+)", added.output).group(1)  # type: ignore[union-attr]
    secret = re.search(r"secret=([A-Z2-7]+)", added.output).group(1)  # type: ignore[union-attr]

    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(15_000)
    seen: list[str] = []
    page.on("request", lambda req: seen.append(req.url))
    try:
        _sign_in(page, url, password, secret, clock)
        cookie = next(c for c in ctx.cookies() if c["name"] == "pa_bridge_session")
        assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
        assert not any(cookie["value"] in u for u in seen)  # never in a URL

        # a PA opened from the console tells the service who opened it
        claim = httpx.post(
            f"{url}/v1/claims",
            json={
                "request": b.request_bytes().decode("latin-1"),
                "response": b.response_bytes([b.REJECT_75]).decode("latin-1"),
            },
            timeout=10,
        ).json()
        row = page.locator("#claims-body tr", has_text="1234567")
        with ctx.expect_page() as popup:
            row.get_by_role("button", name=claim["button_label"]).click()
        opened = popup.value
        opened.wait_for_load_state()
        assert opened.url.startswith(d.sandbox.url)

        def remote_users() -> list[dict[str, str]]:
            pas = httpx.get(f"{d.sandbox.url}/sandbox/pas", timeout=5).json()["pas"]
            return [u for pa in pas for u in pa.get("remote_users", [])]

        who = wait_until(remote_users, what="the sandbox recorded remote_user")
        assert who[0]["display_name"] == "Pat Q. Pharmacist"
        assert who[0]["phone_number"] == "555-0100" and who[0]["fax_number"] == "555-0101"
        opened.close()
        trail = d.store.query("SELECT actor, action FROM audit WHERE actor = 'user:pat'")
        assert {"sign_in", "pa.submit", "pa.open"} <= {r["action"] for r in trail}

        # nothing done for longer than the idle time: the page's own polling finds the
        # session ended and goes to the sign-in page, saying why
        clock.offset += 16 * 60
        expect(page).to_have_url(re.compile(r"/console/sign-in\?next=.*ended=idle"), timeout=20_000)
        expect(page.locator("#status")).to_contain_text("without activity")
        ended = d.store.query("SELECT detail FROM audit WHERE action = 'session.ended'")
        assert ended and ended[0]["detail"] == "idle"

        # sign in again (a new code: the clock moved), then sign out
        page.get_by_label("Name").fill("pat")
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_label("Code").fill(_code(secret, clock))
        page.get_by_role("button", name="Continue").click()
        expect(page.locator("#who")).to_contain_text("Signed in as Pat Q. Pharmacist")
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(re.compile(r"/console/sign-in$"))
        page.goto(f"{url}/")
        expect(page).to_have_url(re.compile(r"/console/sign-in\?next=/$"))
        assert (
            d.store.query("SELECT action FROM audit ORDER BY seq DESC LIMIT 1")[0]["action"]
            == "sign_out"
        )
    finally:
        ctx.close()
