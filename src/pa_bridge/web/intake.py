"""The local API the dispensing system and the workstations use."""

from __future__ import annotations

import socket
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, jsonify, redirect, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from werkzeug.wrappers import Response as BaseResponse

from ..service import BridgeError, Services, idempotency
from ..service.bodies import ClaimAnswer, dump
from . import checks, console, openapi, people
from .console import scope
from .errors import error_response, install_error_handlers

__all__ = ["create_intake_app"]

bp = Blueprint("intake", __name__)


def _services() -> Services:
    s: Services = current_app.extensions["pa_bridge"]
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
        raise BridgeError(400, "invalid_idempotency_key", str(e)) from None


def _answer(model: BaseModel, status: int) -> tuple[Response, int]:
    if isinstance(model, ClaimAnswer):  # its JSON is made once, for the store too
        resp = Response(model.json_text() + "\n", mimetype="application/json")
    else:
        resp = jsonify(dump(model))
    if isinstance(model, idempotency.Replayed):
        resp.headers["Idempotent-Replayed"] = "true"
    return resp, status


@bp.post("/v1/claims")
def post_claim() -> tuple[Response, int]:
    key = _idempotency_key()
    answer = _services().claims.intake(_json_body(), g.actor, idempotency_key=key, scope=g.scope)
    return _answer(answer, 200)


@bp.get("/v1/claims/<claim_id>")
def get_claim(claim_id: str) -> Response:
    return jsonify(dump(_services().pas.get_claim(claim_id, scope())))


@bp.post("/v1/claims/<claim_id>/pa")
def post_pa(claim_id: str) -> tuple[Response, int]:
    key = _idempotency_key()
    body = _json_body() if request.get_data() else {}
    pa, created = _services().pas.submit_pa(
        claim_id, body, g.actor, idempotency_key=key, scope=scope()
    )
    return _answer(pa, 201 if created else 200)


@bp.post("/v1/reversals")
def post_reversal() -> tuple[Response, int]:
    key = _idempotency_key()
    answer, delivered = _services().reversals.reversal(
        _json_body(), g.actor, idempotency_key=key, scope=scope()
    )
    return _answer(answer, 200 if delivered else 202)


@bp.get("/v1/pa")
def list_pas() -> Response:
    try:
        limit = min(1000, max(1, int(request.args.get("limit", "100"))))
    except ValueError:
        raise BridgeError(400, "invalid_limit", "'limit' must be a whole number") from None
    claim_id = request.args.get("claim_id")
    if claim_id is not None and not claim_id.strip():
        raise BridgeError(400, "invalid_claim_id", "'claim_id' must name a claim")
    pas = _services().pas.list_pas(
        request.args.get("since"),
        limit,
        claim_id=claim_id,
        pharmacy=request.args.get("pharmacy"),
        scope=scope(),
    )
    return jsonify(dump(pas))


@bp.get("/v1/pa/<pa_id>")
def get_pa(pa_id: str) -> Response:
    return jsonify(dump(_services().pas.get_pa(pa_id, scope())))


@bp.get("/v1/pa/<pa_id>/open")
def open_pa(pa_id: str) -> BaseResponse:
    url = _services().pas.pa_open_url(pa_id, scope())
    resp = redirect(people.opened(_services(), pa_id, url), code=302)
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["Referrer-Policy"] = "no-referrer"
    return resp


@bp.get("/v1/dashboard/open")
def open_dashboard() -> BaseResponse:
    url = _services().pas.dashboard_url(request.args.get("pharmacy"), scope())
    people.record(_services(), "dashboard.open", request.args.get("pharmacy"))
    resp = redirect(url, code=302)
    resp.headers["Cache-Control"] = "no-store"
    resp.headers["Referrer-Policy"] = "no-referrer"
    return resp


@bp.get("/metrics")
def metrics() -> Response:
    data = generate_latest(_services().metrics.registry)
    # content_type, not mimetype: Flask adds a charset to a text/ mimetype, and this one
    # has its own; Go's mime.ParseMediaType (Prometheus 3) refuses a parameter twice
    return Response(data, content_type=CONTENT_TYPE_LATEST)


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
    checks = dict(_services().health())
    extra = current_app.config.get("PA_BRIDGE_HEALTH")
    if extra is not None:
        checks.update(extra())
    ready = all(v for k, v in checks.items() if isinstance(v, bool))
    degraded = checks.get("degraded") or []
    checks["status"] = "unavailable" if not ready else "degraded" if degraded else "ok"
    return jsonify(checks), 200 if ready else 503


def set_tokens(
    app: Flask, tokens: list[str], scoped_tokens: list[tuple[str, frozenset[str]]]
) -> None:
    """New intake tokens for the requests that come from now on (a reload)."""
    new = checks.Tokens.of(list(tokens), list(scoped_tokens))
    app.extensions["pa_bridge.tokens"] = new


def create_intake_app(
    services: Services,
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
    app.extensions["pa_bridge"] = services
    app.extensions["pa_bridge.tokens"] = checks.Tokens.of(list(tokens), list(scoped_tokens or ()))
    app.register_blueprint(bp)
    app.register_blueprint(console.bp)
    app.register_blueprint(openapi.bp)
    people.install(app)
    install_error_handlers(app)
    return app
