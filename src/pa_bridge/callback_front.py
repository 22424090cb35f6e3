"""The callback listener in a process of its own (decision 0008).

The daemon's own process keeps the single writer (decision 0004). The HTTP side of
``POST /callbacks/pharmacy`` (TLS, HTTP parsing, credentials, size limit, Flask) runs
in a child process, so that it does not share the daemon's GIL with the SQL. Each
request thread of the child hands the body to the daemon over a Unix socket in a
private directory (one connection per thread) and answers with whatever the daemon
replies, which the daemon sends only after the commit. One thread of the daemon reads
every body that is waiting, commits them together (group commit) and replies to each.

The child stops when its stdin (a pipe from the daemon) reaches end of file: the
daemon closes it to stop the child, which then finishes the requests in flight; the
child ignores SIGTERM and SIGINT. It also asks the kernel for SIGKILL when the daemon
goes (Linux), so a killed daemon leaves no listener behind. The daemon restarts a
child that exits on its own, on the same address.

Frames, both ways length-prefixed: to the daemon ``!BHI`` (kind, text length, body
length), the text, the body; back ``!HI`` (HTTP status, payload length), the payload
(the JSON answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import pickle
import select
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import NamedTuple

from .config import Settings
from .logs import log_event
from .wsgi import Listening

__all__ = [
    "CallbackFront",
    "CallbackFrontError",
    "IN_FLIGHT",
    "AsyncFrontChannel",
    "Message",
    "KIND_CALLBACK",
    "KIND_UNAUTHORIZED",
    "KIND_TOO_LARGE",
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

_ASK = struct.Struct("!BHI")
_REPLY = struct.Struct("!HI")


class Message(NamedTuple):
    kind: int
    text: str
    body: bytes


class CallbackFrontError(OSError):
    """The callback listener could not start (the message names the key)."""


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


def _readable(fd: int, timeout_s: float) -> bool:
    """poll, not select: with many connections open, descriptors pass 1023."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))


def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()


def _stop_child(proc: subprocess.Popen[bytes] | None) -> None:
    """End of file on its stdin is how the child is told to stop: it finishes the
    requests in flight and exits. (It ignores SIGTERM, which systemd sends to every
    process of the unit at once.)"""
    if proc is None:
        return
    if proc.poll() is None:
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _close_pipes(proc)


