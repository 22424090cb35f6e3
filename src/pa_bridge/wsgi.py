"""One way to serve a WSGI app: uvicorn (httptools, uvloop) on a background thread
(decision 0013).

Used for the daemon's two listeners, the sandbox, and the tests' small servers.
Connections are accepted and read by one event loop: a slow or idle client costs a
socket and a little memory, never a thread. A request reaches the WSGI app, on a pool
of ``numthreads`` threads, only once its headers and its whole body are in:

* the request line and headers must be in within :data:`HEADER_TIMEOUT_S` of the
  connection's start (or of the request's first byte on a kept-alive connection) and
  take at most :data:`MAX_HEAD_BYTES`, else the connection closes; an idle kept-alive
  connection closes after the same time;
* the body must be complete within :data:`BODY_TIMEOUT_S`, else 408;
* a body over the limit (``max_body_bytes``, by default the Flask app's
  ``MAX_CONTENT_LENGTH``) is 413 however it is framed: the app answers it (so its own
  413 body and counting apply), seeing the request with an empty body and a
  ``CONTENT_LENGTH`` over its limit;
* a chunked body under the limit reaches the app with its ``CONTENT_LENGTH`` set.

Both listeners are Flask apps served this way, in the daemon's process (decision
0045). The socket is bound in :meth:`WsgiServer.start`, so a port
in use fails there; port 0 binds a free port and ``url`` has the real one. TLS:
:func:`server_tls_context` (TLS 1.2 at least), HTTP/1.1 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import json
import logging
import math
import socket
import ssl
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .config import parse_listen

__all__ = [
    "BODY_TIMEOUT_S",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_THREADS",
    "HEADER_TIMEOUT_S",
    "Listening",
    "WsgiServer",
    "server_tls_context",
]

#: A request's headers must be in within this many seconds of the connection's start
#: (or of the previous answer on a kept-alive connection); also the idle keep-alive.
HEADER_TIMEOUT_S = 10.0
#: A request's body must be in within this many seconds of its headers (408 after).
BODY_TIMEOUT_S = 30.0
#: The most a request's line and headers may take.
MAX_HEAD_BYTES = 16 * 1024
#: The threads that run a listener's app (the intake's and the callback receiver's).
DEFAULT_THREADS = 16
#: The body limit of an app that does not set ``MAX_CONTENT_LENGTH``.
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
#: How much of a body over the limit is read and dropped, so that the client, still
#: sending, reads the 413 rather than a reset connection; past it the connection closes.
_DRAIN_BYTES = 8 * 1024 * 1024

_Send = Callable[[dict[str, Any]], Coroutine[Any, Any, None]]
_Receive = Callable[[], Awaitable[dict[str, Any]]]


class Listening:
    """The bound address of a listener, once started: ``address``, ``port``, ``url``."""

    _bound: tuple[str, int] | None = None

    @property
    def scheme(self) -> str:
        raise NotImplementedError

    @property
    def address(self) -> tuple[str, int]:
        if self._bound is None:
            raise RuntimeError("the listener is not started")
        return self._bound

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def url(self) -> str:
        host, port = self.address
        if ":" in host:
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{port}"


_Answer = tuple[int, list[tuple[str, str]], bytes]


def json_error(status: int, code: str, message: str) -> _Answer:
    body = json.dumps({"error": {"code": code, "message": message, "detail": None}}).encode()
    return status, [("Content-Type", "application/json")], body


class RequestBody:
    """What was read of a request's body: ``data`` (empty when ``too_large``), ``seen``
    (bytes received, kept or not), ``complete`` (the whole body arrived)."""

    __slots__ = ("complete", "data", "seen", "too_large")

    def __init__(self) -> None:
        self.data = bytearray()
        self.too_large = False
        self.seen = 0
        self.complete = False


async def not_http(scope: dict[str, Any], receive: _Receive, send: _Send) -> bool:
    """Answer a scope other than ``http`` (lifespan, websocket); False for ``http``."""
    kind = scope["type"]
    if kind == "http":
        return False
    if kind == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return True
    await send({"type": "websocket.close", "code": 1000})  # websocket: not served
    return True


async def read_body(
    scope: dict[str, Any], receive: _Receive, send: _Send, *, limit: int, timeout_s: float
) -> RequestBody | None:
    """The request's whole body, whatever its framing, within ``timeout_s`` (else a
    408 is sent); ``too_large`` past ``limit`` (some of the rest is read and dropped,
    so the client reads the answer). None when there is nothing to answer: the 408 is
    sent, or the client went before its body was in."""
    if _coded(scope):
        # llhttp took the chunked framing off; another coding would reach the app as
        # it was sent (RFC 9112, 6.1: a server answers an unknown coding with 501)
        answer = json_error(
            501, "unsupported_transfer_encoding", "send the body plain or chunked, not encoded"
        )
        await send_answer(send, answer, close=True)
        return None
    body = RequestBody()
    declared = _declared_length(scope)
    if declared is not None and declared > limit + _DRAIN_BYTES:
        body.too_large, body.seen = True, declared  # not read at all; closed after
        return body
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                message = await receive()
                if message["type"] != "http.request":  # http.disconnect
                    break
                chunk = message.get("body", b"")
                body.seen += len(chunk)
                if body.seen > limit:
                    body.too_large = True
                    body.data.clear()
                elif chunk:
                    body.data += chunk
                if not message.get("more_body", False):
                    body.complete = True
                    break
                if body.too_large and body.seen > limit + _DRAIN_BYTES:
                    break  # answered 413, and the connection closes
    except TimeoutError:
        late = json_error(408, "request_timeout", "the request body did not arrive in time")
        await send_answer(send, late, close=True)
        return None
    if not body.complete and not body.too_large:
        return None
    return body


def _coded(scope: dict[str, Any]) -> bool:
    """Whether the request's body comes in a transfer coding besides chunked."""
    codings = [
        c.strip().lower()
        for k, v in scope["headers"]
        if k == b"transfer-encoding"
        for c in v.decode("latin-1").split(",")
    ]
    return any(codings) and [c for c in codings if c] != ["chunked"]


