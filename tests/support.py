"""Helpers for end-to-end tests: free ports, waiting on conditions, the daemon as a
real subprocess, and a small recording fake of the PA service."""

from __future__ import annotations

import functools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import httpx
from click.testing import Result
from flask import Flask, request

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent

#: The ``cli`` fixture (conftest.py): ``cli("queue", "list", input=b"...", env={...})``
#: runs ``pa-bridge queue list`` in process and gives click's ``Result``.
Cli = Callable[..., Result]


#: a configured but unreachable PA service (callbacks never call it; no sandbox)
NO_SERVICE = {
    "claim_url": "http://127.0.0.1:9/claim",
    "outcomes_url": "http://127.0.0.1:9/outcomes",
    "username": "u",
    "password": "p",
    "api_key": "k",
}


#: ports handed out by free_port(): below Linux's ephemeral range (32768-60999), so an
#: outgoing connection's local port (the kernel draws those from that range) never takes
#: a port between the test choosing it and the daemon binding it
_PORTS = range(20000, 32000)


def free_port() -> int:
    """A loopback port nothing listens on now, for a process a test starts next."""
    for _ in range(200):
        port = random.choice(_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {_PORTS}")


def pa_bridge_process(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m pa_bridge ARGS`` as a real process in ``cwd`` (``env``: the whole
    environment, default ours), its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "pa_bridge", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def wait_until(
    fn: Callable[[], T], *, timeout: float = 15.0, interval: float = 0.02, what: str = ""
) -> T:
    """Poll ``fn`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
        except Exception as e:  # not ready yet
            last = e
        else:
            if last:
                return last
        threading.Event().wait(interval)
    raise AssertionError(f"timed out waiting for {what or fn}: last={last!r}")


def fleet_key(url: str) -> Path:
    """The encryption key every daemon on one PostgreSQL database reads (decision
    0033: required with storage.url), one per database."""
    import hashlib
    import tempfile

    from pa_bridge.encryption import create_key_file

    path = (
        Path(tempfile.gettempdir())
        / f"pa-bridge-test-{hashlib.sha256(url.encode()).hexdigest()[:16]}.key"
    )
    if not path.exists():
        create_key_file(path)
    return path


class DaemonProcess:
    """`pa-bridge serve` as a subprocess with its stderr captured to a file."""

    def __init__(
        self, cwd: Path, *, config: Path | None = None, env: dict[str, str] | None = None
    ) -> None:
        self.cwd = cwd
        self.config = config
        self.intake_port = free_port()
        self.callback_port = free_port()
        self.env = {
            **os.environ,
            "PA_BRIDGE_INTAKE__LISTEN": f"127.0.0.1:{self.intake_port}",
            "PA_BRIDGE_CALLBACKS__LISTEN": f"127.0.0.1:{self.callback_port}",
            "PA_BRIDGE_SANDBOX__LISTEN": "127.0.0.1:0",
            **(env or {}),
        }
        url = self.env.get("PA_BRIDGE_STORAGE__URL")
        if url and "PA_BRIDGE_ENCRYPTION__KEY_FILE" not in self.env:
            self.env["PA_BRIDGE_ENCRYPTION__KEY_FILE"] = str(fleet_key(url))
        self.log = cwd / f"daemon-{self.intake_port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.intake_port}"

    def start(self) -> DaemonProcess:
        cmd = [sys.executable, "-m", "pa_bridge", "serve"]
        if self.config is not None:
            cmd += ["--config", str(self.config)]
        with open(self.log, "ab") as fh:
            self.proc = subprocess.Popen(cmd, cwd=self.cwd, env=self.env, stdout=fh, stderr=fh)
        wait_until(self._ready, timeout=30, what="daemon /healthz")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(
                f"daemon exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}"
            )
        return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return int(self.proc.returncode)

    def log_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()


class RecordingService:
    """A fake PA service that records each claim and outcomes call and answers 200."""

    def __init__(self, port: int) -> None:
        from pa_bridge.runtime import WsgiServer

        self.claims: list[dict[str, str]] = []
        self.outcomes: list[dict[str, str]] = []
        self.lock = threading.Lock()
        app = Flask("recording-service")

        @app.post("/claim")
        def claim() -> tuple[str, int, dict[str, str]]:
            with self.lock:
                self.claims.append(request.form.to_dict())
            return (
                '{"request": {"id": "FAKE01"}, "urls": ["http://127.0.0.1/pa/FAKE01"]}',
                201,
                {"Content-Type": "application/json"},
            )

        @app.post("/outcomes")
        def outcomes() -> tuple[str, int, dict[str, str]]:
            with self.lock:
                self.outcomes.append(request.form.to_dict())
            return (
                '{"button_label": "", "message": "unchanged"}',
                200,
                {"Content-Type": "application/json"},
            )

        self.server = WsgiServer(app, "127.0.0.1", port, name="recording-service")

    def __enter__(self) -> RecordingService:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


@functools.cache
def _described_app() -> Any:
    from pa_bridge.web.intake import create_intake_app

    return create_intake_app(cast(Any, None), tokens=[], max_body_bytes=1 << 20)


def document(max_body_bytes: int = 1_048_576) -> dict[str, Any]:
    """The intake app's OpenAPI document (``web.openapi.document``, in an app's context)."""
    from pa_bridge.web.openapi import document as make

    with _described_app().app_context():
        return make(max_body_bytes)
