"""The hand-over between the callback listener's child and the daemon (decision 0008).

The child sends each request's body to the daemon over a Unix socket in a private
directory, one connection per request in flight, and answers with whatever the daemon
replies, which the daemon sends only after the commit. One thread of the daemon reads
every body that is waiting, hands them to its ``handle`` at once (so they commit
together) and replies to each.

Frames, both ways length-prefixed: to the daemon ``!BHI`` (kind, text length, body
length), the text, the body; back ``!HI`` (HTTP status, payload length), the payload
(the JSON answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import selectors
import shutil
import socket
import struct
import tempfile
import threading
from collections.abc import Callable
from typing import NamedTuple

from ..logs import log_event

__all__ = [
    "IN_FLIGHT",
    "KIND_CALLBACK",
    "KIND_TOO_LARGE",
    "KIND_UNAUTHORIZED",
    "AsyncFrontChannel",
    "FrameServer",
    "Handler",
    "Message",
    "internal_error_reply",
    "unavailable_reply",
]

KIND_CALLBACK = 1  #: text: the content type; body: the callback as received
KIND_UNAUTHORIZED = 2  #: text: the remote address; nothing is stored, only counted
KIND_TOO_LARGE = 3  #: nothing is stored, only counted

#: Callbacks the child hands to the daemon at once (so at most this many go into one
#: commit); the rest wait on its event loop with their bodies read. With request
#: threads (decision 0008) 8 was best, since more threads fought over the child's GIL;
#: the loop has no such threads (decision 0013), and 16 put twice as many callbacks in
#: each commit: callbacks_bench 1566 acks/s (0.61x) against 838 (0.34x) with 8.
IN_FLIGHT = 16

#: The socket's name in the daemon's private directory.
SOCKET_NAME = "callbacks.sock"

_ASK = struct.Struct("!BHI")
_REPLY = struct.Struct("!HI")


class Message(NamedTuple):
    kind: int
    text: str
    body: bytes


#: The daemon's side of a batch: one ``(status, payload)`` per message, in order,
#: after the commit.
Handler = Callable[[list[Message]], list[tuple[int, bytes]]]


def _error_reply(status: int, code: str, message: str) -> tuple[int, bytes]:
    body = {"error": {"code": code, "message": message, "detail": None}}
    return status, json.dumps(body).encode()


def unavailable_reply() -> tuple[int, bytes]:
    """503: the callback was not committed; the service retries."""
    return _error_reply(503, "storage_unavailable", "the callback could not be stored; retry later")


def internal_error_reply() -> tuple[int, bytes]:
    """500: a bug, logged by whoever met it."""
    return _error_reply(500, "internal_error", "pa-bridge hit an unexpected error; it was logged")


def _recv_at_least(sock: socket.socket, n: int, first: bytes = b"") -> bytes:
    """At least ``n`` bytes. Each side sends one frame and then waits for the other,
    so nothing past the current frame can arrive."""
    buf = bytearray(first)
    while len(buf) < n:
        chunk = sock.recv(max(65536, n - len(buf)))
        if not chunk:
            raise ConnectionError("closed mid-frame")
        buf += chunk
    return bytes(buf)


def _read_message(sock: socket.socket) -> Message | None:
    """The next frame on ``sock``, or None when the child closed it (or broke it)."""
    try:
        data = sock.recv(65536)
        if not data:
            return None
        data = _recv_at_least(sock, _ASK.size, data)
        kind, tlen, blen = _ASK.unpack_from(data)
        total = _ASK.size + tlen + blen
        data = _recv_at_least(sock, total, data)
    except (OSError, ConnectionError):
        return None
    text = data[_ASK.size : _ASK.size + tlen].decode("utf-8", "replace")
    return Message(kind, text, data[_ASK.size + tlen : total])


# ---- the daemon's end ----------------------------------------------------------------
class FrameServer:
    """The daemon's end: a Unix socket in a private (0700) directory, and one thread
    ("callbacks-commit") that reads every frame waiting, hands them to ``handle`` at
    once and replies to each. ``handle`` runs on that thread only; an exception from
    it is a bug, answered 500 for the whole batch while the thread keeps serving."""

    def __init__(self, handle: Handler) -> None:
        self._handle = handle
        self.directory: str | None = None
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._wake: tuple[socket.socket, socket.socket] | None = None

    def start(self) -> FrameServer:
        self.directory = tempfile.mkdtemp(prefix="pa-bridge-")  # 0700: only our user connects
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(os.path.join(self.directory, SOCKET_NAME))
        listener.listen(128)
        self._listener = listener
        self._wake = socket.socketpair()  # stop() wakes the thread's select at once
        self._thread = threading.Thread(target=self._serve, name="callbacks-commit", daemon=True)
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop accepting; the thread ends once every connection is closed (stop the
        child first: its connections close when it exits)."""
        self._stopping.set()
        if self._wake is not None:
            with contextlib.suppress(OSError):
                self._wake[1].send(b"x")
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        if self._wake is not None and not self.alive:
            for end in self._wake:
                end.close()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)

    def _serve(self) -> None:
        assert self._listener is not None and self._wake is not None
        listener, wake = self._listener, self._wake[0]
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ)
        sel.register(wake, selectors.EVENT_READ)
        try:
            # until stopped and the child's connections are closed (listener, wake left)
            while not self._stopping.is_set() or len(sel.get_map()) > 2:
                batch: list[Message] = []
                conns: list[socket.socket] = []
                for key, _ in sel.select(timeout=0.2):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is wake:  # stop() was called: stopping is set
                        with contextlib.suppress(OSError):
                            wake.recv(64)
                        continue
                    if sock is listener:
                        with contextlib.suppress(OSError):
                            conn, _ = listener.accept()
                            conn.settimeout(5.0)
                            sel.register(conn, selectors.EVENT_READ)
                        continue
                    msg = _read_message(sock)
                    if msg is None:
                        sel.unregister(sock)
                        sock.close()
                        continue
                    batch.append(msg)
                    conns.append(sock)
                if not batch:
                    continue
                try:
                    replies = self._handle(batch)
                except Exception as e:  # a bug: answer 500 to each, keep serving
                    log_event(
                        "callbacks.handler_error", level=logging.ERROR, error=type(e).__name__
                    )
                    replies = [internal_error_reply()] * len(batch)
                for sock, (status, payload) in zip(conns, replies, strict=True):
                    try:
                        sock.sendall(_REPLY.pack(status, len(payload)) + payload)
                    except OSError:
                        sel.unregister(sock)
                        sock.close()
        finally:
            for key in list(sel.get_map().values()):
                if key.fileobj is not wake:
                    with contextlib.suppress(OSError):
                        key.fileobj.close()  # type: ignore[union-attr]
            sel.close()


