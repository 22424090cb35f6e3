"""A test dispensing system: it talks to its switch as dispensing systems do, over a
kept-alive TCP connection (TLS when given a context), each request framed by the
trading partner's framing profile, and waits for the answer frame. Pointed at
pa-bridge's inline listener instead of the switch, nothing in it changes.

It knows a primary host and optional backups, as dispensing systems are configured:
when the connection breaks or no answer comes within ``timeout``, the claim is sent
again to the next host (the fail-over docs/operations.md describes)."""

from __future__ import annotations

import socket
import ssl
import time

from ncpdp.framing import Frame, Framing

__all__ = ["DispensingClient", "SwitchDown"]


class SwitchDown(Exception):
    """The host closed the connection, or did not answer in time."""


class DispensingClient:
    def __init__(
        self,
        hosts: list[tuple[str, int]] | tuple[str, int],
        framing: Framing | None = None,
        *,
        timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        server_hostname: str | None = None,
    ) -> None:
        self.hosts = [hosts] if isinstance(hosts, tuple) else list(hosts)
        self.framing = framing or Framing()
        self.timeout = timeout
        self.ssl_context = ssl_context
        self.server_hostname = server_hostname
        self._sock: socket.socket | None = None
        self._host: tuple[str, int] | None = None
        self._deframer = self.framing.deframer()
        self._frames: list[Frame] = []
        #: the hosts each claim was answered by, in order
        self.answered_by: list[tuple[str, int]] = []

    # ---- one connection ------------------------------------------------------------
    def connect(self, host: tuple[str, int] | None = None) -> None:
        self.close()
        host = host or self.hosts[0]
        sock = socket.create_connection(host, timeout=self.timeout)
        if self.ssl_context is not None:
            sock = self.ssl_context.wrap_socket(
                sock, server_hostname=self.server_hostname or host[0]
            )
        self._sock, self._host = sock, host
        self._deframer = self.framing.deframer()
        self._frames = []

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def send(self, payload: bytes) -> None:
        """Write one request frame on the open connection (connecting first)."""
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        try:
            self._sock.sendall(self.framing.frame(payload))
        except OSError as e:
            self.close()
            raise SwitchDown(f"send failed: {e}") from None

    def receive(self, timeout: float | None = None) -> Frame:
        """The next answer frame on the connection; :class:`SwitchDown` if the
        connection closes first or nothing complete comes within ``timeout``."""
        assert self._sock is not None, "not connected"
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self._frames:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SwitchDown("no answer in time")
            self._sock.settimeout(left)
            try:
                data = self._sock.recv(65_536)
            except TimeoutError:
                raise SwitchDown("no answer in time") from None
            except OSError as e:
                self.close()
                raise SwitchDown(f"connection broken: {e}") from None
            if not data:
                self.close()
                raise SwitchDown("connection closed by the host")
            self._frames.extend(self._deframer.feed(data))
        return self._frames.pop(0)

    def exchange(self, payload: bytes, timeout: float | None = None) -> Frame:
        """Send one request and wait for its answer, on the open connection."""
        self.send(payload)
        return self.receive(timeout)

    # ---- what a dispensing system does on a claim ----------------------------------------
    def claim(self, payload: bytes) -> Frame:
        """The answer to one claim: from the primary host, else (connection broken or
        timed out) sent again to each backup in turn."""
        last: Exception | None = None
        for host in self.hosts:
            try:
                if self._host != host or self._sock is None:
                    self.connect(host)
                frame = self.exchange(payload)
            except (SwitchDown, OSError) as e:
                last = e
                self.close()
                continue
            self.answered_by.append(host)
            return frame
        raise SwitchDown(f"every host failed: {last}")

    @property
    def connected(self) -> bool:
        return self._sock is not None

    def __enter__(self) -> DispensingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
