"""The local API the dispensing system and the workstations use."""

from __future__ import annotations

import socket
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from werkzeug.wrappers import Response as BaseResponse

from ..service import UseCases, bodies, idempotency
from ..service.bodies import ClaimAnswer, dump
from ..service.errors import InvalidRequest
from . import checks, console, openapi, people
from .console import scope
from .errors import error_response, install_error_handlers
from .openapi import operation
from .pages import private_redirect

__all__ = ["create_intake_app"]

bp = Blueprint("intake", __name__)


def _use_cases() -> UseCases:
    s: UseCases = current_app.extensions["pa_bridge"]
    return s


def _json_body() -> dict[str, Any]:
    raw = request.get_data()  # enforces MAX_CONTENT_LENGTH (413) before JSON parsing
    return checks.json_object(raw, request.mimetype)


_UNGUARDED = frozenset({"/healthz", "/metrics"})  # no PHI, and monitors may use any name


@bp.before_app_request
def _admit() -> tuple[Response, int] | BaseResponse | None:
    """Every request's one check: the Host and Origin guard and the 415
    (:func:`checks.guard`) for every path but health and metrics; then a person's
    session (:func:`people.admit`, issue 29); then, for a request that is not a
    person's and not a console page, the intake token (:func:`checks.identify`).
    ``g.actor`` and ``g.scope`` say who is admitted."""
    path = request.path
    g.actor, g.scope = request.remote_addr or "unknown", None
    if path in _UNGUARDED:
        return None
    config = current_app.config
    refused = checks.guard(request, config["PA_BRIDGE_ALLOWED_HOSTS"], config["MAX_CONTENT_LENGTH"])
    if refused is not None:
        return error_response(refused.status, refused.code, refused.message)
    stop = people.admit()  # a person's session, or a console that needs one
    if stop is not None:
        return stop
    if g.person is not None or console.is_public_path(path) or people.is_own(path):
        return None
    who = checks.identify(request, current_app.extensions["pa_bridge.tokens"])
    if who is None:
        resp, status = error_response(401, "unauthorized", "a valid intake token is required")
        resp.headers["WWW-Authenticate"] = 'Bearer realm="pa-bridge"'
        return resp, status
    g.actor, g.scope = who
    return None


def _idempotency_key() -> str | None:
    try:
        return idempotency.check_key(request.headers.get("Idempotency-Key"))
    except ValueError as e:
        raise InvalidRequest("invalid_idempotency_key", str(e)) from None


def _answer(model: BaseModel, status: int) -> tuple[Response, int]:
    if isinstance(model, ClaimAnswer):  # its JSON is made once, for the store too
        resp = Response(model.json_text() + "\n", mimetype="application/json")
    else:
        resp = jsonify(dump(model))
    if isinstance(model, idempotency.Replayed):
        resp.headers["Idempotent-Replayed"] = "true"
    return resp, status


_PHARMACY_NOT_ALLOWED = "`pharmacy_not_allowed`: the token is limited to other pharmacies"
_IN_PROGRESS = "a request with this Idempotency-Key is still being answered"
_CLAIM_ID = {"claim_id": "the `claim_id` from the intake answer"}
_PA_ID = {
    "pa_id": "the PA id, or the provisional `pending-...` id a submit answered before the"
    " PA's first callback (the answer has the PA's own `pa_id`)"
}


@bp.post("/v1/claims")
@operation(
    "postClaim",
    body=bodies.ClaimExchange,
    headers=bodies.KeyHeader,
    replayed=True,
    answers={200: (bodies.ClaimAnswer, "what to show the pharmacist")},
    errors={
        400: "malformed claim (with byte offset, segment and field), an exchange without what"
        " a decision needs (`detail.missing` names it), or a body that is not one",
        403: _PHARMACY_NOT_ALLOWED + " (`detail.provider_id`)",
        404: "a replayed Idempotency-Key whose claim is gone (purged by retention)",
        422: "the Idempotency-Key was used with another request or on another path, or"
        " `unknown_pharmacy`: a chain's claim from a pharmacy it does not list"
        " (`detail.provider_id`; nothing stored or sent)",
        503: "the claim could not be stored; send it again",
    },
)
def post_claim() -> tuple[Response, int]:
    """Claim intake: store the exchange and answer what to show

    Rejections 70/75/76 ask the outcomes interface first, within the budget (1500 ms by
    default); MR/AG/A6 answer at once with the submit-PA option; every other claim
    answers at once and is reported asynchronously."""
    key = _idempotency_key()
    answer = _use_cases().claims.intake(_json_body(), g.actor, idempotency_key=key, scope=g.scope)
    return _answer(answer, 200)


