"""What every request to the intake listener must pass, read from werkzeug's
``Request``: the Host and Origin guard (decision 0012), the 415 for a body that is not
JSON, the intake token, the JSON body, for the one ``before_request`` hook of
:mod:`.intake`.
"""

from __future__ import annotations

import functools
import hmac
import ipaddress
from dataclasses import dataclass
from typing import Any

from werkzeug.wrappers import Request

from ..jsonlimits import MAX_DEPTH, TooDeep, loads_bounded
from ..service.errors import InvalidRequest
from ..service.pharmacies import Scope

__all__ = [
    "Refusal",
    "Tokens",
    "guard",
    "host_allowed",
    "identify",
    "json_object",
]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})


@dataclass(frozen=True)
class Refusal:
    """An error answer a check gives: ``{"error": {"code", "message"}}`` with ``status``."""

    status: int
    code: str
    message: str


FORBIDDEN_HOST = Refusal(
    403,
    "forbidden_host",
    "this server answers only to its address, localhost, or a name in intake.allowed_hosts",
)
CROSS_ORIGIN = Refusal(403, "cross_origin", "a page from another site may not send requests here")
NOT_JSON = Refusal(
    415, "unsupported_media_type", "send the body as JSON (Content-Type: application/json)"
)


@functools.lru_cache(maxsize=256)
def host_allowed(host: str, allowed: frozenset[str]) -> bool:
    """DNS rebinding: a page on a name the attacker controls, resolved to this box,
    sends that name in ``Host``. IP literals and ``localhost`` are fine (the browser
    went to the address itself); other names must be configured. (A box is asked for
    by a handful of names: the last 256 answers are kept.)"""
    name = host.strip().lower()
    if name.startswith("["):  # [::1]:8470
        return True
    name = name.rsplit(":", 1)[0] if name.count(":") == 1 else name
    if name in allowed or name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def guard(request: Request, allowed: frozenset[str], max_body: int | None) -> Refusal | None:
    """Cross-site requests and foreign host names (issue 19, decision 0012): a page on
    another origin may not change anything here, and a rebound name may not read; and
    a body that is not JSON (415). A body over ``max_body`` passes (its 413 comes
    first, whatever its type). Which paths are exempt is the caller's business."""
    host = request.host
    if not host_allowed(host, allowed):
        return FORBIDDEN_HOST
    if request.method in SAFE_METHODS:
        return None
    headers = request.headers
    site = headers.get("Sec-Fetch-Site")
    origin = headers.get("Origin")
    if (site is not None and site not in ("same-origin", "none")) or (
        origin is not None and origin != f"{request.scheme}://{host}"
    ):
        return CROSS_ORIGIN
    length = request.content_length or 0
    if max_body is not None and length > max_body:
        return None
    ctype = request.mimetype
    if ctype in _FORM_TYPES or (length and ctype != "application/json"):
        return NOT_JSON
    return None


@dataclass(frozen=True, repr=False)
class Tokens:
    """The intake tokens: ``everyone``'s act for every pharmacy, each ``scoped`` one
    for its provider ids only. None at all: no token is asked for."""

    everyone: tuple[bytes, ...] = ()
    scoped: tuple[tuple[bytes, frozenset[str]], ...] = ()

    def __repr__(self) -> str:  # secrets are never shown
        return f"Tokens({len(self.everyone)} for every pharmacy, {len(self.scoped)} scoped)"

    @classmethod
    def of(cls, everyone: list[str], scoped: list[tuple[str, frozenset[str]]]) -> Tokens:
        return cls(tuple(t.encode() for t in everyone), tuple((t.encode(), p) for t, p in scoped))

    @property
    def required(self) -> bool:
        return bool(self.everyone or self.scoped)


def identify(request: Request, tokens: Tokens) -> tuple[str, Scope] | None:
    """Who sends this request (the actor written in the audit trail) and the
    pharmacies it may act for; None when a token is required and this one is not
    valid (401)."""
    remote = request.remote_addr
    if not tokens.required:
        return remote or "unknown", None
    # the header itself, not ``request.authorization``: werkzeug reads a token with
    # an "=" inside as parameters, and a configured token may hold one
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer" and presented:
        raw = presented.encode()
        for i, t in enumerate(tokens.everyone):
            if hmac.compare_digest(raw, t):
                return f"token#{i + 1}@{remote}", None
        for i, (t, pharmacies) in enumerate(tokens.scoped):
            if hmac.compare_digest(raw, t):
                return f"token#scoped-{i + 1}@{remote}", pharmacies
    return None


def json_object(raw: bytes, ctype: str) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 ``invalid_body``."""
    if ctype != "application/json" and not (
        ctype.startswith("application/") and ctype.endswith("+json")
    ):
        raise InvalidRequest("invalid_body", "the body must be a JSON object")
    try:
        body = loads_bounded(raw)
    except TooDeep:
        raise InvalidRequest(
            "invalid_body", f"the JSON body is nested deeper than {MAX_DEPTH} levels"
        ) from None
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise InvalidRequest("invalid_body", "the body must be a JSON object")
    return body
