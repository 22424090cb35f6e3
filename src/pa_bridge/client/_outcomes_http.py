"""The outcomes call's HTTP path: kept-alive stdlib ``http.client`` connections.

Every 70/75/76 claim waits on one outcomes call, so its CPU cost is a claim's cost.
Measured on the project's 2-vCPU machine against the sandbox, one small form POST
costs about 0.28 ms of CPU through ``http.client`` and 0.97 ms through
``httpx.Client.post`` (see docs/decisions/0007-outcomes-http-path.md). The claim
and dashboard interfaces, which are rare and not latency bound, stay on httpx.

This module only moves bytes: the caller (``PaServiceClient.outcomes``) owns the
deadline, the answer's meaning and the fallback. Each blocking step gets the time
left as its socket timeout, and :meth:`OutcomesHttp.abort` lets a caller that gave up
at its deadline shut the socket under a worker still reading a trickle.
"""

from __future__ import annotations

import http.client
import os
import select
import socket
import ssl
import threading
import time
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

__all__ = ["OutcomesHttp", "Deadline", "TooLarge", "direct_route"]

_CHUNK = 16 * 1024


class Deadline(Exception):
    """The deadline passed during the call."""


class TooLarge(Exception):
    """The answer is larger than the limit."""


def direct_route(url: str) -> bool:
    """True when ``url`` is plain http(s) that no configured proxy applies to (httpx
    honours the proxy environment variables; this path does not, so it steps aside)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    proxies = getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return True
    return bool(proxy_bypass(parts.hostname))


class OutcomesHttp:
    """POST a body to one URL over a small LIFO pool of kept-alive connections."""

    def __init__(self, url: str, *, ssl_context: ssl.SSLContext | None, headers: dict[str, str]):
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._ctx = ssl_context
        self._headers = headers
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def _new(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=self._ctx
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _take(self) -> http.client.HTTPConnection | None:
        while True:
            with self._lock:
                if not self._idle:
                    return None
                conn = self._idle.pop()
            sock = conn.sock
            # An idle connection the server closed (or wrote to) is readable: drop it.
            if sock is not None and not _readable(sock):
                return conn
            _close(conn, sock)

    def _give(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < 32:
                self._idle.append(conn)
                return
        conn.close()

    def take_idle(self) -> http.client.HTTPConnection | None:
        """A kept-alive connection that is still open, or None."""
        return self._take()

    def post(
        self, body: bytes, deadline: float, *, limit: int, started: list[http.client.HTTPConnection]
    ) -> tuple[int, str, bytes]:
        """(status, content type, body). ``started`` receives the connection in use, so
        that :meth:`abort` can reach it from another thread."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Deadline("budget spent before the call started")
        conn = self._take() or self._new(remaining)
        started.append(conn)
        self.send(conn, body, deadline)
        return self.receive(conn, deadline, limit=limit)

    def send(self, conn: http.client.HTTPConnection, body: bytes, deadline: float) -> None:
        """Send the request on ``conn`` (connecting it first when new); on failure the
        connection is closed."""
        sock = conn.sock
        try:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Deadline("budget spent before the call started")
            if sock is not None:
                sock.settimeout(remaining)
            else:
                conn.timeout = remaining
            conn.request("POST", self._target, body=body, headers=self._headers)
        except BaseException:
            _close(conn, conn.sock or sock)
            raise

    def receive(
        self, conn: http.client.HTTPConnection, deadline: float, *, limit: int
    ) -> tuple[int, str, bytes]:
        """(status, content type, body) of the answer to what :meth:`send` sent; the
        connection goes back to the pool when it can be used again, else is closed."""
        ok = False
        sock = conn.sock
        try:
            _set_timeout(conn, deadline)
            resp = conn.getresponse()
            chunks: list[bytes] = []
            size = 0
            while True:
                _set_timeout(conn, deadline)
                if resp.length == 0:  # read1 leaves a complete body "open": finish it
                    resp.read()
                    break
                chunk = resp.read1(_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise TooLarge("answer too large")
                chunks.append(chunk)
            ok = resp.isclosed() and not resp.will_close
            return resp.status, resp.getheader("Content-Type") or "", b"".join(chunks)
        finally:
            if ok and time.monotonic() < deadline:
                self._give(conn)
            else:
                _close(conn, sock)

    @staticmethod
    def abort(started: list[http.client.HTTPConnection]) -> None:
        """Shut the socket of a call that its caller gave up on (from any thread)."""
        for conn in started:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            _close(conn, conn.sock)


def _close(conn: http.client.HTTPConnection, sock: socket.socket | None) -> None:
    """Close the connection and its socket. When ``getresponse`` fails inside the
    response's first read, http.client closes the socket object but the half-made
    response still holds a file on it, which keeps the descriptor open until garbage
    collection: free the descriptor now."""
    conn.close()
    if sock is not None and sock.fileno() != -1:
        os.close(sock.detach())


def _readable(sock: socket.socket) -> bool:
    """Readable now (poll, not select: descriptors above 1023 are fine)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _set_timeout(conn: http.client.HTTPConnection, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise Deadline("answer still arriving at the deadline")
    if conn.sock is not None:
        conn.sock.settimeout(remaining)
