"""The pharmacist console: ``GET /`` (a static page), its script and style under
``/console/static/``, and the JSON it polls, ``GET /v1/console/worklist``.

The page and its assets hold no data, so they are served without a token; the JSON
endpoint is guarded like the rest of the local API. The page sends the token it was
given (``/?token=...`` once, or typed into its form) from ``sessionStorage``.
"""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

from .. import worklist
from ..service import Services

__all__ = ["bp", "is_public_path", "STATIC_PREFIX"]

STATIC_PREFIX = "/console/static"

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
    return path in ("/", "/openapi.json") or path.startswith(STATIC_PREFIX + "/")


def _bridge() -> Services:
    b: Services = current_app.extensions["pa_bridge"]
    return b


@bp.get("/")
def console_page() -> Response:
    resp = bp.send_static_file("console.html")
    resp.headers["Content-Security-Policy"] = _CSP
    resp.headers["Referrer-Policy"] = "no-referrer"  # a ?token= never leaks onwards
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Cache-Control"] = "no-cache"
    return resp


@bp.get("/v1/console/worklist")
def console_worklist() -> Response:
    resp = jsonify(worklist.worklist(_bridge()))
    resp.headers["Cache-Control"] = "no-store"
    return resp
