"""One way to serve a WSGI app: cheroot on a background thread.

Used for the daemon's two listeners, the sandbox, and the tests' small servers. The
socket is bound in :meth:`WsgiServer.start`, so a port in use fails there; port 0
binds a free port and ``url`` has the real one.
"""

from __future__ import annotations

import threading
from typing import Any

import cheroot.wsgi

from .config import parse_listen

__all__ = ["Listening", "WsgiServer"]


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


class WsgiServer(Listening):
    """``ssl_adapter``: a ``cheroot.ssl`` adapter for HTTPS."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        name: str = "wsgi",
        numthreads: int = 16,
        ssl_adapter: Any = None,
        shutdown_timeout: int = 5,
    ) -> None:
        self.name = name
        self._app = app
        self._host = host
        self._port = port
        self._numthreads = numthreads
        self._ssl_adapter = ssl_adapter
        self._shutdown_timeout = shutdown_timeout
        self._server: cheroot.wsgi.Server | None = None
        self._thread: threading.Thread | None = None
        self._bound: tuple[str, int] | None = None

    @classmethod
    def from_listen(cls, app: Any, listen: str, **kw: Any) -> WsgiServer:
        """From a ``host:port`` (``[::1]:8470``) string as in the config."""
        host, port = parse_listen(listen)
        return cls(app, host, port, **kw)

    def start(self) -> WsgiServer:
        if self._server is not None:
            return self
        server = cheroot.wsgi.Server(
            (self._host, self._port),
            self._app,
            numthreads=self._numthreads,
            server_name=self.name,
            shutdown_timeout=int(self._shutdown_timeout),
            timeout=10,
        )
        # The connection loop's select() timeout: stop() waits for one tick of it
        # (0.5 s by default); a short tick makes stopping quick.
        server.expiration_interval = 0.05
        if self._ssl_adapter is not None:
            server.ssl_adapter = self._ssl_adapter
        server.prepare()
        addr = server.bind_addr
        assert isinstance(addr, tuple)
        self._bound = (str(addr[0]), int(addr[1]))
        self._server = server
        self._thread = threading.Thread(target=server.serve, name=f"wsgi-{self.name}", daemon=True)
        self._thread.start()
        return self

    @property
    def scheme(self) -> str:
        return "https" if self._ssl_adapter is not None else "http"

    def stop(self) -> None:
        """Stop taking connections and finish the requests in flight."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.stop()
        if thread is not None:
            thread.join(timeout=self._shutdown_timeout + 5)

    def __enter__(self) -> WsgiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