class WsgiAdapter:
    """An ASGI app that runs a WSGI app on a thread pool once a request is all in."""

    def __init__(
        self,
        app: Any,
        executor: ThreadPoolExecutor,
        *,
        max_body_bytes: int,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.executor = executor
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: dict[str, Any], receive: _Receive, send: _Send) -> None:
        if await not_http(scope, receive, send):
            return
        body = await read_body(
            scope, receive, send, limit=self.max_body_bytes, timeout_s=self.body_timeout_s
        )
        if body is None:
            return
        environ = _environ(scope, body, self.max_body_bytes)
        loop = asyncio.get_running_loop()
        close = not body.complete
        run = functools.partial(self._run, environ, loop, send, close)
        answer: _Answer | None = await loop.run_in_executor(self.executor, run)
        if answer is None:  # streamed: the head and the pieces are sent
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            await send_answer(send, answer, close=close)

    def _run(
        self,
        environ: dict[str, Any],
        loop: asyncio.AbstractEventLoop,
        send: _Send,
        close: bool,
    ) -> _Answer | None:
        """The WSGI call, on a pool thread. An app that gives its body in one piece (a
        Flask response) gets it back whole (status, headers, body) for the loop to send;
        one that gives more pieces has them sent as they come (streamed, ``None``)."""
        head: list[Any] = []
        first: list[bytes] = []
        streamed = False

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            head[:] = [int(status.split(" ", 1)[0]), headers]
            return first.append

        def push(message: dict[str, Any]) -> None:
            asyncio.run_coroutine_threadsafe(send(message), loop).result()

        try:
            result: Iterable[bytes] = self.app(environ, start_response)
            try:
                for chunk in result:
                    if not chunk:
                        continue
                    if not streamed and not first:
                        first.append(chunk)
                        continue
                    if not streamed:
                        status, headers = head
                        push(_head(status, headers, None, close=close))
                        push({"type": "http.response.body", "body": first[0], "more_body": True})
                        streamed = True
                    push({"type": "http.response.body", "body": chunk, "more_body": True})
            finally:
                end = getattr(result, "close", None)
                if end is not None:
                    end()
        except Exception as e:  # the app's own handlers answer its errors; this is a bug
            logging.getLogger("pa_bridge.wsgi").error("wsgi app failed: %s", type(e).__name__)
            if streamed:
                return None  # the head is gone: the body ends short
            return json_error(
                500, "internal_error", "pa-bridge hit an unexpected error; it was logged"
            )
        if streamed:
            return None
        if not head:
            return json_error(500, "internal_error", "the app gave no answer")
        return head[0], head[1], b"".join(first)


