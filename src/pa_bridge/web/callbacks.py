"""The callback receiver: its own listener, facing the PA service.

200 only after the callback is committed; 503 when it cannot be, so the service
retries; 401 (nothing stored) on missing or wrong credentials; 413 on oversized
bodies; authenticated bodies that are not the expected JSON are dead-lettered and
acknowledged.
"""

from __future__ import annotations

import hmac
import logging
import ssl
from typing import Any

from cheroot.ssl.builtin import BuiltinSSLAdapter
from flask import Flask, Response, current_app, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from ..bridge import Bridge
from ..callbacks import CallbackService
from ..config import Settings
from ..logs import log_event
from ..store import StoreUnavailable
from .errors import error_response, install_error_handlers

__all__ = ["create_callback_app", "ssl_adapter_for"]


def _authorized(username: str | None, password: str | None) -> bool:
    if username is None:
        return True
    auth = request.authorization
    given_user = (auth.username or "") if auth is not None else ""
    given_pass = (auth.password or "") if auth is not None else ""
    ok_user = hmac.compare_digest(given_user.encode(), username.encode())
    ok_pass = hmac.compare_digest(given_pass.encode(), (password or "").encode())
    return ok_user and ok_pass


def create_callback_app(bridge: Bridge, settings: Settings) -> Flask:
    app = Flask("pa_bridge.callbacks", static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = settings.callbacks.max_body_bytes
    app.extensions["pa_bridge_callbacks"] = CallbackService(
        bridge.store, forward=bool(settings.callbacks.forward_url)
    )
    username = settings.callbacks.username
    password = settings.secret(settings.callbacks.password) if settings.callbacks.password else None
    install_error_handlers(app)
    counted: dict[str, Any] = {}  # labelled counters, looked up once

    @app.post("/callbacks/pharmacy")
    def pharmacy_callback() -> tuple[Response, int]:
        if not _authorized(username, password):
            bridge.metrics.callbacks.labels("unauthorized").inc()
            log_event("callback.unauthorized", level=logging.WARNING, remote=request.remote_addr)
            resp, status = error_response(
                401, "unauthorized", "callback credentials are missing or wrong"
            )
            resp.headers["WWW-Authenticate"] = 'Basic realm="pa-bridge callbacks"'
            return resp, status
        try:
            body = request.get_data(cache=False)  # 413 past MAX_CONTENT_LENGTH
        except RequestEntityTooLarge:
            bridge.metrics.callbacks.labels("too_large").inc()
            raise
        service: CallbackService = current_app.extensions["pa_bridge_callbacks"]
        try:
            result = service.receive(body, request.content_type)
        except StoreUnavailable as e:
            bridge.metrics.callbacks.labels("unavailable").inc()
            log_event("callback.not_committed", level=logging.ERROR, error=str(e))
            return error_response(
                503, "storage_unavailable", "the callback could not be stored; retry later"
            )
        counter = counted.get(result.outcome)
        if counter is None:
            counter = counted[result.outcome] = bridge.metrics.callbacks.labels(result.outcome)
        counter.inc()
        if result.outcome == "stored" and service.forward:
            bridge.outbox.wake()
        return jsonify({"status": result.outcome, "pa_id": result.pa_id}), 200

    @app.get("/healthz")
    def healthz() -> Response:
        return jsonify({"status": "ok"})

    return app


def ssl_adapter_for(settings: Settings) -> Any:
    """A cheroot TLS adapter (TLS 1.2 or newer) when a certificate is configured."""
    cert, key = settings.callbacks.tls_cert, settings.callbacks.tls_key
    if cert is None or key is None:
        return None
    adapter = BuiltinSSLAdapter(str(cert), str(key))
    adapter.context.minimum_version = ssl.TLSVersion.TLSv1_2
    return adapter
