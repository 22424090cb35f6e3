"""Test doubles that talk real HTTP on 127.0.0.1.

* :class:`FakeHttpServer`: a purpose-built misbehaving HTTP server on a raw socket
  (trickle, stall before headers, reset mid-body, wrong content type, any status).
  One request per connection; every handler waits on the server's stop event, never
  sleeps, so ``stop()`` ends it at once.
* :class:`CallbackReceiver`: a small Flask app on our WsgiServer that records the sandbox's
  callbacks, optionally answering 500 first or demanding HTTP Basic credentials.
* :func:`wait_until`: wait for a condition with a deadline (tests never sleep).
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from flask import Flask, Response, request

from pa_bridge.wsgi import WsgiServer


def wait_until(
    predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01, what: str = ""
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        pause.wait(interval)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Reply:
    """What the fake does with one request.

    ``mode``: ``respond`` (status, headers, body), ``trickle`` (headers, then the body
    one byte at a time over ``seconds``), ``stall`` (read the request, never answer),
    ``stall_mid_body`` (headers and part of the body, then silence), ``reset``
    (headers and part of the body, then a TCP reset), ``close`` (close without a byte),
    ``raw`` (``body`` is the whole answer, status line and headers included, in one write),
    ``keep_then_drop`` / ``keep_then_reset`` (answer, then take the next request on the
    same connection and close it, with a FIN or a reset, without answering: a server
    timing out a kept-alive connection just as a request goes out; the dropped
    requests are in ``FakeHttpServer.dropped``).
    """

    status: int = 200
    body: bytes = b""
    content_type: str | None = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    mode: str = "respond"
    seconds: float = 2.0
    #: leave out "Connection: close" (the fake still closes after one answer, like a
    #: server ending an idle keep-alive connection)
    keep_alive: bool = False


_REASONS = {
    200: "OK",
    201: "Created",
    302: "Found",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    422: "Unprocessable Entity",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class FakeHttpServer:
    """A raw-socket HTTP/1.1 server whose answers are :class:`Reply` objects.

    ``reply`` is one Reply for every request, or a callable taking the recorded
    request. ``tls``: a server-side SSL context.
    """

    def __init__(
        self,
        reply: Reply | Callable[[RecordedRequest], Reply],
        *,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.reply = reply
        self.tls = tls
        self.requests: list[RecordedRequest] = []
        self.dropped: list[RecordedRequest] = []
        self.stop_event = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self) -> FakeHttpServer:
        self._acceptor.start()
        return self

    def __enter__(self) -> FakeHttpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stop_event.set()
        self._acceptor.join(timeout=5)
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in list(self._threads):
            t.join(timeout=5)
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._handle, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _handle(self, raw: socket.socket) -> None:
        conn: socket.socket = raw
        with self._lock:
            self._conns.add(raw)
        try:
            raw.settimeout(5)
            if self.tls is not None:
                conn = self.tls.wrap_socket(raw, server_side=True)
            req = self._read_request(conn)
            if req is None:
                return
            self.requests.append(req)
            reply = self.reply(req) if callable(self.reply) else self.reply
            self._answer(conn, reply)
            if reply.mode in ("keep_then_drop", "keep_then_reset"):
                dropped = self._read_request(conn)
                if dropped is not None:
                    self.dropped.append(dropped)
                    if reply.mode == "keep_then_reset":
                        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except (OSError, ssl.SSLError, ValueError):
            pass
        finally:
            with self._lock:
                self._conns.discard(raw)
            try:
                conn.close()
            except OSError:
                pass

    def _read_request(self, conn: socket.socket) -> RecordedRequest | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        return RecordedRequest(method, path, headers, body)

    def _head(self, reply: Reply) -> bytes:
        lines = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}"]
        if reply.content_type:
            lines.append(f"Content-Type: {reply.content_type}")
        lines.append(f"Content-Length: {len(reply.body)}")
        if not reply.keep_alive:
            lines.append("Connection: close")
        lines.extend(f"{k}: {v}" for k, v in reply.headers.items())
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _answer(self, conn: socket.socket, reply: Reply) -> None:
        if reply.mode == "close":
            return
        if reply.mode == "stall":
            self.stop_event.wait(reply.seconds)
            return
        if reply.mode == "raw":
            conn.sendall(reply.body)
            return
        conn.sendall(self._head(reply))
        if reply.mode in ("respond", "keep_then_drop", "keep_then_reset"):
            conn.sendall(reply.body)
        elif reply.mode == "trickle":
            interval = reply.seconds / max(len(reply.body), 1)
            for i in range(len(reply.body)):
                if i and self.stop_event.wait(interval):
                    return
                conn.sendall(reply.body[i : i + 1])
        elif reply.mode == "stall_mid_body":
            conn.sendall(reply.body[: len(reply.body) // 2])
            self.stop_event.wait(reply.seconds)
        elif reply.mode == "reset":
            conn.sendall(reply.body[: len(reply.body) // 2])
            # SO_LINGER 0: close() sends a TCP RST instead of a FIN.
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        else:
            raise ValueError(reply.mode)


def json_reply(status: int, data: Any, **kw: Any) -> Reply:
    return Reply(status=status, body=json.dumps(data).encode(), **kw)


class CallbackReceiver:
    """Records callbacks at ``/callbacks``. ``fail_first``: answer 500 that many times
    first. ``username``/``password``: demand those HTTP Basic credentials (401 else)."""

    def __init__(
        self,
        *,
        fail_first: int = 0,
        username: str | None = None,
        password: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.fail_first = fail_first
        self.attempts = 0
        self.received: list[dict[str, Any]] = []
        self.auth_failures = 0
        self._lock = threading.Lock()
        app = Flask("callback_receiver")

        @app.post("/callbacks")
        def callbacks() -> Response:
            if username is not None:
                expected = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()
                if request.headers.get("Authorization") != expected:
                    with self._lock:
                        self.auth_failures += 1
                    return Response("unauthorized", status=401)
            with self._lock:
                self.attempts += 1
                if self.attempts <= self.fail_first:
                    return Response("try again", status=500)
                self.received.append(request.get_json())
            return Response("ok", status=200)

        self._server = WsgiServer(app, ssl_context=ssl_context)

    @property
    def url(self) -> str:
        return self._server.url + "/callbacks"

    def statuses(self, pa_id: str | None = None) -> list[tuple[str, str | None]]:
        with self._lock:
            items = list(self.received)
        return [
            (r["request"]["workflow_status"], r["request"]["plan_outcome"])
            for r in items
            if pa_id is None or r["request"]["id"] == pa_id
        ]

    def for_pa(self, pa_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r["request"] for r in self.received if r["request"]["id"] == pa_id]

    def __enter__(self) -> CallbackReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
