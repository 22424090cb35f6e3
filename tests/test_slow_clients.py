"""Slow and idle clients (issue 19, decision 0013): neither listener gives a thread to
a connection whose request is not all in, so hundreds of them leave a normal claim
answered within its budget and a callback within 1 s; deadlines close the ones that
never finish; chunked bodies are read whole (and refused whole when too large)."""

from __future__ import annotations

import json
import resource
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from flask import Flask, Response, request

from pa_bridge.wsgi import WsgiServer
from tests import builders as b
from tests.support import NO_SERVICE, DaemonProcess, wait_until

SLOW = 500  # connections per listener sending a header line every DRIP_S
IDLE = 500  # connections per listener that send nothing
DRIP_S = 2.0


def _callback(pa_id: str) -> bytes:
    return json.dumps(
        {"request": {"id": pa_id, "workflow_status": "New", "delivery_id": f"slow-{pa_id}"}}
    ).encode()


@pytest.fixture
def many_files() -> Iterator[None]:
    """The test holds 2,000 connections (the daemon raises its own limit, decision 0013)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 8192 if hard == resource.RLIM_INFINITY else min(8192, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    if wanted < 2 * (SLOW + IDLE) + 200:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is too low for this drill")
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class Crowd:
    """Connections to one listener: ``slow`` send a request line, then a header line
    every :data:`DRIP_S` seconds (never the blank line that ends the headers); ``idle``
    send nothing."""

    def __init__(self, port: int, path: str) -> None:
        self.port, self.path = port, path
        self.slow: list[socket.socket] = []
        self.idle: list[socket.socket] = []

    def _connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.settimeout(None)  # blocking mode: MSG_DONTWAIT then reads without waiting
        return s

    def open(self, slow: int, idle: int) -> None:
        for _ in range(slow):
            s = self._connect()
            s.sendall(f"POST {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())
            self.slow.append(s)
        for _ in range(idle):
            self.idle.append(self._connect())

    def drip(self, n: int) -> None:
        for s in self.slow:
            try:
                s.sendall(f"X-Slow-{n}: {'a' * 8}\r\n".encode())
            except OSError:
                pass  # closed by the server: counted by still_open()

    def still_open(self) -> int:
        """Connections the server has not closed (nothing to read, no end of file)."""
        n = 0
        for s in self.slow + self.idle:
            try:
                data = s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
            except BlockingIOError:
                n += 1
            except OSError:
                pass
            else:
                assert data, "the server answered a request that was never finished"
        return n

    def close(self) -> None:
        for s in self.slow + self.idle:
            s.close()


@pytest.mark.slow
def test_500_slow_and_500_idle_connections_on_each_listener(
    tmp_path: Path, many_files: None
) -> None:
    d = DaemonProcess(tmp_path, env={"PA_BRIDGE_SANDBOX__STEP_SECONDS": "0.1"}).start()
    crowds = [Crowd(d.intake_port, "/v1/claims"), Crowd(d.callback_port, "/callbacks/pharmacy")]
    stop = threading.Event()
    rounds = threading.Semaphore(0)

    def dripper() -> None:
        n = 0
        while not stop.wait(DRIP_S):
            n += 1
            for c in crowds:
                c.drip(n)
            rounds.release()

    drip = threading.Thread(target=dripper, name="dripper", daemon=True)
    try:
        with httpx.Client(base_url=d.url, timeout=30) as api:
            # the warm path first: the sandbox's outcomes interface has been called once
            warm = api.post(
                "/v1/claims",
                json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75])),
            )
            assert warm.status_code == 200
            for c in crowds:
                c.open(SLOW, IDLE)
            drip.start()
            assert rounds.acquire(timeout=30)  # one header line more on every slow one
            for c in crowds:  # every connection is still held open by the server
                assert c.still_open() == SLOW + IDLE
            t0 = time.monotonic()
            r = api.post(
                "/v1/claims",
                json=b.exchange_json(b.request_bytes(), b.response_bytes([b.REJECT_75])),
            )
            claim_s = time.monotonic() - t0
            assert r.status_code == 200, r.text
            assert r.json()["message_source"] in ("outcomes", "fallback")
            assert claim_s < 1.5, f"a claim took {claim_s:.2f} s with slow clients open"
            with httpx.Client(timeout=30) as service:
                t0 = time.monotonic()
                cb = service.post(
                    f"http://127.0.0.1:{d.callback_port}/callbacks/pharmacy",
                    content=_callback("SLOW01"),
                )
                callback_s = time.monotonic() - t0
            assert cb.status_code == 200 and cb.json()["status"] == "stored"
            assert callback_s < 1.0, f"a callback took {callback_s:.2f} s with slow clients"
            assert rounds.acquire(timeout=30)  # and again after a second round of lines
            t0 = time.monotonic()
            assert api.get("/healthz").status_code == 200
            assert time.monotonic() - t0 < 1.0
    finally:
        stop.set()
        drip.join(10)
        for c in crowds:
            c.close()
        code = d.terminate()
    assert code == 0


# ---- the deadlines, on a listener of their own -----------------------------------------
@pytest.fixture
def echo() -> Iterator[WsgiServer]:
    app = Flask("echo")
    app.config["MAX_CONTENT_LENGTH"] = 1000

    @app.post("/echo")
    def echo_body() -> Response:
        data = request.get_data()
        return Response(json.dumps({"n": len(data)}), mimetype="application/json")

    server = WsgiServer(app, name="echo", header_timeout_s=0.5, body_timeout_s=0.5).start()
    try:
        yield server
    finally:
        server.stop()


def _read_all(s: socket.socket, timeout: float = 5.0) -> bytes:
    s.settimeout(timeout)
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return out
        out += chunk


def test_headers_not_in_by_the_deadline_close_the_connection(echo: WsgiServer) -> None:
    slow = socket.create_connection(("127.0.0.1", echo.port))
    idle = socket.create_connection(("127.0.0.1", echo.port))
    t0 = time.monotonic()
    slow.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\n")
    n = 0
    # a header line every 0.1 s (never idle, but past the 0.5 s deadline), until the
    # server closes the connection: each pause is a wait for that, bounded by 0.1 s
    while not _readable(slow) and time.monotonic() - t0 < 3.0:
        n += 1
        try:
            slow.sendall(f"X-{n}: y\r\n".encode())
        except OSError:
            break
        select.select([slow], [], [], 0.1)
    assert n >= 3  # it did send lines after the connection opened
    assert _read_all(slow) == b""  # closed without an answer
    assert _read_all(idle) == b""
    assert time.monotonic() - t0 < 3.0
    slow.close()
    idle.close()


def _readable(s: socket.socket) -> bool:
    """Something to read, or the end of the connection."""
    try:
        s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def test_a_body_not_in_by_its_deadline_is_408(echo: WsgiServer) -> None:
    with socket.create_connection(("127.0.0.1", echo.port), timeout=5) as s:
        s.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
        head, _, body = _read_all(s).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert json.loads(body)["error"]["code"] == "request_timeout"


def test_chunked_bodies_are_read_whole_and_refused_whole(echo: WsgiServer) -> None:
    def pieces(n: int, size: int = 100) -> Iterator[bytes]:
        for i in range(0, n, size):
            yield b"x" * min(size, n - i)

    with httpx.Client(timeout=10) as c:
        r = c.post(f"{echo.url}/echo", content=pieces(999))
        assert r.request.headers["transfer-encoding"] == "chunked"
        assert r.status_code == 200 and r.json() == {"n": 999}
        r = c.post(f"{echo.url}/echo", content=pieces(1001))
        assert (
            r.status_code == 413
        )  # the app's own 413 (ours are JSON: test_callbacks, test_intake)
        r = c.post(f"{echo.url}/echo", content=b"y" * 1001)  # and with a Content-Length
        assert r.status_code == 413
        r = c.post(f"{echo.url}/echo", content=b"y" * 1000)
        assert r.status_code == 200 and r.json() == {"n": 1000}


def test_a_body_in_another_transfer_coding_is_501(echo: WsgiServer) -> None:
    """Only the chunked framing is taken off; a body still gzip-coded (or in any
    other coding) is refused, not handed to the app as if it were plain."""
    for coding in ("gzip, chunked", "deflate,chunked", "x-custom , Chunked"):
        with socket.create_connection(("127.0.0.1", echo.port), timeout=5) as s:
            s.sendall(
                b"POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: "
                + coding.encode()
                + b"\r\n\r\n5\r\nabcde\r\n0\r\n\r\n"
            )
            got = _read_all(s)
        head, _, body = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 501"), (coding, head)
        assert json.loads(body)["error"]["code"] == "unsupported_transfer_encoding"
    with httpx.Client(timeout=10) as c:  # plain chunked still works
        r = c.post(f"{echo.url}/echo", content=iter([b"abc", b"de"]))
        assert r.status_code == 200 and r.json() == {"n": 5}


def test_stop_finishes_a_request_in_flight() -> None:
    app = Flask("slowapp")
    entered = threading.Event()
    release = threading.Event()

    @app.post("/work")
    def work() -> str:
        entered.set()
        release.wait(10)  # until the test has seen the stop begin
        return "done"

    server = WsgiServer(app, name="slowapp").start()
    result: dict[str, Any] = {}

    def call() -> None:
        result["r"] = httpx.post(f"{server.url}/work", content=b"x", timeout=10)

    t = threading.Thread(target=call)
    t.start()
    assert entered.wait(10)
    stopper = threading.Thread(target=server.stop)
    stopper.start()

    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        except OSError:
            return True
        return False

    wait_until(refused, timeout=10, what="the listener to stop taking connections")
    release.set()
    stopper.join(10)
    t.join(10)
    assert result["r"].status_code == 200 and result["r"].text == "done"
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{server.url}/work", content=b"x", timeout=2)


def test_a_port_in_use_fails_at_start() -> None:
    with WsgiServer(Flask("a"), name="a") as first:
        with pytest.raises(OSError):
            WsgiServer(Flask("b"), "127.0.0.1", first.port, name="b").start()


def test_the_daemon_raises_its_open_files_limit() -> None:
    # systemd's default soft limit (1024) would run out with 1,000 connections open
    code = (
        "import resource\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "from pa_bridge.runtime import raise_open_files_limit\n"
        "got = raise_open_files_limit()\n"
        "now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]\n"
        "print(got, now, hard)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    got, now, hard = (int(x) for x in out)
    wanted = 8192 if hard < 0 else min(8192, hard)
    assert got == now == wanted


def test_an_intake_port_in_use_stops_the_start_naming_the_key(make_daemon: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(OSError) as e:
            make_daemon(
                intake={"listen": f"127.0.0.1:{port}"},
                sandbox={"enabled": False},
                service=NO_SERVICE,
            )
    assert f"intake.listen 127.0.0.1:{port}" in str(e.value)


def test_uvicorns_protocol_still_has_what_the_header_guard_overrides() -> None:
    """``wsgi._GuardedHttp`` overrides uvicorn's ``HttpToolsProtocol`` (decision 0046):
    this fails when a uvicorn release renames or drops what it overrides, before the
    header deadline silently stops holding (the tests above say so by behaviour)."""
    import inspect

    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from pa_bridge.wsgi import _GuardedHttp

    overridden = {
        name
        for name, value in vars(_GuardedHttp).items()
        if (callable(value) and not name.startswith("_")) or name in ("connection_made",)
    }
    assert overridden >= {"on_url", "on_header", "on_headers_complete", "on_message_begin"}
    for name in overridden:
        theirs = getattr(HttpToolsProtocol, name, None)
        assert callable(theirs), name
        ours = inspect.signature(getattr(_GuardedHttp, name))
        assert list(inspect.signature(theirs).parameters) == list(ours.parameters), name
    # what the guard reads of the protocol: its loop and its transport
    assert "self.loop =" in inspect.getsource(HttpToolsProtocol.__init__)
    assert "self.transport =" in inspect.getsource(HttpToolsProtocol.connection_made)
