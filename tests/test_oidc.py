"""Sign-in through an identity provider (OpenID Connect, issue 29): a small
purpose-built provider on loopback (discovery, keys, authorize, token) signs ID tokens
with its own RSA key; pa-bridge maps a claim to the person's display name. The
provider also misbehaves on purpose: a wrong nonce, another audience, a foreign key."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from flask import Flask, jsonify, redirect, request
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from pa_bridge.app import create_app, make_client
from pa_bridge.auth.oidc import OidcFailed
from pa_bridge.config import load_settings
from pa_bridge.encryption import open_store
from tests.support import free_port


class FakeProvider:
    """Issues one code per authorization and an ID token for it; ``spoil`` changes
    what the next token says (nonce, aud, key)."""

    def __init__(self) -> None:
        from pa_bridge.runtime import WsgiServer

        self.key = RSAKey.generate_key(2048, parameters={"kid": "k1"})
        self.foreign = RSAKey.generate_key(2048, parameters={"kid": "k1"})
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.codes: dict[str, dict[str, str]] = {}
        self.spoil: dict[str, str] = {}
        self.claims = {
            "sub": "00u1",
            "preferred_username": "pat@chain.example",
            "name": "Pat Q. Pharmacist",
        }
        self.lock = threading.Lock()
        app = Flask("fake-idp")

        @app.get("/.well-known/openid-configuration")
        def discovery() -> Any:
            return jsonify(
                issuer=self.issuer,
                authorization_endpoint=f"{self.issuer}/authorize",
                token_endpoint=f"{self.issuer}/token",
                jwks_uri=f"{self.issuer}/keys",
            )

        @app.get("/keys")
        def keys() -> Any:
            return jsonify(KeySet([self.key]).as_dict(private=False))

        @app.get("/authorize")
        def authorize() -> Any:
            a = request.args
            assert a["response_type"] == "code" and a["code_challenge_method"] == "S256"
            code = f"code{len(self.codes)}"
            with self.lock:
                self.codes[code] = {
                    "nonce": a["nonce"],
                    "client": a["client_id"],
                    "challenge": a["code_challenge"],
                }
            return redirect(f"{a['redirect_uri']}?code={code}&state={a['state']}")

        @app.post("/token")
        def token() -> Any:
            auth = request.authorization
            assert (
                auth is not None
                and auth.username == "pa-bridge"
                and auth.password == "s3cret-of-the-client"
            )
            got = self.codes.pop(request.form["code"])
            assert request.form.get("code_verifier")
            now = int(time.time())
            claims = {
                **self.claims, "iss": self.issuer, "aud": self.spoil.get("aud", got["client"]),
                "iat": now, "exp": now + 300, "nonce": self.spoil.get("nonce", got["nonce"]),
            }  # fmt: skip
            key = self.foreign if self.spoil.get("key") else self.key
            id_token = jwt.encode({"alg": "RS256", "kid": "k1"}, claims, key)
            return jsonify(access_token="at", token_type="Bearer", id_token=id_token)

        self.server = WsgiServer(app, "127.0.0.1", self.port, name="fake-idp")


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    p = FakeProvider()
    p.server.start()
    try:
        yield p
    finally:
        p.server.stop()


@pytest.fixture
def app(provider: FakeProvider, tmp_path: Path, sandbox: Any) -> Iterator[Any]:
    settings = load_settings(
        storage={"path": str(tmp_path / "o.sqlite3")},
        intake={"listen": "127.0.0.1:0"},
        callbacks={"listen": "127.0.0.1:0"},
        oidc={
            "issuer": provider.issuer,
            "client_id": "pa-bridge",
            "client_secret": "s3cret-of-the-client",
        },
    )
    store = open_store(settings)
    client = make_client(settings, sandbox.url)
    a = create_app(settings, store=store, client=client)
    try:
        yield a
    finally:
        a.extensions["pa_bridge"].close()
        client.close()
        store.close()


def _round_trip(app: Any) -> Any:
    """The browser's part: to the provider and back; the callback's answer."""
    c = app.test_client()
    start = c.get("/console/sign-in/oidc?next=/console/pa/ABC123")
    assert start.status_code == 302
    assert (
        "pa_bridge_sign_in=" in start.headers["Set-Cookie"]
        and "SameSite=Lax" in start.headers["Set-Cookie"]
    )
    at_idp = httpx.get(start.headers["Location"], follow_redirects=False, timeout=10)
    assert at_idp.status_code == 302
    back = urlsplit(at_idp.headers["Location"])
    assert back.path == "/console/oidc/callback" and "code" in parse_qs(back.query)
    return c, c.get(f"{back.path}?{back.query}")


def test_sign_in_through_the_provider_maps_the_display_name(app: Any) -> None:
    c, done = _round_trip(app)
    assert done.status_code == 302 and done.headers["Location"] == "/console/pa/ABC123"
    assert "pa_bridge_session=" in done.headers["Set-Cookie"]
    me = c.get("/console/session").get_json()
    assert me["name"] == "pat@chain.example" and me["display_name"] == "Pat Q. Pharmacist"
    store = app.extensions["pa_bridge"].store
    row = store.query("SELECT source, display_name FROM users WHERE name = 'pat@chain.example'")
    assert row == [{"source": "oidc", "display_name": "Pat Q. Pharmacist"}]
    trail = store.query("SELECT actor, action, detail FROM audit WHERE action = 'sign_in'")
    assert trail == [{"actor": "user:pat@chain.example", "action": "sign_in", "detail": "oidc"}]


@pytest.mark.parametrize(
    "spoil",
    [{"nonce": "not-the-one-sent"}, {"aud": "another-client"}, {"key": "foreign"}],
    ids=["nonce", "audience", "signature"],
)
def test_a_token_that_does_not_hold_signs_no_one_in(
    app: Any, provider: FakeProvider, spoil: dict[str, str]
) -> None:
    provider.spoil = spoil
    c, done = _round_trip(app)
    assert done.status_code == 302 and done.headers["Location"] == "/console/sign-in?failed=oidc"
    assert c.get("/console/session").status_code == 401
    failed = app.extensions["pa_bridge"].store.query(
        "SELECT detail FROM audit WHERE action = 'sign_in.failed'"
    )
    assert failed and failed[0]["detail"].startswith("oidc: the ID token does not hold")


def test_a_disabled_person_is_refused(app: Any) -> None:
    store = app.extensions["pa_bridge"].store
    _round_trip(app)
    store.write(lambda db: db.execute("UPDATE users SET disabled = 1"))
    c, done = _round_trip(app)
    assert done.headers["Location"] == "/console/sign-in?failed=refused"
    assert c.get("/console/session").status_code == 401


def test_a_callback_without_the_pending_sign_in_goes_back_to_the_start(app: Any) -> None:
    r = app.test_client().get("/console/oidc/callback?code=x&state=y")
    assert r.status_code == 302 and r.headers["Location"] == "/console/sign-in?failed=expired"


def test_a_state_from_another_sign_in_is_refused(provider: FakeProvider) -> None:
    from pa_bridge.auth.oidc import Oidc

    o = Oidc(
        load_settings(
            oidc={"issuer": provider.issuer, "client_id": "pa-bridge", "client_secret": "x" * 12}
        ).oidc,
        "x",
    )
    _url, pending = o.start("http://127.0.0.1/cb")
    with pytest.raises(OidcFailed, match="not for this sign-in"):
        o.finish(pending, {"code": "c", "state": "other"})
