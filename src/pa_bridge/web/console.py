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

from flask import Blueprint, Response, current_app, g, jsonify, request, send_from_directory

from .. import worklist
from ..service import UseCases, bodies
from ..service.errors import InvalidRequest
from ..service.pharmacies import Scope
from . import checks
from .openapi import operation
from .pages import STATIC_DIR, page

__all__ = ["bp", "is_public_path", "scope", "STATIC_PREFIX"]

STATIC_PREFIX = "/console/static"
PA_PAGE_PREFIX = "/console/pa/"

bp = Blueprint("console", __name__)


def is_public_path(path: str) -> bool:
    """Paths served without an intake token: the page shell, its assets, the API description."""
    return (
        path in ("/", "/openapi.json")
        or path.startswith(STATIC_PREFIX + "/")
        or path.startswith(PA_PAGE_PREFIX)
    )


def _use_cases() -> UseCases:
    b: UseCases = current_app.extensions["pa_bridge"]
    return b


def _page(name: str) -> Response:
    return page(name, cache="no-cache")


_HTML = {200: ["text/html"]}
_PA_ID = {"pa_id": "the PA id"}


@bp.get("/")
@operation("console", public=True, answers={200: (None, "the page")}, content=_HTML)
def console_page() -> Response:
    """The pharmacist console (HTML); no token needed to load it

    When tokens are configured, open `/?token=<intake token>` once (or type the token
    into the page's form): the page keeps it in sessionStorage and sends it on its API
    calls."""
    return _page("console.html")


@bp.get("/console/pa/<pa_id>")
@operation(
    "consolePaPage",
    public=True,
    path=_PA_ID,
    answers={200: (None, "the page")},
    content=_HTML,
)
def console_pa_page(pa_id: str) -> Response:
    """A PA's console page (HTML); no token needed to load it"""
    # the page shell only: it reads the PA from /v1/console/pa/{id} with the token
    return _page("pa.html")


@bp.get(STATIC_PREFIX + "/<path:filename>")
@operation(
    "consoleAsset",
    public=True,
    path={"filename": "console.js, common.js, pa.js, console.css, favicon.svg, ..."},
    answers={200: (None, "the file")},
    errors={404: "no such file"},
    content={200: ["text/javascript", "text/css", "text/html", "image/svg+xml"]},
)
def console_asset(filename: str) -> Response:
    """The console's script and style"""
    return send_from_directory(STATIC_DIR, filename)


def _no_store(resp: Response) -> Response:
    resp.headers["Cache-Control"] = "no-store"
    return resp


def scope() -> Scope:
    """The pharmacies this request's token may act for (None: every pharmacy); the
    intake hook sets it."""
    found: Scope = g.get("scope")
    return found


@bp.get("/v1/console/worklist")
@operation(
    "consoleWorklist",
    query=bodies.PharmacyQuery,
    answers={200: (bodies.Worklist, "the worklist")},
    errors={
        400: "an empty `pharmacy`",
        403: "`pharmacy_not_allowed`: the token is limited to other pharmacies",
    },
)
def console_worklist() -> Response:
    """The console's data: what needs the pharmacist, today's claims and PAs

    `items`: what needs the pharmacist, grouped (`counts`, `groups`): claims rejected
    for PA today and not submitted; PAs denied, deleted, with a failed fax, failed or
    expired, approved, or without a decision `intake.pending_alert_hours` after they
    started, until acknowledged. `claims`: claims rejected for PA received today (local
    time of the daemon) with their replacement message and button label; `pas`: PAs
    created or changed today; `guide`: every status in words. The console polls this
    every 2 s. A chain: `?pharmacy=<provider id>` for one store's; `pharmacies` lists
    the stores the token may choose between."""
    use_cases = _use_cases()
    ids = use_cases.pas.pharmacy_filter(request.args.get("pharmacy"), scope())
    answer = worklist.worklist(use_cases, pharmacies=ids)
    answer["pharmacies"] = worklist.pharmacy_choices(use_cases, scope())
    return _no_store(jsonify(bodies.Worklist.model_validate(answer).model_dump(exclude_unset=True)))


@bp.get("/v1/console/pa/<pa_id>")
@operation(
    "consolePa",
    path=_PA_ID,
    answers={200: (bodies.ConsolePa, "the PA")},
    errors={404: "unknown PA"},
)
def console_pa(pa_id: str) -> Response:
    """One PA for the console's PA page

    Status in words, history, events (DELETE, fax failure), acknowledgements, the claim
    it came from (Rx number, product id, drug name where known) and its links."""
    page = worklist.pa_page(_use_cases(), pa_id, scope=scope())
    return _no_store(jsonify(bodies.ConsolePa.model_validate(page).model_dump(exclude_unset=True)))


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
@operation(
    "acknowledgePa",
    path=_PA_ID,
    body=bodies.AcknowledgeBody,
    body_required=False,
    answers={200: (bodies.AcknowledgeAnswer, "recorded")},
    errors={
        400: "`invalid_body`: a body that is not an object, or a cursor that is not one",
        404: "unknown PA",
        503: "could not be saved; try again",
    },
)
def acknowledge_pa(pa_id: str) -> Response:
    """The pharmacist has dealt with the PA: it leaves the worklist

    Recorded in the audit trail with who and when. The optional body names the PA's
    cursor the pharmacist's page showed; without it, the PA's cursor now. The PA comes
    back on the worklist with news after that cursor (a new status or outcome, an event
    not seen before) or another group (decision 0014)."""
    raw = request.get_data()
    seen = None
    if raw.strip():
        cursor = checks.json_object(raw, (request.mimetype or "").lower()).get("cursor")
        if cursor is not None:
            if isinstance(cursor, bool) or not isinstance(cursor, str | int):
                raise InvalidRequest("invalid_body", "'cursor' must be the PA's cursor")
            seen = str(cursor)
    answer = worklist.acknowledge(
        _use_cases(), pa_id, who(), scope=scope(), seen=seen, remote=request.remote_addr
    )
    return _no_store(jsonify(answer))
