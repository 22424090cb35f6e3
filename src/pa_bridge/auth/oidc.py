"""Sign-in through the chain's identity provider: OpenID Connect's authorization code
flow with PKCE (decision 0034).

The protocol is the libraries': Authlib builds the authorization request and the token
request (RFC 6749, PKCE per RFC 7636) and joserfc, Authlib's JOSE library, checks the
ID token's signature against the provider's published keys and its claims (issuer,
audience, expiry, nonce). We only fetch: the discovery document, the keys and the
token, over httpx. What the browser brings back is checked against what this sign-in
sent (``state``), kept server-side in a half-done session.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
from authlib.common.security import generate_token
from authlib.oauth2.rfc6749.parameters import prepare_grant_uri, prepare_token_request
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from ..config import OidcSettings

__all__ = ["Oidc", "OidcFailed", "OidcPerson"]

#: the algorithms an ID token may be signed with (never "none", never HMAC with a
#: key anyone holding the client secret could forge with)
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]


class OidcFailed(Exception):
    """The provider's answer could not sign anyone in; the message says why in words
    for the log and the page (never a token)."""


@dataclass(frozen=True)
class OidcPerson:
    name: str
    display_name: str


class Oidc:
    def __init__(self, settings: OidcSettings, client_secret: str, *, timeout_s: float = 10.0):
        self.s = settings
        self.issuer = (settings.issuer or "").rstrip("/")
        self._secret = client_secret
        self._timeout = timeout_s
        self._meta: tuple[float, dict[str, Any]] | None = None
        self._lock = threading.Lock()

    def _get(self, url: str) -> dict[str, Any]:
        try:
            r = httpx.get(url, timeout=self._timeout, follow_redirects=False)
        except httpx.HTTPError as e:
            raise OidcFailed(
                f"the identity provider could not be reached ({type(e).__name__})"
            ) from None
        if r.status_code != 200:
            raise OidcFailed(f"the identity provider answered {r.status_code} for {url}")
        try:
            found: dict[str, Any] = r.json()
        except ValueError:
            raise OidcFailed(f"the identity provider's {url} is not JSON") from None
        return found

    def metadata(self) -> dict[str, Any]:
        """The provider's discovery document (kept an hour)."""
        with self._lock:
            if self._meta is not None and time.monotonic() - self._meta[0] < 3600:
                return self._meta[1]
        meta = self._get(f"{self.issuer}/.well-known/openid-configuration")
        if str(meta.get("issuer", "")).rstrip("/") != self.issuer:
            raise OidcFailed("the discovery document names another issuer")
        with self._lock:
            self._meta = (time.monotonic(), meta)
        return meta

    def start(self, redirect_uri: str) -> tuple[str, dict[str, Any]]:
        """The provider's authorization URL to send the browser to, and what to keep
        until it comes back."""
        meta = self.metadata()
        state, nonce, verifier = generate_token(32), generate_token(32), generate_token(64)
        url = prepare_grant_uri(
            meta["authorization_endpoint"],
            self.s.client_id,
            "code",
            redirect_uri=redirect_uri,
            scope=" ".join(self.s.scopes),
            state=state,
            nonce=nonce,
            code_challenge=create_s256_code_challenge(verifier),
            code_challenge_method="S256",
        )
        pending = {"state": state, "nonce": nonce, "verifier": verifier, "redirect": redirect_uri}
        return url, pending

    def finish(self, pending: dict[str, Any], args: dict[str, str]) -> OidcPerson:
        """The person the provider's answer (``code`` and ``state`` on the callback)
        vouches for."""
        if args.get("error"):
            raise OidcFailed(f"the identity provider refused: {args['error'][:100]}")
        if not args.get("state") or args.get("state") != pending.get("state"):
            raise OidcFailed("the answer is not for this sign-in (state)")
        if not args.get("code"):
            raise OidcFailed("the answer has no code")
        meta = self.metadata()
        body = prepare_token_request(
            "authorization_code",
            code=args["code"],
            redirect_uri=pending["redirect"],
            code_verifier=pending["verifier"],
        )
        try:
            r = httpx.post(
                meta["token_endpoint"],
                content=body,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
                auth=(self.s.client_id or "", self._secret),
                timeout=self._timeout,
            )
        except httpx.HTTPError as e:
            raise OidcFailed(
                f"the token endpoint could not be reached ({type(e).__name__})"
            ) from None
        if r.status_code != 200:
            raise OidcFailed(f"the token endpoint answered {r.status_code}")
        try:
            id_token = str(r.json()["id_token"])
        except (ValueError, KeyError, TypeError):
            raise OidcFailed("the token endpoint's answer has no id_token") from None
        keys = KeySet.import_key_set(self._get(meta["jwks_uri"]))  # type: ignore[arg-type]
        try:
            token = jwt.decode(id_token, keys, algorithms=ALGORITHMS)
            jwt.JWTClaimsRegistry(
                leeway=60,
                iss={"essential": True, "value": self.issuer},
                aud={"essential": True, "value": self.s.client_id or ""},
                sub={"essential": True},
                exp={"essential": True},
                nonce={"essential": True, "value": pending["nonce"]},
            ).validate(token.claims)
        except (JoseError, ValueError) as e:
            raise OidcFailed(f"the ID token does not hold ({type(e).__name__})") from None
        claims = token.claims
        name = str(claims.get(self.s.username_claim) or claims["sub"]).strip()
        display = str(claims.get(self.s.display_name_claim) or name).strip()
        if not name:
            raise OidcFailed("the ID token names no one")
        return OidcPerson(name[:200], display[:200])
