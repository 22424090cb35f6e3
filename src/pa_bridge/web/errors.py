"""Every error body is ``{"error": {"code", "message", "detail"}}``.

:func:`error_body` makes its bytes and :func:`failure` says what an exception from a
use case answers, for Flask's error handlers.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from flask import Flask, Response, current_app
from werkzeug.exceptions import HTTPException

from ..logs import log_event
from ..service.bodies import Error, ErrorInfo
from ..service.errors import (
    BridgeError,
    Conflict,
    Gone,
    InvalidRequest,
    NotAllowed,
    NotFound,
    Refused,
    ServiceFailed,
    ServiceTimeout,
    Unavailable,
)
from ..store import DatabaseError, PgError, StoreError

__all__ = ["error_body", "error_response", "failure", "install_error_handlers"]

#: (status, code, message, detail) of an error answer
Failure = tuple[int, str, str, Any]


def error_body(code: str, message: str, detail: Any = None) -> bytes:
    """The bytes of an error answer: compact JSON, ASCII only, and a newline (what
    Flask's ``jsonify`` has always sent here)."""
    body = Error(error=ErrorInfo(code=code, message=message, detail=detail)).model_dump()
    return (json.dumps(body, separators=(",", ":"), default=str) + "\n").encode()


def error_response(
    status: int, code: str, message: str, detail: Any = None
) -> tuple[Response, int]:
    return Response(error_body(code, message, detail), mimetype="application/json"), status


#: each kind of use-case failure in HTTP
STATUS: dict[type[BridgeError], int] = {
    InvalidRequest: 400,
    NotAllowed: 403,
    NotFound: 404,
    Conflict: 409,
    Gone: 410,
    Refused: 422,
    ServiceFailed: 502,
    Unavailable: 503,
    ServiceTimeout: 504,
}


def failure(e: Exception) -> Failure:
    """What an exception raised by a use case answers (and logs, when it is ours to
    log): each kind of :class:`BridgeError` its status (:data:`STATUS`), the database
    503, anything else 500."""
    if isinstance(e, BridgeError):
        status = next((STATUS[k] for k in type(e).__mro__ if k in STATUS), 500)
        return status, e.code, e.message, e.detail
    if isinstance(e, StoreError | DatabaseError | PgError):
        # SQLite's and the store's messages name the problem ("disk I/O error",
        # "database is locked") and never carry row values
        log_event(
            "database.error", level=logging.ERROR, error=str(e)[:300], error_type=type(e).__name__
        )
        return (
            503,
            "database_unavailable",
            "pa-bridge cannot use its database right now; nothing was stored. Send it again "
            "in a moment; store IT: see /healthz and the log",
            None,
        )
    log_event("http.unexpected_error", level=logging.ERROR, error=type(e).__name__)
    return 500, "internal_error", "pa-bridge hit an unexpected error; it was logged", None


def install_error_handlers(app: Flask) -> None:
    @app.errorhandler(HTTPException)
    def _http(e: HTTPException) -> tuple[Response, int]:
        status = e.code or 500
        code = {
            400: "bad_request",
            401: "unauthorized",
            404: "not_found",
            405: "method_not_allowed",
            413: "body_too_large",
            415: "unsupported_media_type",
        }.get(status, "http_error")
        detail = None
        if status == 413:
            limit = current_app.config.get("MAX_CONTENT_LENGTH")
            detail = {"max_body_bytes": limit}
            message = f"the body is larger than the limit of {limit} bytes (intake.max_body_bytes)"
        else:
            message = e.description or e.name
        resp, status = error_response(status, code, message, detail)
        if status == 405:  # say which methods the path takes (RFC 9110)
            for name, value in e.get_headers():
                if name.lower() == "allow":
                    resp.headers["Allow"] = value
        return resp, status

    @app.errorhandler(Exception)  # HTTPException takes the closer handler above
    def _failure(e: Exception) -> tuple[Response, int]:
        return error_response(*failure(e))