@bp.get("/v1/claims/<claim_id>")
@operation(
    "getClaim",
    path=_CLAIM_ID,
    answers={200: (bodies.Claim, "the claim")},
    errors={404: "unknown claim"},
)
def get_claim(claim_id: str) -> Response:
    """A claim: the answer given, and its PA(s)"""
    return jsonify(dump(_use_cases().pas.get_claim(claim_id, scope())))


@bp.post("/v1/claims/<claim_id>/pa")
@operation(
    "submitPa",
    path=_CLAIM_ID,
    body=bodies.SubmitPa,
    body_required=False,
    headers=bodies.KeyHeader,
    replayed=True,
    answers={
        201: (bodies.Pa, "the PA, created now"),
        200: (bodies.Pa, "the PA created earlier for this claim (or its key)"),
    },
    errors={
        400: "bad body or transaction index",
        403: _PHARMACY_NOT_ALLOWED,
        404: "unknown claim",
        409: "the claim was not rejected for a reason that allows a PA, or was reversed",
        410: "the claim is older than the retention period",
        422: "the service says claim data is missing, the Idempotency-Key was used with"
        " another request or on another path, or `unknown_pharmacy` (the claim's pharmacy"
        " is not configured; nothing sent)",
        502: "the service answered with an error",
        503: "the service is unreachable, or storage is unavailable",
        504: "the service did not answer in time",
    },
)
def post_pa(claim_id: str) -> tuple[Response, int]:
    """Submit a PA for the claim (a second submit returns the same PA)

    The service is called once per claim key: a second submit, on this claim or on
    another exchange of the same claim (same BIN, PCN, group, Rx number, fill number
    and provider), answers 200 with the PA already held and sends nothing."""
    key = _idempotency_key()
    body = _json_body() if request.get_data() else {}
    pa, created = _use_cases().pas.submit_pa(
        claim_id, body, g.actor, idempotency_key=key, scope=scope()
    )
    return _answer(pa, 201 if created else 200)


@bp.post("/v1/reversals")
@operation(
    "postReversal",
    body=bodies.Reversal,
    headers=bodies.KeyHeader,
    replayed=True,
    answers={
        200: (bodies.ReversalAnswer, "delivered to the service"),
        202: (
            bodies.ReversalAnswer,
            "queued: retried until the service takes it, or held until store IT fixes"
            " pa-bridge's credentials or configuration (then sent by itself)",
        ),
    },
    errors={
        400: "malformed, or not a B2",
        403: _PHARMACY_NOT_ALLOWED,
        409: _IN_PROGRESS,
        422: "`reversal_refused`: the service refused it for good (`detail` is the"
        " ReversalAnswer, status failed; it stays in the queue as failed), the"
        " Idempotency-Key was used with another request or on another path, or"
        " `unknown_pharmacy` (nothing stored or sent)",
        503: "could not be stored; send it again",
    },
)
def post_reversal() -> tuple[Response, int]:
    """Forward a B2 so the PA is deleted; never lost"""
    key = _idempotency_key()
    answer, delivered = _use_cases().reversals.reversal(
        _json_body(), g.actor, idempotency_key=key, scope=scope()
    )
    return _answer(answer, 200 if delivered else 202)


@bp.get("/v1/pa")
@operation(
    "listPas",
    query=bodies.PaFeedQuery,
    answers={200: (bodies.PaList, "PAs and the cursor to ask from next")},
    errors={
        400: "a limit that is not a whole number of at least 1, an empty `claim_id` or"
        " `pharmacy`, or a cursor that was never handed out (not a number, negative, or"
        " beyond the newest change: `detail.newest_cursor`)",
        403: _PHARMACY_NOT_ALLOWED,
        404: "unknown claim (with claim_id)",
    },
)
def list_pas() -> Response:
    """PAs with their current status, in change order"""
    try:
        limit = int(request.args.get("limit", "100"))
    except ValueError:
        limit = 0
    if limit < 1:
        raise InvalidRequest("invalid_limit", "'limit' must be a whole number of at least 1")
    limit = min(limit, 1000)
    claim_id = request.args.get("claim_id")
    if claim_id is not None and not claim_id.strip():
        raise InvalidRequest("invalid_claim_id", "'claim_id' must name a claim")
    pas = _use_cases().pas.list_pas(
        request.args.get("since"),
        limit,
        claim_id=claim_id,
        pharmacy=request.args.get("pharmacy"),
        scope=scope(),
    )
    return jsonify(dump(pas))


