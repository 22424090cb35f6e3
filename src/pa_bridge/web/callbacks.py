"""The callback receiver: its own listener (in its own process), facing the PA service.

200 only after the callback is committed; 503 when it cannot be, so the service
retries; 401 (nothing stored) on missing or wrong credentials; 413 on oversized
bodies; authenticated bodies that are not the expected JSON are dead-lettered and
acknowledged.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import ssl
import threading
from collections.abc import Callable
from typing import Any

from ..callback_front import (
    KIND_CALLBACK,
    KIND_TOO_LARGE,
    KIND_UNAUTHORIZED,
    AsyncFrontChannel,
    Message,
    internal_error_reply,
    unavailable_reply,
)
from ..callbacks import CallbackService
from ..config import Settings
from ..logs import log_event
from ..metrics import Metrics
from ..store import Store, StoreUnavailable
from ..wsgi import BODY_TIMEOUT_S, json_error, not_http, read_body, send_answer, server_tls_context

__all__ = ["CallbackReceiver", "FrontApp", "UnauthorizedLog", "tls_context_for"]


class FrontApp:
    """The callback listener's app (decision 0008, amended by 0013): an ASGI app run on
    the listener's event loop. It reads the whole body (413 past
    ``callbacks.max_body_bytes``, however framed), checks the credentials (401 first),
    hands the body to the daemon and answers with its reply, which comes after the
    commit. No thread waits for the daemon: the loop does, for every request at once."""

    PATH = "/callbacks/pharmacy"

    def __init__(self, settings: Settings, channel: AsyncFrontChannel) -> None:
        self.channel = channel
        self.limit = settings.callbacks.max_body_bytes
        username = settings.callbacks.username
        password = (
            settings.secret(settings.callbacks.password) if settings.callbacks.password else ""
        )
        self._expected = None if username is None else (username.encode(), password.encode())

    def _authorized(self, scope: dict[str, Any]) -> bool:
        if self._expected is None:
            return True
        header = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value
        scheme, _, token = header.partition(b" ")
        user = given = b""
        if scheme.lower() == b"basic":
            try:
                user, _, given = base64.b64decode(token.strip(), validate=True).partition(b":")
            except (binascii.Error, ValueError):
                user = given = b""
        ok_user = hmac.compare_digest(user, self._expected[0])
        ok_pass = hmac.compare_digest(given, self._expected[1])
        return ok_user and ok_pass

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if await not_http(scope, receive, send):
            return
        path, method = scope["path"], scope["method"]
        if path == "/healthz" and method in ("GET", "HEAD"):
            await send_answer(send, (200, _JSON, b'{"status": "ok"}'), close=False)
            return
        if path != self.PATH:
            await self._refuse(send, 404, "not_found", "no such path here")
            return
        if method != "POST":
            await self._refuse(send, 405, "method_not_allowed", "use POST", allow="POST")
            return
        body = await read_body(scope, receive, send, limit=self.limit, timeout_s=BODY_TIMEOUT_S)
        if body is None:
            return
        close = not body.complete
        if not self._authorized(scope):
            client = scope.get("client")
            await self.channel.ask(KIND_UNAUTHORIZED, str(client[0]) if client else "", b"")
            await self._refuse(
                send,
                401,
                "unauthorized",
                "callback credentials are missing or wrong",
                close=close,
                www_authenticate='Basic realm="pa-bridge callbacks"',
            )
            return
        if body.too_large:
            await self.channel.ask(KIND_TOO_LARGE, "", b"")
            await self._refuse(
                send,
                413,
                "body_too_large",
                f"the body is larger than {self.limit} bytes (callbacks.max_body_bytes)",
                close=close,
            )
            return
        ctype = ""
        for name, value in scope["headers"]:
            if name == b"content-type":
                ctype = value.decode("latin-1")
        status, payload = await self.channel.ask(KIND_CALLBACK, ctype, bytes(body.data))
        await send_answer(send, (status, _JSON, payload), close=close)

    @staticmethod
    async def _refuse(
        send: Any,
        status: int,
        code: str,
        message: str,
        *,
        close: bool = False,
        allow: str | None = None,
        www_authenticate: str | None = None,
    ) -> None:
        status, headers, data = json_error(status, code, message)
        if allow is not None:
            headers = [*headers, ("Allow", allow)]
        if www_authenticate is not None:
            headers = [*headers, ("WWW-Authenticate", www_authenticate)]
        await send_answer(send, (status, headers, data), close=close)


_JSON = [("Content-Type", "application/json")]


class UnauthorizedLog:
    """Unauthenticated callback attempts, logged without flooding the journal (issue 19):
    the first of a spell is logged (``callback.unauthorized``, with its address); the
    others in the next ``interval_s`` are summed into one line when it ends
    (``callback.unauthorized_repeated``: ``count``, up to ten ``remotes``). The metric
    ``pa_bridge_callbacks_total{result="unauthorized"}`` counts every attempt."""

    MAX_REMOTES = 10

    def __init__(self, interval_s: float = 60.0) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._count = 0
        self._remotes: set[str] = set()

    def attempt(self, remote: str) -> None:
        with self._lock:
            if self._timer is not None:  # within a spell: summed
                self._count += 1
                if len(self._remotes) < self.MAX_REMOTES:
                    self._remotes.add(remote)
                return
            self._timer = threading.Timer(self.interval_s, self.flush)
            self._timer.name = "callbacks-unauthorized-log"
            self._timer.daemon = True
            self._timer.start()
        log_event("callback.unauthorized", level=logging.WARNING, remote=remote)

    def flush(self) -> None:
        """End the spell: log its sum, if any (at the interval's end, and at stop)."""
        with self._lock:
            timer, count, remotes = self._timer, self._count, sorted(self._remotes)
            self._timer, self._count, self._remotes = None, 0, set()
        if timer is not None and timer is not threading.current_thread():
            timer.cancel()
        if count:
            log_event(
                "callback.unauthorized_repeated",
                level=logging.WARNING,
                count=count,
                remotes=remotes,
                seconds=self.interval_s,
            )


class CallbackReceiver:
    """The daemon's side of the callback listener: commits what the listener's process
    hands over, many callbacks per commit, and says what to answer to each."""

    def __init__(self, store: Store, metrics: Metrics, *, forward: bool) -> None:
        self.service = CallbackService(store, forward=forward)
        self.metrics = metrics
        #: called after stored callbacks when forwarding (the outbox's wake-up)
        self.on_stored: Callable[[], None] | None = None
        self._counters: dict[str, Any] = {}
        self.unauthorized_log = UnauthorizedLog()

    def _count(self, outcome: str) -> None:
        counter = self._counters.get(outcome)
        if counter is None:
            counter = self._counters[outcome] = self.metrics.callbacks.labels(outcome)
        counter.inc()

    def handle(self, batch: list[Message]) -> list[tuple[int, bytes]]:
        replies: list[tuple[int, bytes] | None] = [None] * len(batch)
        items: list[tuple[bytes, str | None]] = []
        where: list[int] = []
        for i, msg in enumerate(batch):
            if msg.kind == KIND_CALLBACK:
                items.append((msg.body, msg.text or None))
                where.append(i)
                continue
            if msg.kind == KIND_UNAUTHORIZED:
                self._count("unauthorized")
                self.unauthorized_log.attempt(msg.text)
            elif msg.kind == KIND_TOO_LARGE:
                self._count("too_large")
            replies[i] = (204, b"")
        stored = False
        for i, result in zip(where, self.service.receive_many(items) if items else [], strict=True):
            if isinstance(result, StoreUnavailable):
                self._count("unavailable")
                log_event("callback.not_committed", level=logging.ERROR, error=str(result))
                replies[i] = unavailable_reply()
            elif isinstance(result, BaseException):  # a bug: this callback alone gets a 500
                log_event("callback.error", level=logging.ERROR, error=type(result).__name__)
                replies[i] = internal_error_reply()
            else:
                self._count(result.outcome)
                stored = stored or result.outcome == "stored"
                answer = {"status": result.outcome, "pa_id": result.pa_id}
                replies[i] = (200, json.dumps(answer).encode())
        if stored and self.service.forward and self.on_stored is not None:
            self.on_stored()
        return [r if r is not None else internal_error_reply() for r in replies]


def tls_context_for(settings: Settings) -> ssl.SSLContext | None:
    """The listener's TLS context (TLS 1.2 or newer) when a certificate is configured."""
    cert, key = settings.callbacks.tls_cert, settings.callbacks.tls_key
    if cert is None or key is None:
        return None
    return server_tls_context(cert, key)
