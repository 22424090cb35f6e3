"""The outcomes call's HTTP path: kept-alive connections of our own, the answer read
by httptools (llhttp, the parser uvicorn serves the daemon's listeners with).

Every 70/75/76 claim waits on one outcomes call, and every paid claim's report is
one more, so its CPU cost is a claim's cost. One small form POST cost about 0.97 ms
of CPU through ``httpx.Client.post`` and 0.28 ms through ``http.client``
(decision 0007); of ``http.client``'s, the ``email`` package reading the header block
was the largest part (py-spy, issue 15). Here the request is written in one
``sendall`` (the same head ``http.client`` sends) and the answer fed to
``httptools.HttpResponseParser``: status, headers, ``Content-Length``, chunked, an
interim 1xx, a body that ends when the connection does, and keep-alive by version and
``Connection``, each by llhttp's rules. Decision 0029. The claim and dashboard
interfaces, rare and not latency bound, stay on httpx.

One request per connection (issue 32, decision 0036): HTTP/1.1 gives an answer
nothing that ties it to its request, and a service that sent an answer unasked on a
kept-alive connection had it shown to the next claim (15 of 30 claims in a drill). So
every request says ``Connection: close`` and its connection is closed after the
answer. The pool, the inline send and the retry on a stale connection below are kept
for ``keep_alive=True`` (the reader's tests) until issue 31 replaces this module.

This module only moves bytes: the caller (``PaServiceClient.outcomes``) owns the
deadline, the answer's meaning and the fallback. Each blocking step gets the time
left as its socket timeout, and :meth:`OutcomesHttp.abort` lets a caller that gave up
at its deadline shut the socket under a worker still reading a trickle. Failures are
``OSError`` (timeouts included) or ``http.client``'s exception classes, as before.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import time
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

import httptools

__all__ = ["OutcomesConnection", "OutcomesHttp", "Deadline", "TooLarge", "direct_route"]

_CHUNK = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024  # the status line and header block of one answer
MAX_HEADERS = 100  # http.client's limit


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


class OutcomesConnection:
    """One connection to the outcomes interface: its socket once connected."""

    __slots__ = ("sock",)

    def __init__(self) -> None:
        self.sock: socket.socket | None = None

    def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()


class OutcomesHttp:
    """POST a body to one URL over a small LIFO pool of kept-alive connections."""

    def __init__(
        self,
        url: str,
        *,
        ssl_context: ssl.SSLContext | None,
        headers: dict[str, str],
        keep_alive: bool = False,
    ):
        parts = urlsplit(url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port or (443 if self._https else 80)
        self._ctx = ssl_context
        if self._https and self._ctx is None:
            self._ctx = ssl.create_default_context()
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        #: one request per connection unless told otherwise (see the module's docstring)
        self._keep_alive = keep_alive
        if not keep_alive:
            headers = {**headers, "Connection": "close"}
        self._head = _request_head(target, self._host, self._port, self._https, headers)
        self._idle: list[OutcomesConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def take_idle(self) -> OutcomesConnection | None:
        """A kept-alive connection that is still open, or None."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                conn = self._idle.pop()
            sock = conn.sock
            # An idle connection the server closed (or wrote to) is readable: drop it.
            if sock is not None and not _readable(sock):
                return conn
            conn.close()

    def _give(self, conn: OutcomesConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < 32:
                self._idle.append(conn)
                return
        conn.close()

    def post(
        self, body: bytes, deadline: float, *, limit: int, started: list[OutcomesConnection]
    ) -> tuple[int, str, bytes]:
        """(status, content type, body). ``started`` receives each connection in use, so
        that :meth:`abort` can reach it from another thread. A kept-alive connection
        the server closed just before this call is replaced by a fresh one (see
        :meth:`receive_again`)."""
        if deadline - time.monotonic() <= 0:
            raise Deadline("budget spent before the call started")
        conn = self.take_idle()
        if conn is not None:
            started.append(conn)
            try:
                self.send(conn, body, deadline)
            except (BrokenPipeError, ConnectionResetError):
                pass  # it had been closed: the request did not go out; a fresh one below
            else:
                return self.receive_again(conn, body, deadline, limit=limit, started=started)
        return self._fresh(body, deadline, limit, started)

    def receive_again(
        self,
        conn: OutcomesConnection,
        body: bytes,
        deadline: float,
        *,
        limit: int,
        started: list[OutcomesConnection] | None = None,
        read_until: float | None = None,
    ) -> tuple[int, str, bytes]:
        """:meth:`receive` on a kept-alive connection. When the server closed it before
        a single byte of the answer came (it had timed the connection out as the
        request went out), ``body`` goes once more on a fresh connection, within
        ``deadline``: the race every client of kept-alive connections meets
        (decision 0029). ``read_until``: how long an answer already arriving may
        still be read (a later time than ``deadline``)."""
        try:
            return self.receive(conn, read_until or deadline, limit=limit)
        except http.client.RemoteDisconnected:
            if time.monotonic() >= deadline:
                raise
        return self._fresh(body, deadline, limit, started)

    def _fresh(
        self, body: bytes, deadline: float, limit: int, started: list[OutcomesConnection] | None
    ) -> tuple[int, str, bytes]:
        """``body`` on a new connection (put in ``started``, when given)."""
        conn = OutcomesConnection()
        if started is not None:
            started.append(conn)
        self.send(conn, body, deadline)
        return self.receive(conn, deadline, limit=limit)

    def send(self, conn: OutcomesConnection, body: bytes, deadline: float) -> None:
        """Send the request on ``conn`` (connecting it first when new); on failure the
        connection is closed."""
        try:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Deadline("budget spent before the call started")
            sock = conn.sock
            if sock is None:
                sock = conn.sock = self._connect(remaining)
            else:
                sock.settimeout(remaining)
            head, rest = self._head
            sock.sendall(b"%s%d\r\n%s%s" % (head, len(body), rest, body))
        except BaseException:
            conn.close()
            raise

    def _connect(self, timeout: float) -> socket.socket:
        sock = socket.create_connection((self._host, self._port), timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._ctx is not None:
                return self._ctx.wrap_socket(sock, server_hostname=self._host)
        except BaseException:
            sock.close()
            raise
        return sock

    def receive(
        self, conn: OutcomesConnection, deadline: float, *, limit: int
    ) -> tuple[int, str, bytes]:
        """(status, content type, body) of the answer to what :meth:`send` sent; the
        connection goes back to the pool when it can be used again, else is closed."""
        ok = False
        try:
            sock = conn.sock
            if sock is None:
                raise http.client.RemoteDisconnected("the connection is closed")
            answer = _read_answer(sock, deadline, limit)
            ok = answer.keep_alive
            return answer.status, answer.content_type, b"".join(answer.body)
        finally:
            if ok and self._keep_alive and time.monotonic() < deadline:
                self._give(conn)
            else:
                conn.close()

    @staticmethod
    def abort(started: list[OutcomesConnection]) -> None:
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
            conn.close()


def _request_head(
    target: str, host: str, port: int, https: bool, headers: dict[str, str]
) -> tuple[bytes, bytes]:
    """What ``http.client`` sends before a POST body, in two parts around the length's
    digits: the request line, ``Host`` (bracketed for IPv6, with the port unless it is
    the scheme's), ``Accept-Encoding: identity`` and ``Content-Length: ``; then the
    caller's headers and the blank line."""
    try:
        name = host.encode("ascii")
    except UnicodeEncodeError:
        name = host.encode("idna")
    if b":" in name:
        name = b"[" + name + b"]"
    if port != (443 if https else 80):
        name += b":%d" % port
    head = b"POST %s HTTP/1.1\r\nHost: %s\r\nAccept-Encoding: identity\r\nContent-Length: " % (
        target.encode("ascii"),
        name,
    )
    rest = b"".join(
        k.encode("latin-1") + b": " + v.encode("latin-1") + b"\r\n"
        for k, v in headers.items()
        if k.lower() != "content-length"
    )
    return head, rest + b"\r\n"


class _Answer:
    """httptools' callbacks for one answer. An interim 1xx answer is read past; bytes
    after the answer are not read as part of it, and the connection is not reused."""

    __slots__ = (
        "body",
        "content_type",
        "done",
        "fault",
        "framed",
        "head_done",
        "headers",
        "keep_alive",
        "limit",
        "parser",
        "size",
        "status",
        "trailing",
    )

    def __init__(self, limit: int) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.limit = limit
        self.status = 0
        self.content_type = ""
        self.headers = 0
        self.framed = False  # Content-Length or chunked: the body's end is known
        self.head_done = False
        self.body: list[bytes] = []
        self.size = 0
        self.done = False
        self.keep_alive = False
        self.trailing = False  # bytes came after the answer
        self.fault: Exception | None = None

    def on_message_begin(self) -> None:
        if self.done:
            self.trailing = True
            return
        self.content_type = ""
        self.headers = 0
        self.framed = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.done:
            return
        self.headers += 1
        if self.headers > MAX_HEADERS:
            self.fault = self.fault or http.client.HTTPException(
                f"got more than {MAX_HEADERS} headers"
            )
            return
        key = name.lower()
        if key == b"content-type":  # several: joined, as http.client's getheader does
            text = value.decode("latin-1").strip()
            self.content_type = f"{self.content_type}, {text}" if self.content_type else text
        elif key in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        if self.done:
            return
        self.status = self.parser.get_status_code()
        self.head_done = not (100 <= self.status < 200)

    def on_body(self, data: bytes) -> None:
        if self.done:
            return
        self.size += len(data)
        if self.size > self.limit:
            self.fault = self.fault or TooLarge("answer too large")
            return
        self.body.append(data)

    def on_message_complete(self) -> None:
        if self.done or not self.head_done:  # 100 Continue and kin: the answer is to come
            return
        self.done = True
        self.keep_alive = self.parser.should_keep_alive()


def _read_answer(sock: socket.socket, deadline: float, limit: int) -> _Answer:
    answer = _Answer(limit)
    head = 0
    while not answer.done:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise Deadline("answer still arriving at the deadline")
        sock.settimeout(remaining)
        try:
            data = sock.recv(_CHUNK)
        except ConnectionResetError:
            if head == 0:  # closed before a byte of the answer: say so as for a FIN
                raise http.client.RemoteDisconnected("the service reset the connection") from None
            raise
        if not data:
            if answer.head_done and not answer.framed and answer.status not in (204, 304):
                answer.done = True  # the body ended with the connection
                break
            if head == 0:
                raise http.client.RemoteDisconnected("the service closed without an answer")
            raise http.client.IncompleteRead(b"".join(answer.body))
        if not answer.head_done:
            head += len(data)
            if head > MAX_HEAD_BYTES:
                raise http.client.LineTooLong("the answer's header block")
        try:
            answer.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if not answer.done:
                raise http.client.HTTPException("the service switched protocols") from None
            answer.trailing = True
        except httptools.HttpParserError as e:
            if answer.fault is not None:
                raise answer.fault from None
            if not answer.done:
                if not answer.head_done:
                    raise http.client.BadStatusLine(f"not an HTTP answer: {e}") from None
                raise http.client.HTTPException(f"bad answer: {e}") from None
            answer.trailing = True  # the answer is whole; what came after it is not
        if answer.fault is not None:
            raise answer.fault
    if answer.trailing:
        answer.keep_alive = False
    return answer


def _readable(sock: socket.socket) -> bool:
    """Readable now (poll, not select: descriptors above 1023 are fine)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))