def _declared_length(scope: dict[str, Any]) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _environ(scope: dict[str, Any], body: RequestBody, limit: int) -> dict[str, Any]:
    server = scope.get("server") or ("localhost", 80)
    client = scope.get("client")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": "",
        "PATH_INFO": scope["path"].encode("utf-8").decode("latin-1"),
        "QUERY_STRING": scope["query_string"].decode("latin-1"),
        "RAW_URI": scope["raw_path"].decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1]),
        "SERVER_PROTOCOL": f"HTTP/{scope['http_version']}",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    if client is not None:
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = str(client[0]), str(client[1])
    for raw_name, raw_value in scope["headers"]:
        name = raw_name.decode("latin-1")
        if name == "content-length":
            key = "CONTENT_LENGTH"
        elif name == "content-type":
            key = "CONTENT_TYPE"
        elif name == "transfer-encoding":
            continue  # the body is whole: its framing is of no concern to the app
        else:
            key = "HTTP_" + name.upper().replace("-", "_")
        value = raw_value.decode("latin-1")
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    if body.too_large:
        # the app's own size check answers (413): it sees a length over its limit
        environ["CONTENT_LENGTH"] = str(max(body.seen, limit + 1))
        environ["wsgi.input"] = io.BytesIO()
    else:
        data = bytes(body.data)
        if data or "CONTENT_LENGTH" in environ:
            environ["CONTENT_LENGTH"] = str(len(data))
        environ["wsgi.input"] = io.BytesIO(data)
    environ["wsgi.input_terminated"] = True
    return environ


_NO_BODY = frozenset({204, 304})


def _head(
    status: int, headers: list[tuple[str, str]], length: int | None, *, close: bool
) -> dict[str, Any]:
    raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
    names = {k for k, _ in raw}
    if length is not None and b"content-length" not in names and b"transfer-encoding" not in names:
        if status not in _NO_BODY and status >= 200:
            raw.append((b"content-length", str(length).encode()))
    if close and b"connection" not in names:
        raw.append((b"connection", b"close"))
    return {"type": "http.response.start", "status": status, "headers": raw}


async def send_answer(send: _Send, answer: _Answer, *, close: bool) -> None:
    """Send ``(status, headers, body)`` whole (with its Content-Length)."""
    status, headers, data = answer
    await send(_head(status, headers, len(data), close=close))
    await send({"type": "http.response.body", "body": data, "more_body": False})


