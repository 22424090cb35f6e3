"""Every error body is ``{"error": {"code", "message", "detail"}}``."""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, current_app, jsonify
from werkzeug.exceptions import HTTPException

from ..logs import log_event
from ..service.bodies import Error, ErrorInfo
from ..service.errors import BridgeError
from ..store import DatabaseError, PgError, StoreError

__all__ = ["error_response", "install_error_handlers"]


def error_response(
    status: int, code: str, message: str, detail: Any = None
) -> tuple[Response, int]:
    body = Error(error=ErrorInfo(code=code, message=message, detail=detail))
    return jsonify(body.model_dump()), status


def install_error_handlers(app: Flask) -> None:
    @app.errorhandler(BridgeError)
    def _bridge(e: BridgeError) -> tuple[Response, int]:
        return error_response(e.status, e.code, e.message, e.detail)

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

    @app.errorhandler(StoreError)
    @app.errorhandler(DatabaseError)
    @app.errorhandler(PgError)
    def _database(e: Exception) -> tuple[Response, int]:
        # SQLite's and the store's messages name the problem ("disk I/O error",
        # "database is locked") and never carry row values
        log_event(
            "database.error", level=logging.ERROR, error=str(e)[:300], error_type=type(e).__name__
        )
        return error_response(
            503,
            "database_unavailable",
            "pa-bridge cannot use its database right now; nothing was stored. Send it again "
            "in a moment; store IT: see /healthz and the log",
        )

    @app.errorhandler(Exception)
    def _unexpected(e: Exception) -> tuple[Response, int]:
        log_event("http.unexpected_error", level=logging.ERROR, error=type(e).__name__)
        return error_response(
            500, "internal_error", "pa-bridge hit an unexpected error; it was logged"
        )
