"""The sandbox app served on a background thread (see the package's docstring)."""

from __future__ import annotations

from typing import Any

from ..wsgi import WsgiServer
from ._state import SandboxState
from .app import create_sandbox_app, sandbox_state
from .config import SandboxConfig

__all__ = ["SandboxServer"]


class SandboxServer:
    """The sandbox app served by `pa_bridge.wsgi.WsgiServer` on a background thread."""

    def __init__(
        self, config: SandboxConfig | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.config = config or SandboxConfig()
        self.app = create_sandbox_app(self.config)
        # Fault drills hold a worker each for up to 5 s: leave room for them.
        self._server = WsgiServer(
            self.app, host, port, name="sandbox", numthreads=32, shutdown_timeout=2
        )
        self._started = False

    @property
    def state(self) -> SandboxState:
        return sandbox_state(self.app)

    def start(self) -> SandboxServer:
        self._server.start()
        self._started = True
        self.state.portal = self.state.portal or self.url
        return self

    def stop(self) -> None:
        """Wake stalled drills, stop the clock and deliveries, then the HTTP server."""
        self.state.stop_event.set()
        if self._started:
            self._server.stop()
            self._started = False
        self.state.close()

    @property
    def url(self) -> str:
        return self._server.url

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def claim_url(self) -> str:
        """The claim interface in its default format (bare URL lines)."""
        return self.url + "/cmmimport/"

    @property
    def outcomes_url(self) -> str:
        return self.url + "/outcomes.json"

    @property
    def dashboard_url(self) -> str:
        return self.url + "/dashboard"

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for :class:`pa_bridge.client.PaServiceClient`."""
        return {
            "claim_url": self.claim_url,
            "outcomes_url": self.outcomes_url,
            "dashboard_url": self.dashboard_url,
            "username": self.config.username,
            "password": self.config.password,
            "api_key": self.config.api_key,
        }

    def __enter__(self) -> SandboxServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