@bp.get("/v1/pa/<pa_id>")
@operation(
    "getPa",
    path=_PA_ID,
    answers={200: (bodies.PaWithHistory, "the PA")},
    errors={404: "unknown PA"},
)
def get_pa(pa_id: str) -> Response:
    """One PA with its status history"""
    return jsonify(dump(_use_cases().pas.get_pa(pa_id, scope())))


@bp.get("/v1/pa/<pa_id>/open")
@operation(
    "openPa",
    path=_PA_ID,
    answers={302: (None, "redirect to the PA's page")},
    errors={404: "unknown PA, or no URL yet"},
)
def open_pa(pa_id: str) -> BaseResponse:
    """302 to the PA's URL (a person signed in: with their name for the service's
    history, issue 29)"""
    url = _use_cases().pas.pa_open_url(pa_id, scope())
    return private_redirect(people.opened(_use_cases(), pa_id, url))


@bp.get("/v1/dashboard/open")
@operation(
    "openDashboard",
    query=bodies.DashboardQuery,
    answers={302: (None, "redirect to the dashboard, logged in")},
    errors={
        400: "`missing_pharmacy`: several pharmacies, none named; or an empty `pharmacy`",
        403: _PHARMACY_NOT_ALLOWED,
        422: "`unknown_pharmacy`: not a configured pharmacy",
        502: "the service refused or failed",
        503: "the service is unreachable",
        504: "the service did not answer in time",
    },
)
def open_dashboard() -> BaseResponse:
    """Log in to the service's dashboard as the pharmacy and redirect there"""
    url = _use_cases().pas.dashboard_url(request.args.get("pharmacy"), scope())
    people.record(_use_cases(), "dashboard.open", request.args.get("pharmacy"))
    return private_redirect(url)


@bp.get("/metrics")
@operation(
    "metrics",
    public=True,
    answers={200: (None, "the metrics")},
    content={200: ["text/plain"]},
)
def metrics() -> Response:
    """Prometheus metrics (text exposition format); no token needed

    Claims by decision, outcomes calls by result and their latency, budget misses,
    callbacks by result, submit-PA results, queue depth and the age of its oldest item,
    dead letters."""
    data = generate_latest(_use_cases().metrics.registry)
    # content_type, not mimetype: Flask adds a charset to a text/ mimetype, and this one
    # has its own; Go's mime.ParseMediaType (Prometheus 3) refuses a parameter twice
    return Response(data, content_type=CONTENT_TYPE_LATEST)


@bp.get("/healthz")
@operation(
    "health",
    public=True,
    answers={
        200: (bodies.Health, "ready"),
        503: (bodies.Health, "not ready: see which check is false"),
    },
)
def healthz() -> tuple[Response, int]:
    """Liveness and readiness (database, scheduler, queue depth)"""
    checks = dict(_use_cases().health())
    extra = current_app.config.get("PA_BRIDGE_HEALTH")
    if extra is not None:
        checks.update(extra())
    ready = all(v for k, v in checks.items() if isinstance(v, bool))
    degraded = checks.get("degraded") or []
    checks["status"] = "unavailable" if not ready else "degraded" if degraded else "ok"
    answer = bodies.Health.model_validate(checks)
    return jsonify(answer.model_dump(exclude_unset=True)), 200 if ready else 503


def set_tokens(
    app: Flask, tokens: list[str], scoped_tokens: list[tuple[str, frozenset[str]]]
) -> None:
    """New intake tokens for the requests that come from now on (a reload)."""
    new = checks.Tokens.of(list(tokens), list(scoped_tokens))
    app.extensions["pa_bridge.tokens"] = new


def create_intake_app(
    use_cases: UseCases,
    *,
    tokens: list[str],
    max_body_bytes: int,
    health: Any = None,
    allowed_hosts: list[str] | tuple[str, ...] = (),
    scoped_tokens: list[tuple[str, frozenset[str]]] | None = None,
) -> Flask:
    """The intake app. ``tokens``: for every pharmacy; ``scoped_tokens``: (token, the
    provider ids it may act for)."""
    app = Flask("pa_bridge.intake", static_folder=None)
    names = {h.strip().lower() for h in allowed_hosts if h.strip()}
    names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    app.config.update(
        MAX_CONTENT_LENGTH=max_body_bytes,
        PA_BRIDGE_ALLOWED_HOSTS=frozenset(names),
        PA_BRIDGE_HEALTH=health,
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["pa_bridge"] = use_cases
    app.extensions["pa_bridge.tokens"] = checks.Tokens.of(list(tokens), list(scoped_tokens or ()))
    app.register_blueprint(bp)
    app.register_blueprint(console.bp)
    app.register_blueprint(openapi.bp)
    people.install(app)
    install_error_handlers(app)
    return app