# ---- the daemon's side ---------------------------------------------------------------
class CallbackFront(Listening):
    """Starts, watches and stops the child; reads what its threads hand over and replies.

    ``handle`` gets every message waiting at once and returns one ``(status, payload)``
    per message, in order, after the commit. It runs on one thread of the daemon.
    Its ``address``/``port``/``scheme``/``url`` are those of :class:`WsgiServer`.
    """

    def __init__(
        self,
        settings: Settings,
        handle: Callable[[list[Message]], list[tuple[int, bytes]]],
        *,
        restart_delay_s: float = 1.0,
        start_timeout_s: float = 60.0,
    ) -> None:
        self.settings = settings
        self._handle = handle
        self._restart_delay_s = restart_delay_s
        self._start_timeout_s = start_timeout_s
        self._dir: str | None = None
        self._listener: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._bound: tuple[str, int] | None = None
        self._scheme = "http"
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.restarts = 0

    # -- lifecycle --
    def start(self) -> CallbackFront:
        self._dir = tempfile.mkdtemp(prefix="pa-bridge-")  # 0700: only our user connects
        path = os.path.join(self._dir, "callbacks.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(128)
        self._listener = listener
        serve = threading.Thread(target=self._serve, name="callbacks-commit", daemon=True)
        serve.start()
        self._threads.append(serve)
        try:
            self._spawn(self.settings.callbacks.listen)
        except BaseException:
            self.stop()
            raise
        watch = threading.Thread(target=self._watch, name="callbacks-watch", daemon=True)
        watch.start()
        self._threads.append(watch)
        return self

    def _spawn(self, listen: str) -> None:
        assert self._dir is not None
        proc = subprocess.Popen(
            [sys.executable, "-m", "pa_bridge.callback_front"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        # settings (with their secrets) go through the pipe, never argv or environment;
        # the pipe then stays open: its end of file tells the child to stop
        proc.stdin.write(pickle.dumps((self.settings, listen, self._dir)))
        proc.stdin.flush()
        if not _readable(proc.stdout.fileno(), self._start_timeout_s):
            proc.kill()
            proc.wait()
            _close_pipes(proc)
            raise CallbackFrontError(
                f"callbacks.listen {listen}: the listener did not start within"
                f" {self._start_timeout_s:g} s"
            )
        line = proc.stdout.readline().decode("utf-8", "replace").strip()
        if not line.startswith("ready "):
            proc.wait()
            _close_pipes(proc)
            raise CallbackFrontError(line.removeprefix("error ") or "the callback listener exited")
        _, host, port, scheme = line.split(" ")
        self._bound, self._scheme, self._proc = (host, int(port)), scheme, proc

    def _watch(self) -> None:
        """Restart the child on the same address if it exits while we run."""
        while not self._stopping.is_set():
            proc = self._proc
            if proc is None:
                return
            code = proc.wait()
            if self._stopping.is_set():
                return
            _close_pipes(proc)
            log_event("callbacks.listener_exited", level=logging.ERROR, returncode=code)
            while not self._stopping.wait(self._restart_delay_s):
                host, port = self.address
                try:
                    self._spawn(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
                except (CallbackFrontError, OSError) as e:
                    log_event(
                        "callbacks.listener_restart_failed", level=logging.ERROR, error=str(e)
                    )
                    continue
                self.restarts += 1
                log_event(
                    "callbacks.listener_restarted", pid=self._proc.pid if self._proc else None
                )
                break

    def stop(self) -> None:
        """Stop the child (it finishes the requests in flight), then our threads."""
        self._stopping.set()
        _stop_child(self._proc)
        for t in self._threads[1:]:  # the watcher ends once the child is gone
            if t is not threading.current_thread():
                t.join(timeout=self._start_timeout_s + 5)
        _stop_child(self._proc)  # one that a restart under way started meanwhile
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        for t in self._threads[:1]:  # the commit thread ends once the child's sockets close
            if t is not threading.current_thread():
                t.join(timeout=5)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    @property
    def alive(self) -> bool:
        """The child runs and the thread that commits for it too."""
        serving = bool(self._threads) and self._threads[0].is_alive()
        return serving and self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def scheme(self) -> str:
        return self._scheme

    # -- the commit thread --
    def _serve(self) -> None:
        """Read every message waiting, hand them to ``handle`` at once, reply to each."""
        assert self._listener is not None
        listener = self._listener
        sel = selectors.DefaultSelector()
        sel.register(listener, selectors.EVENT_READ)
        try:
            while not self._stopping.is_set() or len(sel.get_map()) > 1:
                batch: list[Message] = []
                conns: list[socket.socket] = []
                for key, _ in sel.select(timeout=0.2):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is listener:
                        with contextlib.suppress(OSError):
                            conn, _ = listener.accept()
                            conn.settimeout(5.0)
                            sel.register(conn, selectors.EVENT_READ)
                        continue
                    msg = self._read(sock)
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
                with contextlib.suppress(OSError):
                    key.fileobj.close()  # type: ignore[union-attr]
            sel.close()

    @staticmethod
    def _read(sock: socket.socket) -> Message | None:
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


# ---- the child's side ----------------------------------------------------------------
class AsyncFrontChannel:
    """The listener's connections to the daemon, used from its event loop: at most
    ``size`` asks in flight (so at most that many callbacks go into one commit), each on
    a connection of its own, kept for the next ask."""

    def __init__(self, directory: str, timeout_s: float, size: int = IN_FLIGHT) -> None:
        self.path = os.path.join(directory, "callbacks.sock")
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


def _die_with_parent() -> None:
    """Ask Linux for SIGKILL when the daemon goes (a no-op elsewhere)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def main() -> None:
    """``python -m pa_bridge.callback_front``: started by :class:`CallbackFront` only."""
    # the daemon decides when we stop: SIGTERM (systemd sends it to every process of
    # the unit) and SIGINT (a terminal's ^C reaches the whole group) are ignored
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    _die_with_parent()
    settings, listen, directory = pickle.load(sys.stdin.buffer)  # noqa: S301 - our parent's pipe
    if os.getppid() != parent:  # the daemon went before the kernel could be asked
        os._exit(0)
    from .logs import configure_logging
    from .web.callbacks import FrontApp, tls_context_for
    from .wsgi import WsgiServer

    configure_logging(settings.logging.level)
    app = FrontApp(settings, AsyncFrontChannel(directory, timeout_s=30.0))
    try:
        server = WsgiServer.from_listen(
            app,
            listen,
            name="callbacks",
            asgi=True,
            max_body_bytes=settings.callbacks.max_body_bytes,
            ssl_context=tls_context_for(settings),
        ).start()
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
