"""``POST /v1/claims`` served without Flask's request and response objects (decision
0028): a claim costs about 0.15 ms less CPU, the largest single cut in issue 15.

:class:`ClaimRoute` is WSGI middleware on the intake app's ``wsgi_app``. It takes a
request only when it is ``POST /v1/claims`` in the plain shape a dispensing system
sends: a ``Content-Length`` within the limit, no ``Transfer-Encoding``,
``Content-Type: application/json``, passing the Host and Origin guard and the token
check (the functions of :mod:`.checks`, the same ones Flask's hooks call), with a
well-formed Idempotency-Key if any and a body that is a JSON object. It hands
everything else, refusals included, to Flask, which answers in its own words: the
route itself answers only the claim's answer and what the use case raises, with the
bytes :func:`.errors.error_body` and :func:`.errors.failure` give Flask's error
handlers too.

It stands in for Flask's hooks, so it knows them: built on an app with another
``before_request``, ``after_request`` or teardown function than the two it replays,
it raises, for a new hook would be skipped on the busiest path. Flask's signals are
not sent for the claims it serves (nothing here listens to them).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask
from werkzeug.http import HTTP_STATUS_CODES

from ..service import BridgeError, Services, idempotency
from ..service.bodies import ClaimAnswer
from ..service.pharmacies import Scope
from . import checks
from .errors import error_body, failure

__all__ = ["ClaimRoute"]

_Headers = list[tuple[str, str]]
_StartResponse = Callable[..., Any]
_WsgiApp = Callable[[dict[str, Any], _StartResponse], Iterable[bytes]]

PATH = "/v1/claims"
_STATUS = {c: f"{c} {p.upper()}" for c, p in HTTP_STATUS_CODES.items()}  # as werkzeug says it


def _claim_answer(answer: ClaimAnswer) -> tuple[bytes, _Headers]:
    """The body of a claim's answer (its JSON, made once, for the store too) and the
    headers besides its type and length."""
    data = (answer.json_text() + "\n").encode()
    return data, [("Idempotent-Replayed", "true")] if isinstance(
        answer, idempotency.Replayed
    ) else []


class ClaimRoute:
    """WSGI middleware: the plain ``POST /v1/claims`` here, everything else to ``inner``.
    ``hooks``: the Flask hooks the route replays through :mod:`.checks`."""

    def __init__(self, app: Flask, inner: _WsgiApp, *, hooks: tuple[Callable[..., Any], ...]):
        unknown = _unknown_hooks(app, hooks)
        if unknown:
            raise RuntimeError(
                "ClaimRoute serves POST /v1/claims without Flask and would skip "
                f"{', '.join(unknown)}: teach web/claim_route.py the new hook (decision 0028)"
            )
        self.inner = inner
        self.services: Services = app.extensions["pa_bridge"]
        self.tokens: checks.Tokens = app.extensions["pa_bridge.tokens"]
        self.allowed: frozenset[str] = app.config["PA_BRIDGE_ALLOWED_HOSTS"]
        self.max_body: int | None = app.config.get("MAX_CONTENT_LENGTH")

    def __call__(self, environ: dict[str, Any], start_response: _StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH or environ.get("REQUEST_METHOD") != "POST":
            return self.inner(environ, start_response)
        admitted = self._admit(environ)
        if admitted is None:
            return self.inner(environ, start_response)
        body, actor, scope, key = admitted
        try:
            answer = self.services.claims.intake(body, actor, idempotency_key=key, scope=scope)
            status, (data, headers) = 200, _claim_answer(answer)
        except Exception as e:  # what Flask's error handlers answer for it
            status, code, message, detail = failure(e)
            data, headers = error_body(code, message, detail), []
        start_response(
            _STATUS.get(status, f"{status} UNKNOWN"),
            [("Content-Type", "application/json"), ("Content-Length", str(len(data))), *headers],
        )
        return [data]

    def _admit(
        self, environ: dict[str, Any]
    ) -> tuple[dict[str, Any], str, Scope, str | None] | None:
        """The body, actor, scope and Idempotency-Key of a claim this route serves;
        None for Flask to answer (a refusal, or a shape the route does not take)."""
        length_text = environ.get("CONTENT_LENGTH")
        if (
            not length_text
            or not (length_text.isascii() and length_text.isdigit())  # "²" is a digit too
            or "HTTP_TRANSFER_ENCODING" in environ
        ):
            return None
        length = int(length_text)
        if self.max_body is not None and length > self.max_body:
            return None
        if checks.mimetype(environ) != "application/json":
            return None
        # the length and the type are checked above: only who sends it is left
        if checks.origin_refusal(environ, self.allowed) is not None:
            return None
        who = checks.identify(environ, self.tokens)
        if who is None:
            return None
        try:
            key = idempotency.check_key(environ.get("HTTP_IDEMPOTENCY_KEY"))
        except ValueError:
            return None
        raw = environ["wsgi.input"].read(length)
        body: dict[str, Any] | None = None
        if len(raw) == length:
            try:
                body = checks.json_object(raw, "application/json")
            except BridgeError:  # Flask says it
                body = None
        if body is None:
            environ["wsgi.input"] = io.BytesIO(raw)  # Flask reads the same bytes again
            return None
        return body, who[0], who[1], key


def _unknown_hooks(app: Flask, known: tuple[Callable[..., Any], ...]) -> list[str]:
    found: list[Callable[..., Any]] = []
    for registry in (
        app.before_request_funcs,
        app.after_request_funcs,
        app.teardown_request_funcs,
        app.url_value_preprocessors,
        {None: app.teardown_appcontext_funcs},
    ):
        for funcs in registry.values():
            found.extend(funcs)
    return [getattr(f, "__qualname__", repr(f)) for f in found if f not in known]