# ---- the child's end -----------------------------------------------------------------
class AsyncFrontChannel:
    """The listener's connections to the daemon, used from its event loop: at most
    ``size`` asks in flight (so at most that many callbacks go into one commit), each on
    a connection of its own, kept for the next ask."""

    def __init__(self, directory: str, timeout_s: float, size: int = IN_FLIGHT) -> None:
        self.path = os.path.join(directory, SOCKET_NAME)
        self.timeout_s = timeout_s
        self._slots = asyncio.Semaphore(size)
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def ask(self, kind: int, text: str, body: bytes) -> tuple[int, bytes]:
        """The daemon's (status, payload); a 503 answer if the daemon cannot be reached."""
        async with self._slots:
            conn = self._idle.pop() if self._idle else None
            try:
                async with asyncio.timeout(self.timeout_s):
                    if conn is None:
                        conn = await asyncio.open_unix_connection(self.path)
                    reader, writer = conn
                    raw = text.encode("utf-8")[:65535]
                    writer.write(_ASK.pack(kind, len(raw), len(body)) + raw + body)
                    await writer.drain()
                    status, n = _REPLY.unpack(await reader.readexactly(_REPLY.size))
                    payload = await reader.readexactly(n)
            except (OSError, asyncio.IncompleteReadError, TimeoutError):
                if conn is not None:
                    conn[1].close()
                return unavailable_reply()
            except BaseException:  # cancelled: the reply may still come, on this connection
                if conn is not None:
                    conn[1].close()
                raise
            self._idle.append(conn)
            return status, payload

    async def aclose(self) -> None:
        """Close the connections kept for the next ask (at the listener's stop)."""
        idle, self._idle = self._idle, []
        for _, writer in idle:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()
