"""The callback listener's process (decision 0008, amended by 0013):
``python -m pa_bridge.callbacks.child``, started by
:class:`~pa_bridge.callbacks.supervisor.CallbackFront` only.

It faces the PA service: TLS, HTTP, Basic credentials (401, nothing stored), the body
limit (413), and hands each authenticated body to the daemon, answering with the
daemon's reply, which comes after the commit: 200, or 503 when the callback could not
be committed, so the service retries. It never opens the database.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import ctypes
import hmac
import logging
import os
import pickle
import signal
import ssl
import sys
import threading
from typing import Any, Protocol

from ..config import Settings
from ..logs import configure_logging
from ..wsgi import (
    BODY_TIMEOUT_S,
    WsgiServer,
    json_error,
    not_http,
    read_body,
    send_answer,
    server_tls_context,
)
from .framing import KIND_CALLBACK, KIND_TOO_LARGE, KIND_UNAUTHORIZED, AsyncFrontChannel

__all__ = ["Channel", "FrontApp", "main", "start_listener", "tls_context_for"]


class Channel(Protocol):
    """How the app reaches the daemon (:class:`AsyncFrontChannel` in the child)."""

    async def ask(self, kind: int, text: str, body: bytes) -> tuple[int, bytes]: ...

    async def aclose(self) -> None: ...


class FrontApp:
    """The callback listener's app (decision 0008, amended by 0013): an ASGI app run on
    the listener's event loop. It reads the whole body (413 past
    ``callbacks.max_body_bytes``, however framed), checks the credentials (401 first),
    hands the body to the daemon and answers with its reply, which comes after the
    commit. No thread waits for the daemon: the loop does, for every request at once."""

    PATH = "/callbacks/pharmacy"

    def __init__(self, settings: Settings, channel: Channel) -> None:
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
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
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

    async def _lifespan(self, receive: Any, send: Any) -> None:
        """The server's start and stop: at the stop (the requests in flight are
        answered by then), close the connections to the daemon."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.channel.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

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


def tls_context_for(settings: Settings) -> ssl.SSLContext | None:
    """The listener's TLS context (TLS 1.2 or newer) when a certificate is configured."""
    cert, key = settings.callbacks.tls_cert, settings.callbacks.tls_key
    if cert is None or key is None:
        return None
    return server_tls_context(cert, key)


def start_listener(settings: Settings, channel: Channel, listen: str) -> WsgiServer:
    """:class:`FrontApp` on ``channel``, served on ``listen`` (TLS when configured):
    what the child serves; raises OSError or ValueError when it cannot listen."""
    return WsgiServer.from_listen(
        FrontApp(settings, channel),
        listen,
        name="callbacks",
        asgi=True,
        max_body_bytes=settings.callbacks.max_body_bytes,
        ssl_context=tls_context_for(settings),
    ).start()


def _die_with_parent() -> None:
    """Ask Linux for SIGKILL when the daemon goes (a no-op elsewhere)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def main() -> None:
    """The child's life: settings from the daemon's pipe, ``ready host port scheme``
    (or ``error ...`` naming ``callbacks.listen``) on stdout, serve until end of file
    on stdin."""
    # the daemon decides when we stop: SIGTERM (systemd sends it to every process of
    # the unit) and SIGINT (a terminal's ^C reaches the whole group) are ignored
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    _die_with_parent()
    settings, listen, directory = pickle.load(sys.stdin.buffer)  # noqa: S301 - our parent's pipe
    if os.getppid() != parent:  # the daemon went before the kernel could be asked
        os._exit(0)
    configure_logging(settings.logging.level)
    try:
        server = start_listener(settings, AsyncFrontChannel(directory, timeout_s=30.0), listen)
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        print(f"error callbacks.listen {listen}: {reason}", flush=True)
        sys.exit(1)
    host, port = server.address
    print(f"ready {host} {port} {server.scheme}", flush=True)

    stop = threading.Event()

    def parent_gone() -> None:
        sys.stdin.buffer.read()  # returns at end of file: the daemon asks us to stop, or is gone
        stop.set()

    threading.Thread(target=parent_gone, name="parent-watch", daemon=True).start()
    while not stop.wait(0.5):
        pass
    server.stop()
    logging.shutdown()
    os._exit(0)  # at once: nothing is left to flush, and no thread needs joining


if __name__ == "__main__":
    main()
