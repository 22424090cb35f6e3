"""The callback receiver: ``POST /callbacks/pharmacy`` from the PA service, a Flask
blueprint on its own listener (``callbacks.listen``), served by the daemon on the same
kind of server as the intake (decision 0045).

HTTP Basic credentials first (401, nothing stored), then the body limit
(``callbacks.max_body_bytes``: 413, however the body is framed), then the callback goes
to the :class:`Sink` (the daemon's :class:`~.ingest.CallbackReceiver`), which answers
after the commit: 200, or 503 when the callback could not be committed, so the service
retries. 401s and 413s are told to the sink (counted and logged); other paths and
methods get the error shape too.
"""

from __future__ import annotations

import hmac
from typing import Protocol

from flask import Blueprint, Flask, Response, current_app, request
from werkzeug.exceptions import HTTPException

from .replies import error_reply, internal_error_reply

__all__ = ["PATH", "Sink", "create_callback_app"]

PATH = "/callbacks/pharmacy"

bp = Blueprint("callbacks", __name__)


class Sink(Protocol):
    """Where the receiver hands what it gets."""

    def receive(self, body: bytes, content_type: str | None) -> tuple[int, bytes]:
        """Commit one callback; the status and JSON body to answer, after the commit."""
        ...

    def unauthorized(self, remote: str) -> None: ...

    def too_large(self) -> None: ...


def _sink() -> Sink:
    found: Sink = current_app.extensions["pa_bridge.callbacks"]
    return found


def _json(answer: tuple[int, bytes], headers: dict[str, str] | None = None) -> tuple[Response, int]:
    status, payload = answer
    return Response(payload, mimetype="application/json", headers=headers), status


def _authorized() -> bool:
    expected: tuple[bytes, bytes] | None = current_app.config["PA_BRIDGE_CALLBACK_AUTH"]
    if expected is None:
        return True
    auth = request.authorization
    user = given = b""
    if auth is not None and auth.type == "basic":
        user, given = (auth.username or "").encode(), (auth.password or "").encode()
    ok_user = hmac.compare_digest(user, expected[0])
    ok_pass = hmac.compare_digest(given, expected[1])
    return ok_user and ok_pass


@bp.post(PATH)
def pharmacy_callback() -> tuple[Response, int]:
    if not _authorized():
        _sink().unauthorized(request.remote_addr or "")
        return _json(
            error_reply(401, "unauthorized", "callback credentials are missing or wrong"),
            {"WWW-Authenticate": 'Basic realm="pa-bridge callbacks"'},
        )
    body = request.get_data()  # 413 past callbacks.max_body_bytes
    return _json(_sink().receive(body, request.content_type))


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
    return _json((200, b'{"status": "ok"}'))


def _http_error(e: HTTPException) -> tuple[Response, int]:
    status = e.code or 500
    if status == 413:
        _sink().too_large()
        limit = current_app.config["MAX_CONTENT_LENGTH"]
        message = f"the body is larger than {limit} bytes (callbacks.max_body_bytes)"
        return _json(error_reply(413, "body_too_large", message))
    if status == 405:
        return _json(error_reply(405, "method_not_allowed", "use POST"), {"Allow": "POST"})
    if status == 404:
        return _json(error_reply(404, "not_found", "no such path here"))
    return _json(error_reply(status, "bad_request", e.description or e.name))


def _bug(e: Exception) -> tuple[Response, int]:
    return _json(internal_error_reply())


def create_callback_app(
    sink: Sink, *, username: str | None, password: str, max_body_bytes: int
) -> Flask:
    """The receiver's app; ``username`` None asks for no credentials."""
    app = Flask("pa_bridge.callbacks", static_folder=None)
    app.config.update(
        MAX_CONTENT_LENGTH=max_body_bytes,
        PA_BRIDGE_CALLBACK_AUTH=None
        if username is None
        else (username.encode(), password.encode()),
    )
    app.extensions["pa_bridge.callbacks"] = sink
    app.register_blueprint(bp)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _bug)
    return app
