"""Cross-site requests and DNS rebinding against the local API, in a real Chromium
(issue 19). With no intake tokens (the loopback default) a page on any other origin,
opened on a workstation, could create PAs with a form or a no-cors fetch, and a page
on a rebound name could read PA links. Every host name here resolves to 127.0.0.1
inside the browser (``--host-resolver-rules``): no traffic leaves the machine."""

from __future__ import annotations

from typing import Any

import httpx
from flask import Flask

from pa_bridge.runtime import WsgiServer
from tests import builders as b


def _rejected_claim(url: str) -> str:
    body = {
        "request": b.request_bytes().decode("latin-1"),
        "response": b.response_bytes([b.REJECT_75]).decode("latin-1"),
    }
    r = httpx.post(f"{url}/v1/claims", json=body, timeout=10)
    assert r.status_code == 200
    return str(r.json()["claim_id"])


def _attacker_site(html: str) -> WsgiServer:
    app = Flask("attacker")

    @app.get("/")
    def page() -> tuple[str, int, dict[str, str]]:
        return html, 200, {"Content-Type": "text/html"}

    return WsgiServer(app, "127.0.0.1", 0, name="attacker").start()


def test_another_site_cannot_submit_a_pa_or_post_a_claim(make_daemon: Any, browser: Any) -> None:
    d = make_daemon()
    url = d.intake_server.url
    claim_id = _rejected_claim(url)
    claims_before = d.store.query("SELECT count(*) AS n FROM exchanges")[0]["n"]
    smuggled = '{"request": "x", "response": "y"}'  # a text/plain body a no-cors fetch may send
    html = f"""<!doctype html><html><body>
<form id="f" method="post" action="{url}/v1/claims/{claim_id}/pa" target="sink"></form>
<iframe name="sink"></iframe>
<script>
  fetch("{url}/v1/claims/{claim_id}/pa", {{method: "POST", mode: "no-cors"}});
  fetch("{url}/v1/claims", {{method: "POST", mode: "no-cors", body: '{smuggled}'}});
  fetch("{url}/v1/claims/{claim_id}/pa", {{method: "POST", mode: "no-cors",
        headers: {{"Content-Type": "text/plain"}}, body: "{{}}"}});
  document.getElementById("f").submit();
  setTimeout(function () {{ document.title = "done"; }}, 1500);
</script></body></html>"""
    site = _attacker_site(html)
    try:
        page = browser.new_page()
        seen: list[int] = []
        page.on("response", lambda r: seen.append(r.status) if url in r.url else None)
        page.goto(f"http://attacker.test:{site.port}/")
        page.wait_for_function("document.title === 'done'", timeout=10_000)
        page.close()
    finally:
        site.stop()
    assert d.store.query("SELECT count(*) AS n FROM pas")[0]["n"] == 0, "a PA was created"
    assert d.store.query("SELECT count(*) AS n FROM exchanges")[0]["n"] == claims_before
    assert seen and all(s in (403, 415) for s in seen), seen
    # the dispensing system (no browser headers) and the console itself still work
    r = httpx.post(f"{url}/v1/claims/{claim_id}/pa", timeout=10)
    assert r.status_code == 201


def test_a_rebound_name_cannot_read_the_api_or_the_console(make_daemon: Any, browser: Any) -> None:
    d = make_daemon()
    port = d.intake_server.port
    _rejected_claim(d.intake_server.url)
    page = browser.new_page()
    try:
        for path in ("/v1/pa", "/", "/v1/dashboard/open"):
            resp = page.goto(f"http://rebind.test:{port}{path}")
            assert resp is not None and resp.status == 403, path
            assert "forbidden_host" in resp.text()
        ok = page.goto(f"http://127.0.0.1:{port}/v1/pa")
        assert ok is not None and ok.status == 200
        ok = page.goto(f"http://localhost:{port}/healthz")
        assert ok is not None and ok.status == 200
    finally:
        page.close()


def test_configured_names_are_answered(make_daemon: Any) -> None:
    d = make_daemon(intake={"allowed_hosts": ["pa-box.store.test"]})
    url = d.intake_server.url
    port = d.intake_server.port
    ok = httpx.get(f"{url}/v1/pa", headers={"Host": f"pa-box.store.test:{port}"})
    assert ok.status_code == 200
    bad = httpx.get(f"{url}/v1/pa", headers={"Host": f"other.test:{port}"})
    assert bad.status_code == 403 and bad.json()["error"]["code"] == "forbidden_host"
    # health and metrics answer any name: monitors, no PHI
    assert httpx.get(f"{url}/healthz", headers={"Host": "monitor.test"}).status_code == 200
