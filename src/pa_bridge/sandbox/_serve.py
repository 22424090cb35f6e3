"""Serve a WSGI app with cheroot on a background thread (the sandbox, test receivers)."""

from __future__ import annotations

import threading
from typing import Any

import cheroot.wsgi

__all__ = ["BackgroundWsgiServer"]


class BackgroundWsgiServer:
    """A cheroot server on a daemon thread. ``port=0`` binds a free port; ``url`` has
    the real one. ``ssl_adapter``: a ``cheroot.ssl`` adapter for HTTPS."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        numthreads: int = 10,
        ssl_adapter: Any = None,
        shutdown_timeout: int = 2,
    ) -> None:
        self._app = app
        self._host = host
        self._port = port
        self._numthreads = numthreads
        self._ssl_adapter = ssl_adapter
        self._shutdown_timeout = shutdown_timeout
        self._server: cheroot.wsgi.Server | None = None
        self._thread: threading.Thread | None = None
        self._bound: tuple[str, int] | None = None

    def start(self) -> BackgroundWsgiServer:
        if self._server is not None:
            return self
        server = cheroot.wsgi.Server(
            (self._host, self._port),
            self._app,
            numthreads=self._numthreads,
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
        self._thread = threading.Thread(target=server.serve, name="cheroot-serve", daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        if self._bound is None:
            raise RuntimeError("server is not started")
        return self._bound[1]

    @property
    def url(self) -> str:
        if self._bound is None:
            raise RuntimeError("server is not started")
        host = self._bound[0]
        if ":" in host:
            host = f"[{host}]"
        scheme = "https" if self._ssl_adapter is not None else "http"
        return f"{scheme}://{host}:{self._bound[1]}"

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.stop()
        if thread is not None:
            thread.join(timeout=self._shutdown_timeout + 5)

    def __enter__(self) -> BackgroundWsgiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
