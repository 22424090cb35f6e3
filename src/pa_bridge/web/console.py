"""The pharmacist console: ``GET /`` (the worklist page) and ``GET /console/pa/{id}``
(a PA's page), static pages with their script and style under ``/console/static/``;
the JSON they read, ``GET /v1/console/worklist`` and ``GET /v1/console/pa/{id}``; and
``POST /v1/pa/{id}/acknowledge`` (the pharmacist has dealt with it).

The pages and their assets hold no data, so they are served without a token; the JSON
endpoints are guarded like the rest of the local API. The pages send the token they
were given (``/?token=...`` once, or typed into the form) from ``sessionStorage``.
"""

from __future__ import annotations

import ipaddress

from flask import Blueprint, Response, current_app, g, jsonify, request

from .. import worklist
from ..service import BridgeError, Services
from ..service.pharmacies import Scope
from . import checks

__all__ = ["bp", "is_public_path", "scope", "STATIC_PREFIX"]

STATIC_PREFIX = "/console/static"
PA_PAGE_PREFIX = "/console/pa/"

bp = Blueprint(
    "console",
    __name__,
    static_folder="static",
    static_url_path=STATIC_PREFIX,
)

#: No inline script or style, nothing from another origin.
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def is_public_path(path: str) -> bool:
    """Paths served without an intake token: the page shell, its assets, the API description."""
    return (
        path in ("/", "/openapi.json")
        or path.startswith(STATIC_PREFIX + "/")
        or path.startswith(PA_PAGE_PREFIX)
    )


def _bridge() -> Services:
    b: Services = current_app.extensions["pa_bridge"]
    return b


def _page(name: str) -> Response:
    resp = bp.send_static_file(name)
    resp.headers["Content-Security-Policy"] = _CSP
    resp.headers["Referrer-Policy"] = "no-referrer"  # a ?token= never leaks onwards
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Cache-Control"] = "no-cache"
    return resp


@bp.get("/")
def console_page() -> Response:
    return _page("console.html")


@bp.get("/console/pa/<pa_id>")
def console_pa_page(pa_id: str) -> Response:
    # the page shell only: it reads the PA from /v1/console/pa/{id} with the token
    return _page("pa.html")


def _no_store(resp: Response) -> Response:
    resp.headers["Cache-Control"] = "no-store"
    return resp


def scope() -> Scope:
    """The pharmacies this request's token may act for (None: every pharmacy); the
    intake hook sets it."""
    found: Scope = g.get("scope")
    return found


@bp.get("/v1/console/worklist")
def console_worklist() -> Response:
    """``?pharmacy=<provider id>``: one store's (a scoped token: only its own)."""
    bridge = _bridge()
    ids = bridge.pas.pharmacy_filter(request.args.get("pharmacy"), scope())
    answer = worklist.worklist(bridge, pharmacies=ids)
    answer["pharmacies"] = worklist.pharmacy_choices(bridge, scope())
    return _no_store(jsonify(answer))


@bp.get("/v1/console/pa/<pa_id>")
def console_pa(pa_id: str) -> Response:
    return _no_store(jsonify(worklist.pa_page(_bridge(), pa_id, scope=scope())))


def who() -> str:
    """Who is acting, for the audit trail: the intake token's name (``token#N``, its
    place in ``[intake] tokens``), or ``console`` for a request from loopback when no
    tokens are configured (then the API is served on loopback only)."""
    person = g.get("person")
    if person is not None:  # a person signed in (issue 29)
        return str(person.actor)
    actor = str(g.get("actor") or "")
    if actor.startswith("token#"):
        return actor.split("@", 1)[0]
    try:
        ip = ipaddress.ip_address(request.remote_addr or "")
    except ValueError:
        loopback = False
    else:
        mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:127.0.0.1
        loopback = ip.is_loopback or bool(mapped and mapped.is_loopback)
    return "console" if loopback else (request.remote_addr or "unknown")


@bp.post("/v1/pa/<pa_id>/acknowledge")
def acknowledge_pa(pa_id: str) -> Response:
    """Optional body ``{"cursor": "<the PA's cursor as the page showed it>"}``: what the
    pharmacist saw is what is acknowledged (news after it keeps the PA on the list)."""
    raw = request.get_data()
    seen = None
    if raw.strip():
        cursor = checks.json_object(raw, (request.mimetype or "").lower()).get("cursor")
        if cursor is not None:
            if isinstance(cursor, bool) or not isinstance(cursor, str | int):
                raise BridgeError(400, "invalid_body", "'cursor' must be the PA's cursor")
            seen = str(cursor)
    answer = worklist.acknowledge(
        _bridge(), pa_id, who(), scope=scope(), seen=seen, remote=request.remote_addr
    )
    return _no_store(jsonify(answer))