def server_tls_context(certfile: str | Path, keyfile: str | Path) -> ssl.SSLContext:
    """A server's TLS context: TLS 1.2 or newer, HTTP/1.1. A bad certificate or key
    raises here (``ssl.SSLError``, ``OSError``), so a listener fails at start."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    context.set_alpn_protocols(["http/1.1"])
    context.load_cert_chain(str(certfile), str(keyfile))
    return context


def certificate_not_after(certfile: str | Path) -> float | None:
    """When the first certificate of a PEM chain expires (epoch seconds); None when it
    cannot be read (the listener's start says why)."""
    from cryptography import x509

    try:
        leaf = x509.load_pem_x509_certificates(Path(certfile).read_bytes())[0]
    except (OSError, ValueError, IndexError):
        return None
    return leaf.not_valid_after_utc.timestamp()


class _GuardedHttp(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (httptools) with what it lacks against slow clients:
    a request's line and headers must be in within ``header_timeout_s`` of the
    connection's start (or of the request's first byte on a kept-alive connection),
    and be at most ``max_head_bytes``; else the connection closes. (uvicorn closes an
    idle kept-alive connection itself, after ``timeout_keep_alive``.)"""

    header_timeout_s = HEADER_TIMEOUT_S
    max_head_bytes = MAX_HEAD_BYTES

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = self.loop.call_later(
            self.header_timeout_s, self._head_too_late
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_too_late)

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._stop_head_timer()
        super().on_headers_complete()

    def _count_head(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > self.max_head_bytes and not self.transport.is_closing():
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                b"content-length: 0\r\nconnection: close\r\n\r\n"
            )
            self.transport.close()

    def _stop_head_timer(self) -> None:
        timer, self._head_timer = getattr(self, "_head_timer", None), None
        if timer is not None:
            timer.cancel()

    def _head_too_late(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def _bind(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say so
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and host in ("::", ""):
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class WsgiServer(Listening):
    """A WSGI app served on ``host:port``, HTTPS with ``ssl_context`` (see
    :func:`server_tls_context`). ``numthreads`` run the app; connections take none."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        name: str = "wsgi",
        numthreads: int = DEFAULT_THREADS,
        ssl_context: ssl.SSLContext | None = None,
        shutdown_timeout: float = 5,
        max_body_bytes: int | None = None,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        body_timeout_s: float = BODY_TIMEOUT_S,
        backlog: int = 1024,
        use_uvloop: bool = True,
    ) -> None:
        self.name = name
        self._app = app
        self._host = host
        self._port = port
        self._numthreads = numthreads
        self._ssl_context = ssl_context
        self._shutdown_timeout = shutdown_timeout
        if max_body_bytes is None:
            config = getattr(app, "config", None)
            limit = config.get("MAX_CONTENT_LENGTH") if isinstance(config, dict) else None
            max_body_bytes = int(limit) if limit else DEFAULT_MAX_BODY_BYTES
        self.max_body_bytes = max_body_bytes
        self._header_timeout_s = header_timeout_s
        self._body_timeout_s = body_timeout_s
        self._backlog = backlog
        self._use_uvloop = use_uvloop
        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self._bound: tuple[str, int] | None = None

    @classmethod
    def from_listen(cls, app: Any, listen: str, **kw: Any) -> WsgiServer:
        """From a ``host:port`` (``[::1]:8470``) string as in the config."""
        host, port = parse_listen(listen)
        return cls(app, host, port, **kw)

    def start(self) -> WsgiServer:
        if self._thread is not None:
            return self
        sock = _bind(self._host, self._port, self._backlog)
        addr = sock.getsockname()
        self._bound = (str(addr[0]), int(addr[1]))
        executor = ThreadPoolExecutor(self._numthreads, thread_name_prefix=f"wsgi-{self.name}")
        app = WsgiAdapter(
            self._app,
            executor,
            max_body_bytes=self.max_body_bytes,
            body_timeout_s=self._body_timeout_s,
        )
        protocol = type(
            "_Http",
            (_GuardedHttp,),
            {"header_timeout_s": self._header_timeout_s, "max_head_bytes": MAX_HEAD_BYTES},
        )
        config = uvicorn.Config(
            app,
            interface="asgi3",
            http=protocol,
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            date_header=True,
            timeout_keep_alive=max(1, math.ceil(self._header_timeout_s)),
            timeout_graceful_shutdown=max(1, math.ceil(self._shutdown_timeout)),
            backlog=self._backlog,
        )
        config.load()
        config.ssl = self._ssl_context  # ours: TLS 1.2 at least (server_tls_context)
        server = uvicorn.Server(config)
        started = threading.Event()

        def run() -> None:
            loop = _new_loop(self._use_uvloop)
            asyncio.set_event_loop(loop)
            started.set()
            try:
                loop.run_until_complete(server.serve(sockets=[sock]))
            except BaseException as e:  # pragma: no cover - logged, the listener is gone
                logging.getLogger("pa_bridge.wsgi").error(
                    "%s listener stopped: %s", self.name, type(e).__name__
                )
            finally:
                executor.shutdown(wait=True)
                with contextlib.suppress(Exception):
                    loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._server = server
        self._thread = threading.Thread(target=run, name=f"wsgi-{self.name}", daemon=True)
        self._thread.start()
        started.wait()
        return self

    @property
    def scheme(self) -> str:
        return "https" if self._ssl_context is not None else "http"

    @property
    def alive(self) -> bool:
        """Started, and its event loop still runs."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop taking connections and finish the requests in flight."""
        thread, server = self._thread, self._server
        self._thread = self._server = None
        if server is not None:
            server.should_exit = True  # its loop checks every 0.1 s
        if thread is not None:
            thread.join(timeout=self._shutdown_timeout + 5)

    def __enter__(self) -> WsgiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _new_loop(use_uvloop: bool) -> asyncio.AbstractEventLoop:
    """uvloop's loop where installed (less CPU per request), else asyncio's own."""
    if not use_uvloop:
        return asyncio.new_event_loop()
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
